"""An operator's input checked before anything changes (the CLI's and the portal's customers,
keys and credits): a whole number within a column's range, a short line of text. A refusal is an
``AccountError`` naming the field."""
from __future__ import annotations

from app.plumbing.errors import AccountError


def check_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise AccountError(f"{field} must be a whole number from {low} to {high}")
    return value


def check_text(field: str, value: str | None, max_length: int, *, required: bool) -> str:
    value = (value or "").strip()
    if required and not value:
        raise AccountError(f"{field} must not be empty")
    if len(value) > max_length:
        raise AccountError(f"{field} must have at most {max_length} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise AccountError(f"{field} must not contain control characters")
    return value
