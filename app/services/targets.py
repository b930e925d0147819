"""Target validation and kind inference (D4, as amended), in the order D2 fixes.

``normalize`` takes the raw ``target`` and ``kind`` (already known to be strings or
absent) and returns ``(kind, stored_target)`` or raises ``TargetError`` with the
first failing check: ``target_too_short``, then ``invalid_kind``, then
``invalid_target``.
"""
from __future__ import annotations

import re

from email_validator import EmailNotValidError, validate_email

from app.services.errors import InvalidRequest

KINDS = ("email", "phone", "username")
MIN_LENGTH = 3
MAX_LENGTH = 256

PHONE_INFER_RE = re.compile(r"^\+[0-9 ()-]{7,}$")
PHONE_SEPARATORS_RE = re.compile(r"[ ()-]")
E164_RE = re.compile(r"^\+[1-9][0-9]{6,14}$")
HANDLE_RE = re.compile(r"^[A-Za-z0-9._-]{3,64}$")
EMAIL_LOCAL_MAX = 64  # RFC 5321 4.5.3.1.1; email_validator does not enforce it


class TargetError(ValueError):
    def __init__(self, code: str, message: str, kind: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind


def infer_kind(target: str) -> str:
    # Amended D4: a leading "@" marks a handle ("@alice_smith"); any other "@" an address.
    if target.startswith("@"):
        return "username"
    if "@" in target:
        return "email"
    if PHONE_INFER_RE.match(target):
        return "phone"
    return "username"


def _email(target: str) -> str:
    try:
        # Syntax only: no DNS look-up (D4). test_environment admits reserved test domains.
        validate_email(target, check_deliverability=False, test_environment=True)
    except EmailNotValidError as exc:
        raise TargetError("invalid_target", f"target is not a valid e-mail address: {exc}", "email") from None
    local, _, domain = target.rpartition("@")
    if len(local) > EMAIL_LOCAL_MAX:
        raise TargetError("invalid_target",
                          f"target is not a valid e-mail address: the part before the @ has more than "
                          f"{EMAIL_LOCAL_MAX} characters", "email")
    return f"{local}@{domain.lower()}"


def _phone(target: str) -> str:
    number = PHONE_SEPARATORS_RE.sub("", target)
    if not E164_RE.match(number):
        raise TargetError("invalid_target",
                          "target is not an international phone number in E.164 form (+ and 7 to 15 digits)", "phone")
    return number


def _username(target: str) -> str:
    handle = target.removeprefix("@")
    if not HANDLE_RE.match(handle):
        raise TargetError("invalid_target",
                          "target is not a valid username (3 to 64 of A-Z, a-z, 0-9, '.', '_', '-')", "username")
    return handle


NORMALIZERS = {"email": _email, "phone": _phone, "username": _username}


def normalize(target: str, kind: str | None) -> tuple[str, str]:
    text = target.strip()
    if len(text) < MIN_LENGTH:
        raise TargetError("target_too_short", f"target must have at least {MIN_LENGTH} characters", kind)
    if kind is not None and kind not in KINDS:
        raise TargetError("invalid_kind", "kind must be one of email, phone, username", None)
    kind = kind or infer_kind(text)
    if len(text) > MAX_LENGTH:
        raise TargetError("invalid_target", f"target must have at most {MAX_LENGTH} characters", kind)
    return kind, NORMALIZERS[kind](text)


def normalize_or_refuse(target: str, kind: str | None, *, field: str | None = None) -> tuple[str, str]:
    """``normalize``, a refused target raised as the 400 a creation answers (``InvalidRequest``
    with the target's own code; ``field``: the request field named in its ``details`` too)."""
    try:
        return normalize(target, kind)
    except TargetError as exc:
        details = {field: [exc.message]} if field else None
        raise InvalidRequest(exc.message, code=exc.code, details=details) from None

