"""The delivery console of a key's page (issue 19): one entry per delivery with its
attempts and the exact request it sends, signatures masked.

Like ``webhooks.list_deliveries`` it takes the logged-in customer's id and raises
``LookupError`` for a key of another customer (the portal's 404).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from app.models import ApiKey, DeliveryAttempt, WebhookDelivery
from app.models.webhooks import FAILED, PENDING

MAX_PER_PAGE = 100
MASK = "••••••••"
USER_AGENT = "Service-Webhook/1"
# Headers whose value proves authenticity: shown by name, never by value.
SIGNATURE_HEADERS = ("X-Service-Signature", "webhook-signature")


@dataclass
class ConsolePage:
    items: list[dict]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def _unix_ms(moment: datetime) -> int:
    return int(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)


def request_headers(delivery: WebhookDelivery, sent_at: datetime | None, signed: bool) -> list[tuple[str, str]]:
    """The headers an attempt made at ``sent_at`` carried, signature values masked.

    They are the worker's (§6.2), rebuilt from the attempt's recorded time: the
    timestamp is exact, the signature is replaced by a mask (it is a secret's proof).
    """
    headers = [("Content-Type", "application/json"), ("User-Agent", USER_AGENT),
               ("X-Service-Event", delivery.event), ("X-Service-Delivery", delivery.id),
               ("X-Service-Timestamp", str(_unix_ms(sent_at)) if sent_at else "(set when sent)")]
    if signed:
        headers.append(("X-Service-Signature", f"sha256={MASK}"))
    return headers


def _attempt(row: DeliveryAttempt) -> dict:
    return {"number": row.number, "started_at": row.started_at, "url": row.url, "status_code": row.status_code,
            "error": row.error, "duration_ms": row.duration_ms, "response_excerpt": row.response_excerpt or "",
            "outcome": row.outcome}


def _entry(delivery: WebhookDelivery, attempts: list[DeliveryAttempt], signed: bool) -> dict:
    last = attempts[0] if attempts else None
    return {
        "delivery_id": delivery.id, "event": delivery.event, "scan_id": delivery.scan_id,
        "test": delivery.scan_id is None, "status": delivery.status, "attempt_count": delivery.attempts,
        "created_at": delivery.created_at, "finished_at": delivery.finished_at,
        "next_attempt_at": delivery.next_attempt_at if delivery.status == PENDING else None,
        "can_redeliver": delivery.status == FAILED,
        "last": _attempt(last) if last else None,
        "attempts": [_attempt(a) for a in attempts],
        "request": {"method": "POST", "url": last.url if last else delivery.url,
                    "sent_at": last.started_at if last else None, "attempt": last.number if last else None,
                    "headers": request_headers(delivery, last.started_at if last else None, signed),
                    "body": delivery.body},
    }


def key_deliveries(key_id: str, customer_id: str, *, status: str | None = None, event: str | None = None,
                   page: int = 1, per_page: int = 20) -> ConsolePage:
    """The key's deliveries, newest first, each with its attempts (newest first)."""
    key = ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.customer == customer_id))
    if key is None:
        raise LookupError(f"no key {key_id}")
    page, per_page = max(1, page), min(MAX_PER_PAGE, max(1, per_page))
    query = WebhookDelivery.select().where(WebhookDelivery.api_key == key.id)
    if status:
        query = query.where(WebhookDelivery.status == status)
    if event:
        query = query.where(WebhookDelivery.event == event)
    total = query.count()
    deliveries = list(query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
                      .paginate(page, per_page))
    attempts: dict[str, list[DeliveryAttempt]] = {d.id: [] for d in deliveries}
    if deliveries:
        for row in (DeliveryAttempt.select().where(DeliveryAttempt.delivery.in_(list(attempts)))
                    .order_by(DeliveryAttempt.number.desc())):
            attempts[row.delivery_id].append(row)
    signed = bool(key.webhook_secret_enc)
    return ConsolePage([_entry(d, attempts[d.id], signed) for d in deliveries], total, page, per_page)
