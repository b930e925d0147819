"""Webhook events and deliveries (§6, D11, D12, D13).

A delivery row (with the exact body bytes every attempt will send) is committed in
the transaction that finishes a scan; only then is its job enqueued, and a job Redis
refused is enqueued later by the recovery sweep. Sending is ``workers.webhook_jobs``.

Each delivery job makes at most one attempt, and its id names that attempt:
``dlv-<delivery id>-<attempt number>``. The row's ``job_id`` is the fencing token:
only the job it names may act, and a job that ran once (or was replayed) finds the
token moved on and does nothing.

The functions at the end serve the key's management page (D12). They take the
logged-in customer's id and raise ``LookupError`` for a key or delivery of another
customer, which the portal answers as 404; a refused input raises ``AccountError``.
"""
from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass

from app.jobs import delivery_job_id, enqueue_delivery
from app.models import ApiKey, DeliveryAttempt, WebhookDelivery, iso, new_id, utcnow
from app.models.scans import COMPLETED
from app.models.webhooks import FAILED, PENDING
from app.services.errors import AccountError
from app.services.crypto import encrypt_secret, new_webhook_secret
from app.services.reads import final_state
from app.services.results import normalize_result
from app.services.webhook_urls import check_webhook_url

log = logging.getLogger(__name__)

MIN_SECRET_LENGTH, MAX_SECRET_LENGTH = 16, 256
MAX_PER_PAGE = 100


def encode_body(body: dict) -> str:
    return json.dumps(body, separators=(",", ":"))


def event_body(scan) -> dict:
    """The body of ``scan.completed`` (§6.4) or ``scan.failed`` (D11)."""
    event = "scan.completed" if scan.status == COMPLETED else "scan.failed"
    body = {"event": event, "scan_id": scan.id}
    if scan.bulk_id:
        body["bulk_id"] = scan.bulk_id
    body.update(target=scan.target, kind=scan.kind, status=scan.status)
    body.update(final_state(scan))
    return body


def _create_delivery(key: ApiKey, event: str, body: dict, scan_id: str | None) -> WebhookDelivery:
    delivery_id = new_id("dlv")
    return WebhookDelivery.create(
        id=delivery_id, customer=key.customer_id, api_key=key.id, scan_id=scan_id, event=event,
        url=key.webhook_url, body=encode_body(body), job_id=delivery_job_id(delivery_id, 1),
        next_attempt_at=utcnow())


def record_event(scan) -> WebhookDelivery | None:
    """Write the delivery row for a scan that just became final; None when the key has no URL."""
    key = ApiKey.get_by_id(scan.api_key_id)
    if not key.webhook_url:
        return None
    body = event_body(scan)
    return _create_delivery(key, body["event"], body, scan.id)


def dispatch(delivery: WebhookDelivery, delay_seconds: float = 0) -> bool:
    return enqueue_delivery(delivery.id, delivery.job_id, delay_seconds)


# --- The key's management page (D12) -------------------------------------------------


@dataclass
class DeliveryPage:
    items: list
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def owned_key(key_id: str, customer_id: str) -> ApiKey:
    """The customer's key ``key_id``; ``LookupError`` for another customer's or none."""
    key = ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.customer == customer_id))
    if key is None:
        raise LookupError(f"no key {key_id}")
    return key


def _owned_delivery(delivery_id: str, customer_id: str) -> WebhookDelivery:
    delivery = WebhookDelivery.get_or_none(
        (WebhookDelivery.id == delivery_id) & (WebhookDelivery.customer == customer_id))
    if delivery is None:
        raise LookupError(f"no delivery {delivery_id}")
    return delivery


def _valid_secret(secret: str) -> str:
    """The one rule for a webhook secret set by hand (portal, CLI); D16's format goes here."""
    if not MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH:
        raise AccountError(
            f"the webhook secret must have {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters")
    if secret != secret.strip():
        raise AccountError("the webhook secret must not start or end with white space")
    return secret


def set_webhook(key_id: str, customer_id: str, url: str | None, secret: str | None = None) -> ApiKey:
    """Set (or with an empty ``url`` remove) the key's webhook URL, and its secret when given.

    The one place a webhook URL and secret are checked and stored: the portal, the
    operator's ``keys set-webhook`` and ``keys issue`` (``accounts.issue_key``) all
    come here, so every entry point applies the same rules (14.12).
    ``secret`` None or empty keeps the current one. Deliveries already written keep the
    URL they were addressed to; a redelivery takes the key's URL of that moment.
    """
    key = owned_key(key_id, customer_id)
    url = (url or "").strip()
    if url:
        check_webhook_url(url)
    changes = {"webhook_url": url or None}
    if secret:
        changes["webhook_secret_enc"] = encrypt_secret(_valid_secret(secret))
    ApiKey.update(**changes).where(ApiKey.id == key.id).execute()
    return ApiKey.get_by_id(key.id)


def generate_secret(key_id: str, customer_id: str) -> str:
    """Replace the key's signing secret with a new random one; returns it, to show once.

    Attempts made from now on, retries of earlier deliveries included, are signed
    with the new secret.
    """
    key = owned_key(key_id, customer_id)
    plaintext = new_webhook_secret()
    ApiKey.update(webhook_secret_enc=encrypt_secret(plaintext)).where(ApiKey.id == key.id).execute()
    log.info("key %s: webhook secret rotated", key.id)
    return plaintext


def delivery_owner(delivery_id: str) -> str:
    """The id of the customer a delivery belongs to (for the operator CLI); ``LookupError`` if none."""
    customer_id = (WebhookDelivery.select(WebhookDelivery.customer).where(WebhookDelivery.id == delivery_id)
                   .scalar() if "\x00" not in delivery_id else None)
    if customer_id is None:
        raise LookupError(f"no delivery {delivery_id}")
    return customer_id


def redeliver(delivery_id: str, customer_id: str) -> WebhookDelivery:
    """Start a new attempt series for a failed delivery: same id, same body bytes,
    the full retry schedule again, sent to the key's current webhook URL."""
    delivery = _owned_delivery(delivery_id, customer_id)
    if delivery.status != FAILED:
        raise AccountError("only a failed delivery can be redelivered")
    url = ApiKey.get_by_id(delivery.api_key_id).webhook_url
    if not url:
        raise AccountError("the key has no webhook URL")
    changed = (WebhookDelivery
               .update(status=PENDING, series_start=delivery.attempts, url=url, finished_at=None,
                       next_attempt_at=utcnow(), job_id=delivery_job_id(delivery.id, delivery.attempts + 1))
               .where((WebhookDelivery.id == delivery.id) & (WebhookDelivery.status == FAILED)
                      & (WebhookDelivery.attempts == delivery.attempts))
               .execute())
    if not changed:
        raise AccountError("the delivery is being redelivered already")
    delivery = WebhookDelivery.get_by_id(delivery.id)
    dispatch(delivery)
    return delivery


def sample_event_body() -> dict:
    """A ``scan.completed`` body for no real scan: ``"test": true``, a ``scn_test_`` id."""
    result = normalize_result({"ai_summary": "Test event sent from the key's management page; "
                                             "it describes no real scan."}, "email")
    return {"event": "scan.completed", "scan_id": f"scn_test_{secrets.token_urlsafe(12)}",
            "target": "test@example.com", "kind": "email", "status": COMPLETED,
            "completed_at": iso(utcnow()), "result": result, "test": True}


def send_test_event(key_id: str, customer_id: str) -> WebhookDelivery:
    """Queue a test delivery to the key's webhook URL; logged and retried like any other."""
    key = owned_key(key_id, customer_id)
    if not key.webhook_url:
        raise AccountError("the key has no webhook URL")
    body = sample_event_body()
    delivery = _create_delivery(key, body["event"], body, scan_id=None)
    dispatch(delivery)
    return delivery


def attempt_dict(attempt: DeliveryAttempt) -> dict:
    return {
        "number": attempt.number, "started_at": iso(attempt.started_at), "url": attempt.url,
        "status_code": attempt.status_code, "error": attempt.error, "duration_ms": attempt.duration_ms,
        "response_excerpt": attempt.response_excerpt, "outcome": attempt.outcome,
    }


def delivery_dict(delivery: WebhookDelivery, attempts: list[DeliveryAttempt]) -> dict:
    return {
        "delivery_id": delivery.id, "event": delivery.event, "scan_id": delivery.scan_id,
        "test": delivery.scan_id is None, "url": delivery.url, "status": delivery.status,
        "attempts": [attempt_dict(a) for a in attempts], "created_at": iso(delivery.created_at),
        "finished_at": iso(delivery.finished_at),
        "next_attempt_at": iso(delivery.next_attempt_at) if delivery.status == PENDING else None,
        "can_redeliver": delivery.status == FAILED,
    }


def delivery_rows(key_id: str, customer_id: str, status: str | None = None, event: str | None = None,
                  page: int = 1, per_page: int = 20) -> tuple[ApiKey, DeliveryPage]:
    """The customer's key and a page of its deliveries, newest first, as ``(delivery,
    attempts newest first)`` pairs (``list_deliveries`` and the portal's console shape them)."""
    key = owned_key(key_id, customer_id)
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
        rows = (DeliveryAttempt.select()
                .where(DeliveryAttempt.delivery.in_(list(attempts)))
                .order_by(DeliveryAttempt.number.desc()))
        for row in rows:
            attempts[row.delivery_id].append(row)
    return key, DeliveryPage([(d, attempts[d.id]) for d in deliveries], total, page, per_page)


def list_deliveries(key_id: str, customer_id: str, status: str | None = None, event: str | None = None,
                    page: int = 1, per_page: int = 20) -> DeliveryPage:
    """The key's deliveries, newest first, each with its attempts (newest first)."""
    _, rows = delivery_rows(key_id, customer_id, status, event, page, per_page)
    rows.items = [delivery_dict(d, attempts) for d, attempts in rows.items]
    return rows


def scan_deliveries(scan_id: str, customer_id: str) -> list[dict]:
    """The deliveries of one of the customer's scans, newest first, without their attempts."""
    rows = (WebhookDelivery.select()
            .where((WebhookDelivery.scan_id == scan_id) & (WebhookDelivery.customer == customer_id))
            .order_by(WebhookDelivery.created_at.desc()))
    return [{"delivery_id": d.id, "event": d.event, "status": d.status, "attempts": d.attempts,
             "created_at": d.created_at, "key_id": d.api_key_id,
             "next_attempt_at": d.next_attempt_at if d.status == PENDING else None} for d in rows]
