"""Webhook signatures: the service signs every delivery twice, a receiver checks either.

1. ``X-Service-Signature: sha256=<hex>`` (§6.3): HMAC-SHA256 over the raw body bytes,
   keyed with the secret string's UTF-8 bytes. ``sign`` / ``verify_signature``.
2. Standard Webhooks (D16): ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
   ``webhook-signature: v1,<base64>`` where the HMAC-SHA256 covers
   ``"{webhook-id}.{webhook-timestamp}.{body}"`` and is keyed with the base64-decoded
   part of the secret after ``whsec_``. During a secret rotation the header carries one
   ``v1,`` entry per active secret, separated by spaces. ``sign_standard`` /
   ``verify_standard``, which also refuses a timestamp more than 5 minutes from now,
   so a recorded delivery cannot be replayed later.

Every ``verify_*`` function takes one secret or a list of them (during a rotation a
receiver may hold both), compares in constant time and returns a bool. This module
depends on nothing but the standard library, so a customer can copy it into their own
receiver as it is.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Iterable, Mapping

SIGNATURE_HEADER = "X-Service-Signature"
PREFIX = "sha256="

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"
TOLERANCE_SECONDS = 5 * 60

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _secrets(secrets: str | Iterable[str]) -> list[str]:
    return [secrets] if isinstance(secrets, str) else [s for s in secrets if s]


# --- X-Service-Signature ------------------------------------------------------------------


def sign(secret: str, raw_body: bytes) -> str:
    """``sha256=`` + the lowercase hex HMAC-SHA256 of ``raw_body`` keyed with ``secret``."""
    return PREFIX + hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()


def verify_signature(secret: str | Iterable[str], raw_body: bytes, header_value: str | None) -> bool:
    """Whether ``header_value`` is the signature of ``raw_body`` under ``secret`` (or one of several).

    Compare the bytes exactly as received: re-serialising parsed JSON changes them.
    The comparison takes constant time, so a forger learns nothing from timing.
    This scheme does not cover the time of sending: prefer ``verify_standard``, which
    refuses replays.
    """
    if not header_value:
        return False
    # Bytes, because compare_digest refuses non-ASCII str and a header may hold anything.
    given = header_value.encode("utf-8")
    return any(hmac.compare_digest(sign(s, raw_body).encode("utf-8"), given) for s in _secrets(secret))


# --- Standard Webhooks --------------------------------------------------------------------


def decode_secret(secret: str) -> bytes | None:
    """The key bytes of a ``whsec_<base64>`` secret, or None when it is not one (padding optional)."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    encoded = secret[len(SECRET_PREFIX):]
    if not _BASE64.fullmatch(encoded):
        return None
    encoded = encoded.rstrip("=")
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True) or None
    except (binascii.Error, ValueError):
        return None


def secret_key(secret: str) -> bytes:
    """The HMAC key of the Standard Webhooks signature: the decoded base64 after ``whsec_``.

    A secret of another form (set before secrets had to be ``whsec_`` + base64) is used
    as its UTF-8 bytes, as ``X-Service-Signature`` uses it.
    """
    decoded = decode_secret(secret)
    return decoded if decoded is not None else secret.encode("utf-8")


def sign_standard(secrets: str | Iterable[str], msg_id: str, timestamp: int | str, raw_body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64>`` per secret, separated by spaces."""
    signed = f"{msg_id}.{timestamp}.".encode() + raw_body
    return " ".join("v1," + base64.b64encode(hmac.new(secret_key(s), signed, hashlib.sha256).digest()).decode()
                    for s in _secrets(secrets))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def verify_standard(secrets: str | Iterable[str], raw_body: bytes, headers: Mapping[str, str],
                    now: float | None = None, tolerance: int = TOLERANCE_SECONDS) -> bool:
    """Whether the Standard Webhooks headers sign ``raw_body`` under ``secrets`` (one or several)
    and ``webhook-timestamp`` is within ``tolerance`` seconds (5 minutes) of ``now``.

    ``headers`` is any mapping of the request's headers (names in any case).
    """
    msg_id = _header(headers, ID_HEADER)
    timestamp = _header(headers, TIMESTAMP_HEADER)
    signatures = _header(headers, STANDARD_SIGNATURE_HEADER)
    if not (msg_id and timestamp and signatures) or not timestamp.isascii() or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    given = [entry[3:].encode("utf-8") for entry in signatures.split(" ") if entry.startswith("v1,")]
    for secret in _secrets(secrets):
        expected = sign_standard(secret, msg_id, timestamp, raw_body)[3:].encode("utf-8")
        if any(hmac.compare_digest(expected, g) for g in given):
            return True
    return False
