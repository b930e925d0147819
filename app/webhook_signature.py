"""Webhook signatures (§6.3): HMAC-SHA256 over the raw body bytes.

The service signs every delivery with ``sign``; a receiver checks it with
``verify_signature``. This module depends on nothing but the standard library, so
a customer can copy it into their own receiver as it is.
"""
from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Service-Signature"
PREFIX = "sha256="


def sign(secret: str, raw_body: bytes) -> str:
    """``sha256=`` + the lowercase hex HMAC-SHA256 of ``raw_body`` keyed with ``secret``."""
    return PREFIX + hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, raw_body: bytes, header_value: str | None) -> bool:
    """Whether ``header_value`` is the signature of ``raw_body`` under ``secret``.

    Compare the bytes exactly as received: re-serialising parsed JSON changes them.
    The comparison takes constant time, so a forger learns nothing from timing.
    """
    if not header_value:
        return False
    # Bytes, because compare_digest refuses non-ASCII str and a header may hold anything.
    return hmac.compare_digest(sign(secret, raw_body).encode("utf-8"), header_value.encode("utf-8"))
