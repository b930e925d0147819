"""Webhook verification: both signature schemes every delivery carries.

- ``X-Service-Signature: sha256=<hex>``: HMAC-SHA256 of the raw body, keyed with the secret's
  UTF-8 bytes, lower-case hex.
- Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
  (``v1,<base64>`` entries separated by spaces, one per active secret), the HMAC-SHA256 of
  ``"{webhook-id}.{webhook-timestamp}.{body}"`` keyed with the base64-decoded part of the secret
  after ``whsec_``. A timestamp more than 5 minutes from now is refused, so a captured delivery
  cannot be replayed later.

Several secrets can be given (during a secret rotation both the current and the next one are
valid). Comparisons take constant time. Always verify the body bytes exactly as received.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping

from scan_api_client.errors import WebhookVerificationError
from scan_api_client.models import Scan, WebhookEvent

__all__ = [
    "SIGNATURE_HEADER",
    "TOLERANCE_SECONDS",
    "sign",
    "sign_standard",
    "verify_signature",
    "verify_standard",
    "verify_webhook",
]

SIGNATURE_HEADER = "X-Service-Signature"
TOLERANCE_SECONDS = 300
_PREFIX = "sha256="


def _secrets(secrets: str | Iterable[str]) -> list[str]:
    found = [secrets] if isinstance(secrets, str) else [s for s in secrets if s]
    if not found or not all(isinstance(s, str) and s for s in found):
        raise ValueError("at least one webhook secret (a non-empty str) is required")
    return found


def sign(secret: str, raw_body: bytes) -> str:
    """The ``X-Service-Signature`` value of ``raw_body`` under ``secret``."""
    return _PREFIX + hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()


def verify_signature(secrets: str | Iterable[str], raw_body: bytes, header_value: str | None) -> bool:
    """Whether ``header_value`` (``X-Service-Signature``) signs ``raw_body`` under one of ``secrets``."""
    if not header_value:
        return False
    given = header_value.strip().encode("utf-8")
    ok = False
    for secret in _secrets(secrets):
        ok |= hmac.compare_digest(sign(secret, raw_body).encode("utf-8"), given)
    return ok


def _standard_key(secret: str) -> bytes:
    text = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a Standard Webhooks secret is 'whsec_' followed by base64") from None


def sign_standard(secret: str, msg_id: str, timestamp: int | str, raw_body: bytes) -> str:
    """One ``webhook-signature`` entry, ``v1,<base64>``, as the service computes it."""
    signed = f"{msg_id}.{timestamp}.".encode() + raw_body
    return "v1," + base64.b64encode(hmac.new(_standard_key(secret), signed, hashlib.sha256).digest()).decode()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None:  # a plain dict is case-sensitive; requests', Flask's and Django's are not
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def verify_standard(secrets: str | Iterable[str], raw_body: bytes, headers: Mapping[str, str], *,
                    now: float | None = None, tolerance: int = TOLERANCE_SECONDS) -> None:
    """Check the Standard Webhooks headers; raises ``WebhookVerificationError`` saying why not."""
    msg_id, timestamp, signature = (_header(headers, h) for h in
                                    ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and timestamp and signature):
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header")
    try:
        sent = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a Unix time in seconds") from None
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance:
        raise WebhookVerificationError(f"webhook-timestamp is more than {tolerance} s away from now "
                                       "(a replay, or this machine's clock is wrong)")
    given = [entry.partition(",")[2].encode() for entry in signature.split() if entry.startswith("v1,")]
    ok = False
    for secret in _secrets(secrets):
        expected = sign_standard(secret, msg_id, timestamp, raw_body).partition(",")[2].encode()
        for candidate in given:
            ok |= hmac.compare_digest(expected, candidate)
    if not ok:
        raise WebhookVerificationError("no webhook-signature entry matches the body under the given secrets")


def verify_webhook(raw_body: bytes | str, headers: Mapping[str, str], secrets: str | Iterable[str], *,
                   now: float | None = None, tolerance: int = TOLERANCE_SECONDS) -> WebhookEvent:
    """Verify a delivery and return its event; raises ``WebhookVerificationError`` when it is not genuine.

    When the Standard Webhooks headers are present they are checked (timestamp included);
    otherwise ``X-Service-Signature`` is. ``headers`` is any mapping (case-insensitive or not).
    """
    if isinstance(raw_body, str):
        raw_body = raw_body.encode("utf-8")
    if _header(headers, "webhook-signature") is not None:
        verify_standard(secrets, raw_body, headers, now=now, tolerance=tolerance)
    elif not verify_signature(secrets, raw_body, _header(headers, SIGNATURE_HEADER)):
        raise WebhookVerificationError(f"{SIGNATURE_HEADER} is missing or does not match the body")
    try:
        body = json.loads(raw_body)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise WebhookVerificationError("the body is not a JSON object")
    delivery_id = _header(headers, "webhook-id") or _header(headers, "X-Service-Delivery")
    return WebhookEvent(event=str(body.get("event", "")), delivery_id=delivery_id, scan=Scan.from_dict(body),
                        livemode=body.get("livemode"), raw=body)
