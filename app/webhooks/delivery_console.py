"""The delivery console of a key's page (issue 19): one entry per delivery with its
attempts and the exact request it sends, signatures masked.

The rows are ``delivery_log.delivery_rows`` (the key's deliveries, ``LookupError`` for a key
of another customer: the portal's 404); the headers are the worker's own
(``signing_secrets.unsigned_headers``), rebuilt from the attempt's recorded time.
"""
from __future__ import annotations

from datetime import datetime

from app.plumbing.paging import Page
from app.plumbing.signatures import PREFIX, SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER, TIMESTAMP_HEADER
from app.webhooks import delivery_log, outbox, signing_secrets
from app.webhooks.models import PENDING, DeliveryAttempt, WebhookDelivery

MASK = "••••••••"
NOT_SENT = "(set when sent)"


def request_headers(delivery: WebhookDelivery, sent_at: datetime | None, signed: bool) -> list[tuple[str, str]]:
    """The headers an attempt made at ``sent_at`` carried: the timestamp is exact, the
    signatures are masks (they are proof of the secret)."""
    headers = signing_secrets.unsigned_headers(delivery, sent_at or delivery.created_at)
    if sent_at is None:
        headers["X-Service-Timestamp"] = headers[TIMESTAMP_HEADER] = NOT_SENT
    if signed:
        headers[SIGNATURE_HEADER] = PREFIX + MASK
        headers[STANDARD_SIGNATURE_HEADER] = "v1," + MASK
    return list(headers.items())


def _attempt(row: DeliveryAttempt) -> dict:
    return {"number": row.number, "started_at": row.started_at, "url": row.url, "status_code": row.status_code,
            "error": row.error, "duration_ms": row.duration_ms, "response_excerpt": row.response_excerpt or "",
            "outcome": row.outcome}


def _entry(delivery: WebhookDelivery, attempts: list[DeliveryAttempt], signed: bool) -> dict:
    last = attempts[0] if attempts else None
    return {
        "delivery_id": delivery.id, "event": delivery.event, "scan_id": delivery.scan_id,
        "endpoint_id": delivery.endpoint_id or outbox.first_endpoint_id(delivery.api_key_id),
        "test": delivery.scan_id is None, "livemode": delivery.livemode, "status": delivery.status,
        "attempt_count": delivery.attempts,
        "created_at": delivery.created_at, "finished_at": delivery.finished_at,
        "next_attempt_at": delivery.next_attempt_at if delivery.status == PENDING else None,
        "can_redeliver": delivery_log.can_redeliver(delivery),
        "last": _attempt(last) if last else None,
        "attempts": [_attempt(a) for a in attempts],
        "request": {"method": "POST", "url": last.url if last else delivery.url,
                    "sent_at": last.started_at if last else None, "attempt": last.number if last else None,
                    "headers": request_headers(delivery, last.started_at if last else None, signed),
                    "body": delivery.body},
    }


def key_deliveries(key_id: str, customer_id: str, *, status: str | None = None, event: str | None = None,
                   endpoint_id: str | None = None, page: int = 1, per_page: int = 20) -> Page:
    """The key's deliveries (to ``endpoint_id`` when given), newest first, each with its endpoint
    and its attempts (newest first)."""
    key, rows = delivery_log.delivery_rows(key_id, customer_id, status, event, page, per_page, endpoint_id)
    # Each endpoint signs with its own secret (D22); a deleted endpoint's deliveries show the masks
    # as they were sent (a further endpoint always has a secret).
    signed = {e.id: bool(e.row.webhook_secret_enc) for e in outbox.key_endpoints(key)}
    rows.items = [_entry(d, attempts, signed.get(d.endpoint_id or outbox.first_endpoint_id(key.id), True))
                  for d, attempts in rows.items]
    return rows
