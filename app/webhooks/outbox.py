"""Webhook events to delivery rows (§6, D11, D13).

A delivery row (with the exact body bytes every attempt will send) is committed in
the transaction that finishes a scan; writing a pending row registers its job to be
enqueued when that transaction commits (``send_on_commit``: ``app.plumbing.jobs`` enqueues wait for the commit),
and a job Redis refused is enqueued later by the recovery sweep. Sending is
``workers.webhook_jobs``.

Each delivery job makes at most one attempt, and its id names that attempt:
``dlv-<delivery id>-<attempt number>``. The row's ``job_id`` is the fencing token:
only the job it names may act, and a job that ran once (or was replayed) finds the
token moved on and does nothing.

A key's settings are ``key_settings``, its signing secrets and the headers they sign
``signing_secrets``, the deliveries customers read and send again ``delivery_log``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.events import feed
from app.events import kinds as events
from app.plumbing import rawjson, runtime
from app.plumbing.db import write_transaction
from app.plumbing.errors import AccountError
from app.plumbing.jobs import delivery_job_id, enqueue_delivery
from app.plumbing.models import iso, new_id, utcnow
from app.scans.models import COMPLETED
from app.scans.reads import scan_view
from app.scans.results import normalize_result
from app.webhooks.key_settings import owned_key
from app.webhooks.models import PENDING, SKIPPED, WebhookDelivery, WebhookEndpoint
from app.webhooks.statements import deliveries as delivery_store
from app.webhooks.statements import endpoints as endpoint_store

USER_AGENT = "Service-Webhook/1"
# Test events are limited per key over this many seconds (WEBHOOK_TEST_EVENTS_PER_MINUTE).
TEST_EVENT_WINDOW = 60


def _compact(body) -> str:
    return json.dumps(body, separators=(",", ":"))


def encode_body(body: dict) -> str:
    """A body's compact JSON; a stored result in it (``RawJSON``) written as its text, which is the
    same compact JSON (``app.plumbing.rawjson``)."""
    return rawjson.render(body, _compact)


def event_body(scan, kind: events.EventKind | None = None, *, thin: bool = False, raw_result: bool = False) -> dict:
    """The body of event ``kind`` for ``scan`` (by default the event its status reports:
    ``scan.completed``, §6.4, or ``scan.failed``, D11): the registry's fields of its read, or
    with ``thin`` only those that carry no personal data (D20). ``raw_result``: a completed scan's
    result as its stored text (``RawJSON``), for ``encode_body`` to write as it is."""
    kind = kind or events.for_status(scan.status)
    return kind.body(scan_view(scan, utcnow(), raw_result=raw_result), thin=thin)


# --- Endpoints (D22) --------------------------------------------------------------------

# The events of the key's first endpoint when none were chosen, as before endpoints existed.
DEFAULT_EVENTS = ("scan.completed", "scan.failed")


@dataclass
class Endpoint:
    """One of a key's webhook endpoints: the key itself (its first endpoint, whose data is the
    key's own columns, so ``keys set-webhook`` and the key page keep working) or a
    ``WebhookEndpoint`` row. ``row`` holds the URL and the secrets under the same names."""

    id: str
    key: ApiKey
    row: ApiKey | WebhookEndpoint

    @property
    def first(self) -> bool:
        return self.row is self.key

    @property
    def url(self) -> str:
        return self.row.webhook_url or ""

    @property
    def events(self) -> list[str]:
        return list(self.row.webhook_events or DEFAULT_EVENTS)

    @property
    def payload(self) -> str:
        return self.row.webhook_payload

    @property
    def enabled(self) -> bool:
        return bool(self.row.webhook_enabled)

    @property
    def disabled_at(self) -> datetime | None:
        """When auto-disable stopped it (None: enabled, or disabled by a person)."""
        return self.row.webhook_disabled_at

    @property
    def description(self) -> str:
        return self.row.webhook_description or ""


def first_endpoint_id(key_id: str) -> str:
    """The id of the key's first endpoint: ``ep_`` and the key id's random part, so the deliveries
    written before endpoints existed name it without a row of their own."""
    return "ep_" + key_id.split("_", 1)[1]


def key_endpoints(key: ApiKey, further: list[WebhookEndpoint] | None = None) -> list[Endpoint]:
    """The key's endpoints, first first: the key's own URL (when set), then the further ones
    (``further``, its rows when the caller read them already)."""
    first = [Endpoint(first_endpoint_id(key.id), key, key)] if key.webhook_url else []
    rows = endpoint_store.of_key(key.id) if further is None else further
    return first + [Endpoint(row.id, key, row) for row in rows]


def keys_endpoints(key_ids: set[str]) -> dict[str, list[Endpoint]]:
    """``key_endpoints`` of each key, in two statements whatever their number (a batch look ends
    scans of many keys: one read per key was most of its statements with 100 customers)."""
    keys, further = key_store.get_many(key_ids), endpoint_store.of_keys(key_ids)
    return {key_id: key_endpoints(key, further[key_id]) for key_id, key in keys.items()}


def endpoint_of_delivery(delivery: WebhookDelivery, key: ApiKey) -> Endpoint | None:
    """The endpoint a delivery is addressed to now (None: deleted, or the key's URL removed)."""
    endpoint_id = delivery.endpoint_id or first_endpoint_id(key.id)
    if endpoint_id == first_endpoint_id(key.id):
        return Endpoint(endpoint_id, key, key) if key.webhook_url else None
    row = endpoint_store.get(endpoint_id)
    return Endpoint(row.id, key, row) if row is not None else None


def _create_delivery(key: ApiKey, event: str, body: dict, scan_id: str | None, endpoint: Endpoint | None = None,
                     status: str = PENDING, *, encoded: str | None = None) -> WebhookDelivery:
    """Write one delivery to ``endpoint`` (by default the key's first); ``SKIPPED``: recorded for an
    endpoint auto-disable stopped, never sent unless recovered. ``encoded``: ``encode_body(body)``
    when the caller has it already."""
    delivery_id = new_id("dlv")
    endpoint = endpoint or Endpoint(first_endpoint_id(key.id), key, key)
    pending = status == PENDING
    text = encode_body(body) if encoded is None else encoded
    delivery = delivery_store.create(
        delivery_id, customer_id=key.customer_id, api_key_id=key.id, scan_id=scan_id, event=event,
        url=endpoint.url, body=text, job_id=delivery_job_id(delivery_id, 1) if pending else None,
        next_attempt_at=utcnow() if pending else None, livemode=key.livemode, endpoint_id=endpoint.id,
        status=status)
    if pending:
        send_on_commit(delivery)
    return delivery


def record_event(scan, kind: events.EventKind | None = None) -> list[WebhookDelivery] | None:
    """Write the delivery rows of event ``kind`` for ``scan`` (by default the one its final status
    fires): one per enabled endpoint of its key whose events list it, each with its own body (full
    or thin) and id, and a ``skipped`` one per endpoint auto-disable stopped (D22). Returns the pending
    ones, whose jobs go when the caller's transaction commits; None when no endpoint takes the event."""
    return record_events([scan], kind) or None


def record_events(scans, kind: events.EventKind | None = None, *,
                  endpoints_of: dict[str, list[Endpoint]] | None = None) -> list[WebhookDelivery]:
    """``record_event`` for each of ``scans`` (a batch look's), each key's endpoints read once
    (``endpoints_of``: some or all of them, read already by ``keys_endpoints``); the pending
    deliveries. A result goes into the bodies as its stored text (``RawJSON``): parsing it to
    write it again was a tenth of a batch look's CPU."""
    return _record([Occurrence(scan.api_key_id, scan.customer_id, scan.livemode,
                               event_body(scan, kind or events.for_status(scan.status), raw_result=True),
                               scan_id=scan.id,
                               bulk_id=scan.bulk_id or None, watch_id=scan.watch_id or None)
                    for scan in scans], endpoints_of)


@dataclass(frozen=True)
class Occurrence:
    """One event to record for the endpoints of key ``key_id``: its full body (the thin one follows
    from it by its kind's rule, ``events.thin_body``) and what it is about, which the feed files it
    under (a scan, its batch, its watch)."""

    key_id: str
    customer_id: str
    livemode: bool
    full: dict
    scan_id: str | None = None
    bulk_id: str | None = None
    watch_id: str | None = None


def _record(occurrences: list[Occurrence], endpoints_of: dict[str, list[Endpoint]] | None = None,
            ) -> list[WebhookDelivery]:
    """The one path of an event, whatever it is about: a delivery per enabled endpoint of its key whose
    events list it, full or thin as the endpoint asks (a ``skipped`` one per endpoint auto-disable
    stopped, D22), then each event stored once in the feed (D27) with the full body's bytes. Each
    key's endpoints are read once (``endpoints_of`` may hold some already). The pending deliveries,
    whose jobs go when the caller's transaction commits."""
    endpoints_of = dict(endpoints_of or {})
    endpoints_of.update(keys_endpoints({event.key_id for event in occurrences} - endpoints_of.keys()))
    pending = []
    encoded = [encode_body(event.full) for event in occurrences]  # once each, for its deliveries and the feed
    for event, full_text in zip(occurrences, encoded):
        name = event.full["event"]
        for endpoint in endpoints_of[event.key_id]:
            if name not in endpoint.events or not (endpoint.enabled or endpoint.disabled_at):
                continue
            thin = endpoint.payload == "thin"
            delivery = _create_delivery(endpoint.key, name, events.thin_body(event.full) if thin else event.full,
                                        event.scan_id, endpoint, PENDING if endpoint.enabled else SKIPPED,
                                        encoded=None if thin else full_text)
            if delivery.status == PENDING:
                pending.append(delivery)
    # Last in the caller's transaction: the events take their customers' lock after every row lock.
    feed.record([feed.NewEvent(e.customer_id, e.livemode, e.full["event"], text, scan_id=e.scan_id,
                               bulk_id=e.bulk_id, watch_id=e.watch_id) for e, text in zip(occurrences, encoded)])
    return pending


def record_key_event(key: ApiKey, body: dict, *, leave_out: str) -> list[WebhookDelivery]:
    """Write a delivery of an event about the key itself (``endpoint.disabled``) to each of its
    enabled endpoints that lists it, but ``leave_out``; their jobs go when the caller's transaction commits."""
    return [_create_delivery(key, body["event"], body, None, endpoint)
            for endpoint in key_endpoints(key)
            if endpoint.id != leave_out and endpoint.enabled and body["event"] in endpoint.events]


def record_watch_event(key: ApiKey, body: dict, *, scan_id: str | None = None) -> list[WebhookDelivery]:
    """Record an event about a watch (D28) as any event (``_record``): to the endpoints of ``key``
    that list it, and in the feed under its watch (and ``scan_id``, the scan it is about)."""
    event = Occurrence(key.id, key.customer_id, body["livemode"], body, scan_id=scan_id, watch_id=body["watch_id"])
    return _record([event], {key.id: key_endpoints(key)})


def record_service_event(body: dict) -> list[WebhookDelivery]:
    """Record an event about the service itself, not about a customer's scan (D30: a source's
    status): a delivery to every enabled endpoint of any customer's key that lists it (never by
    default), and the event stored once per customer and mode with a key, so that a stream or the
    events list asking for its kind sees it. Its body holds no personal data (full and thin alike)."""
    name = body["event"]
    pending = []
    for key in endpoint_store.keys_listing(name):
        for endpoint in key_endpoints(key):
            if name in endpoint.events and endpoint.enabled:
                pending.append(_create_delivery(key, name, body, None, endpoint))
    feed.record([feed.NewEvent(customer_id, livemode, name, encode_body(body))
                 for customer_id, livemode in key_store.customer_modes()])
    return pending


def record_customer_event(customer_id: str, livemode: bool, body: dict) -> list[WebhookDelivery]:
    """Record an event about the customer's data rather than one key's (``subject.*``): a delivery
    to every endpoint, of each of the customer's active keys of ``livemode``, that lists it, and
    the event once in the feed. The pending deliveries, whose jobs go when the caller's transaction commits."""
    pending = []
    for key in key_store.all_oldest_first(customer_id):
        if key.livemode != livemode or key.revoked_at is not None:
            continue
        for endpoint in key_endpoints(key):
            if body["event"] in endpoint.events and endpoint.enabled:
                delivery = _create_delivery(endpoint.key, body["event"], body, None, endpoint)
                if delivery.status == PENDING:
                    pending.append(delivery)
    feed.record([feed.NewEvent(customer_id, livemode, body["event"], encode_body(body))])
    return pending


def send_on_commit(delivery: WebhookDelivery) -> None:
    """Enqueue the job of a delivery made pending in the caller's transaction once it commits (at
    once outside one); a job Redis refuses is enqueued by the recovery sweep."""
    enqueue_delivery(delivery.id, delivery.job_id)


# --- The key's management page (D12) -------------------------------------------------


def sample_event_body(livemode: bool = True) -> dict:
    """A ``scan.completed`` body for no real scan: ``"test": true``, a ``scn_test_`` id, and the
    ``livemode`` of the key it is sent for."""
    result = normalize_result({"ai_summary": "Test event sent from the key's management page; "
                                             "it describes no real scan."}, "email")
    read = {"scan_id": f"scn_test_{secrets.token_urlsafe(12)}", "livemode": livemode, "target": "test@example.com",
            "kind": "email", "status": COMPLETED, "completed_at": iso(utcnow()), "result": result}
    return {**events.SCAN_COMPLETED.body(read), "test": True}


def send_test_event(key_id: str, customer_id: str) -> WebhookDelivery:
    """Queue a test delivery to the key's webhook URL; logged and retried like any other."""
    key = owned_key(key_id, customer_id)
    if not key.webhook_url:
        raise AccountError("the key has no webhook URL")
    limit = runtime.config["WEBHOOK_TEST_EVENTS_PER_MINUTE"]
    body = sample_event_body(key.livemode)
    with write_transaction():
        # The key's row locked: two clicks at once both count the other. Test deliveries
        # are those without a scan.
        key_store.lock(key.id)
        now = utcnow()
        recent = delivery_store.test_event_times(key.id, since=now - timedelta(seconds=TEST_EVENT_WINDOW))
        if len(recent) >= limit:
            wait = TEST_EVENT_WINDOW - int((now - recent[len(recent) - limit]).total_seconds())
            raise AccountError(f"Too many test events: at most {limit} a minute per key. "
                               f"Try again in {max(1, wait)} seconds.")
        return _create_delivery(key, body["event"], body, scan_id=None)


