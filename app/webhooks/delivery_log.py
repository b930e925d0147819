"""The deliveries a customer reads and sends again: a key's delivery log and a scan's deliveries on
the portal (D12), the customer's deliveries for the API (D17: ``customer_deliveries``, whose one
query is ``app.webhooks.statements.deliveries``' ``customers_page``), and a redelivery, which
restarts a delivery's series of attempts. Another customer's delivery is ``DeliveryNotFound``."""
from __future__ import annotations

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.events import kinds as events
from app.plumbing.db import write_transaction
from app.plumbing.errors import DeliveryErased, DeliveryNotFound, DeliveryPending, InvalidRequest, WebhookUrlMissing
from app.plumbing.jobs import delivery_job_id
from app.plumbing.models import iso, utcnow
from app.plumbing.paging import Page
from app.webhooks.key_settings import owned_key
from app.webhooks.models import CANCELLED, FAILED, PENDING, SKIPPED, SUCCEEDED, DeliveryAttempt, WebhookDelivery
from app.webhooks.outbox import endpoint_of_delivery, first_endpoint_id, send_on_commit
from app.webhooks.statements import deliveries as delivery_store

MAX_PER_PAGE = 100
STATUSES = (PENDING, SUCCEEDED, FAILED, CANCELLED, SKIPPED)
def _owned_delivery(delivery_id: str, customer_id: str, livemode: bool | None = None) -> WebhookDelivery:
    """The customer's delivery (of one mode when ``livemode`` is given: an API key sees its own
    mode's only, D15; the portal and the operator see both)."""
    delivery = None
    if "\x00" not in delivery_id and len(delivery_id) <= 40:  # PostgreSQL cannot compare a NUL
        delivery = delivery_store.of_customer(delivery_id, customer_id, livemode)
    if delivery is None:
        raise DeliveryNotFound(f"no delivery {delivery_id}")
    return delivery


def delivery_owner(delivery_id: str) -> str:
    """The id of the customer a delivery belongs to (for the operator CLI); ``DeliveryNotFound`` if none."""
    customer_id = delivery_store.owner(delivery_id) if "\x00" not in delivery_id else None
    if customer_id is None:
        raise DeliveryNotFound(f"no delivery {delivery_id}")
    return customer_id


def can_redeliver(delivery: WebhookDelivery) -> bool:
    """Whether ``redeliver`` would take it: its attempts are over and its body was not erased."""
    return delivery.status != PENDING and delivery.body is not None


def redeliver(delivery_id: str, customer_id: str, livemode: bool | None = None) -> WebhookDelivery:
    """Start a new attempt series for a failed or succeeded delivery: same id, same body
    bytes, signed anew, the full retry schedule again, sent to the key's current webhook URL.

    A pending delivery raises ``DeliveryPending``: its own attempts are still to come; one whose
    scan was erased (its body is gone, D20), ``DeliveryErased``; a key
    without a webhook URL now raises ``WebhookUrlMissing``. ``livemode``: the calling API key's
    mode, whose deliveries only it may redeliver (D15); None for the portal and the operator."""
    with write_transaction():  # its job goes when the series is committed (``app.plumbing.jobs``)
        return _restart_series(_owned_delivery(delivery_id, customer_id, livemode))


def redelivered(delivery_id: str, customer_id: str, livemode: bool) -> dict:
    """``redeliver``, and the delivery as the API answers it: as the redelivery left it (pending,
    its new series not begun). Built before the commit that sends its job, so that a receiver
    quicker than the answer does not turn it into the attempt's outcome."""
    with write_transaction():
        delivery = redeliver(delivery_id, customer_id, livemode)
        return api_delivery_dict(delivery, _attempts_by_delivery([delivery.id])[delivery.id])


def _restart_series(delivery: WebhookDelivery) -> WebhookDelivery:
    if delivery.body is None:
        raise DeliveryErased("the scan of this delivery was erased: there is nothing left to send")
    if delivery.status == PENDING:
        raise DeliveryPending("the delivery is pending: its attempts are still under way")
    endpoint = endpoint_of_delivery(delivery, key_store.get(delivery.api_key_id))
    url = endpoint.url if endpoint is not None else None
    if not url:
        raise WebhookUrlMissing("the key has no webhook URL" if endpoint is None or endpoint.first
                                else "the delivery's endpoint was deleted")
    changed = delivery_store.restart_series(delivery, status=PENDING, url=url, next_attempt_at=utcnow(),
                                            job_id=delivery_job_id(delivery.id, delivery.attempts + 1))
    if not changed:
        raise DeliveryPending("the delivery is being redelivered already")
    delivery = delivery_store.get(delivery.id)
    send_on_commit(delivery)
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
        "test": delivery.scan_id is None, "livemode": delivery.livemode, "url": delivery.url, "status": delivery.status,
        "attempts": [attempt_dict(a) for a in attempts], "created_at": iso(delivery.created_at),
        "finished_at": iso(delivery.finished_at),
        "next_attempt_at": iso(delivery.next_attempt_at) if delivery.status == PENDING else None,
        "can_redeliver": can_redeliver(delivery),
    }


def delivery_rows(key_id: str, customer_id: str, status: str | None = None, event: str | None = None,
                  page: int = 1, per_page: int = 20, endpoint_id: str | None = None) -> tuple[ApiKey, Page]:
    """The customer's key and a page of its deliveries (to ``endpoint_id`` when given), newest
    first, as ``(delivery, attempts newest first)`` pairs (``list_deliveries`` and the portal's
    console shape them)."""
    key = owned_key(key_id, customer_id)
    page, per_page = max(1, page), min(MAX_PER_PAGE, max(1, per_page))
    total, deliveries = delivery_store.page_of_key(key.id, status=status, event=event, page=page, per_page=per_page,
                                                   endpoint_id=endpoint_id)
    attempts: dict[str, list[DeliveryAttempt]] = {d.id: [] for d in deliveries}
    if deliveries:
        for row in delivery_store.attempts_of(attempts, newest_first=True):
            attempts[row.delivery_id].append(row)
    return key, Page([(d, attempts[d.id]) for d in deliveries], total, page, per_page)


def list_deliveries(key_id: str, customer_id: str, status: str | None = None, event: str | None = None,
                    page: int = 1, per_page: int = 20) -> Page:
    """The key's deliveries, newest first, each with its attempts (newest first)."""
    _, rows = delivery_rows(key_id, customer_id, status, event, page, per_page)
    rows.items = [delivery_dict(d, attempts) for d, attempts in rows.items]
    return rows


def scan_deliveries(scan_id: str, customer_id: str) -> list[dict]:
    """The deliveries of one of the customer's scans, newest first, without their attempts."""
    rows = delivery_store.of_scan(scan_id, customer_id)
    return [{"delivery_id": d.id, "event": d.event, "status": d.status, "attempts": d.attempts,
             "created_at": d.created_at, "key_id": d.api_key_id,
             "next_attempt_at": d.next_attempt_at if d.status == PENDING else None} for d in rows]


# --- Signing and rolling rotation (D16) ------------------------------------------------


def api_attempt_dict(attempt: DeliveryAttempt) -> dict:
    return {"attempt": attempt.number, "at": iso(attempt.started_at), "outcome": attempt.outcome,
            "http_status": attempt.status_code, "error": attempt.error, "duration_ms": attempt.duration_ms}


def api_delivery_dict(delivery: WebhookDelivery, attempts: list[DeliveryAttempt]) -> dict:
    """A delivery as the API shows it: attempts oldest first, the exact body sent."""
    return {"delivery_id": delivery.id,
            "endpoint_id": delivery.endpoint_id or first_endpoint_id(delivery.api_key_id),
            "event": delivery.event, "scan_id": delivery.scan_id,
            "livemode": delivery.livemode, "status": delivery.status, "created_at": iso(delivery.created_at),
            "attempts": [api_attempt_dict(a) for a in attempts],
            # null once finished: only a pending delivery has a next attempt
            "next_attempt_at": iso(delivery.next_attempt_at) if delivery.status == PENDING else None,
            "body": delivery.body}


def _attempts_by_delivery(delivery_ids: list[str]) -> dict[str, list[DeliveryAttempt]]:
    attempts: dict[str, list[DeliveryAttempt]] = {d: [] for d in delivery_ids}
    if delivery_ids:
        for row in delivery_store.attempts_of(delivery_ids):
            attempts[row.delivery_id].append(row)
    return attempts


def customer_deliveries(customer_id: str, *, status: str | None = None, event: str | None = None,
                        scan_id: str | None = None, endpoint_id: str | None = None, limit: int = 20,
                        starting_after: str | None = None, livemode: bool = True) -> tuple[list[dict], bool]:
    """One page of the customer's deliveries of the calling key's mode (D15), newest first, and
    whether older ones follow.

    ``starting_after`` is the last delivery id of the previous page; one that is not the
    customer's is refused (``InvalidRequest``), like a malformed filter.
    """
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}")
    if event is not None and event not in events.delivery_events():
        raise InvalidRequest(f"event must be one of {', '.join(events.delivery_events())}")
    if not 1 <= limit <= MAX_PER_PAGE:
        raise InvalidRequest(f"limit must be from 1 to {MAX_PER_PAGE}")
    for given in (scan_id, endpoint_id):
        if given is not None and ("\x00" in given or len(given) > 40):
            return [], False  # no id holds a NUL (PostgreSQL cannot compare one) or is that long
    cursor = None
    if starting_after is not None:
        if "\x00" not in starting_after and len(starting_after) <= 40:
            cursor = delivery_store.customers_delivery(customer_id, starting_after, livemode=livemode)
        if cursor is None:
            raise InvalidRequest(f"starting_after: no delivery {starting_after} of this account")
    # One more than the page, to tell whether older ones follow.
    rows = delivery_store.customers_page(customer_id, livemode=livemode, status=status, event=event,
                                         scan_id=scan_id, endpoint_id=endpoint_id, after=cursor,
                                         limit=limit + 1)
    page = rows[:limit]
    attempts = _attempts_by_delivery([d.id for d in page])
    return [api_delivery_dict(d, attempts[d.id]) for d in page], len(rows) > limit


