"""Webhook events and deliveries (§6, D11, D12, D13).

A delivery row (with the exact body bytes every attempt will send) is committed in
the transaction that finishes a scan; writing a pending row registers its job to be
enqueued when that transaction commits (``send_on_commit``: ``app.plumbing.jobs`` enqueues wait for the commit),
and a job Redis refused is enqueued later by the recovery sweep. Sending is
``workers.webhook_jobs``.

Each delivery job makes at most one attempt, and its id names that attempt:
``dlv-<delivery id>-<attempt number>``. The row's ``job_id`` is the fencing token:
only the job it names may act, and a job that ran once (or was replayed) finds the
token moved on and does nothing.

The functions at the end serve the key's management page (D12). They take the
logged-in customer's id and raise ``LookupError`` for a key of another customer
(``DeliveryNotFound``, a ``LookupError`` too, for a delivery), which the portal answers
as 404; a refused input raises ``AccountError`` (or one of the delivery errors of
``services.shared.errors`` that are ``AccountError`` too, so the HTTP layer maps them).

Signing (D16): ``delivery_headers`` builds every header of one attempt, both signature
schemes included, from the key's active secrets (``signing_secrets``). A rolling
rotation (``roll_secret``, ``switch_secret``) keeps a next secret beside the current
one until ``webhook_secret_switch_at``; the switch is made lazily, by the first signing
or read that finds the overlap over (``_promote_if_due``).

The customer's deliveries for the API (D17) are ``customer_deliveries``, whose one
query is ``app.webhooks.statements.deliveries``' ``customers_page``.
"""
from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.events import feed
from app.events import kinds as events
from app.plumbing import rawjson, runtime
from app.plumbing.crypto import decrypt_secret, encrypt_secret, new_webhook_secret
from app.plumbing.db import write_transaction
from app.plumbing.errors import (
    AccountError,
    DeliveryErased,
    DeliveryNotFound,
    DeliveryPending,
    InvalidRequest,
    SecretChanged,
    WebhookUrlMissing,
)
from app.plumbing.jobs import delivery_job_id, enqueue_delivery
from app.plumbing.models import iso, new_id, utcnow
from app.plumbing.paging import Page
from app.plumbing.signatures import (
    ID_HEADER,
    SIGNATURE_HEADER,
    STANDARD_SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    decode_secret,
    sign,
    sign_standard,
)
from app.scans.models import COMPLETED
from app.scans.reads import scan_view
from app.scans.results import normalize_result
from app.webhooks.models import (
    CANCELLED,
    FAILED,
    PENDING,
    SKIPPED,
    SUCCEEDED,
    DeliveryAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from app.webhooks.statements import deliveries as delivery_store
from app.webhooks.statements import endpoints as endpoint_store
from app.webhooks.statements import key_settings as settings_store
from app.webhooks.webhook_urls import check_webhook_url

log = logging.getLogger(__name__)

MAX_PER_PAGE = 100
USER_AGENT = "Service-Webhook/1"
# A hand-set secret: whsec_ + base64 of this many bytes (a generated one has 32).
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 16, 128
MAX_OVERLAP_HOURS, DEFAULT_OVERLAP_HOURS = 7 * 24, 24
STATUSES = (PENDING, SUCCEEDED, FAILED, CANCELLED, SKIPPED)
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


def owned_key(key_id: str, customer_id: str) -> ApiKey:
    """The customer's key ``key_id``; ``LookupError`` for another customer's or none."""
    key = key_store.customers_key(key_id, customer_id)
    if key is None:
        raise LookupError(f"no key {key_id}")
    return key


def _owned_delivery(delivery_id: str, customer_id: str, livemode: bool | None = None) -> WebhookDelivery:
    """The customer's delivery (of one mode when ``livemode`` is given: an API key sees its own
    mode's only, D15; the portal and the operator see both)."""
    delivery = None
    if "\x00" not in delivery_id and len(delivery_id) <= 40:  # PostgreSQL cannot compare a NUL
        delivery = delivery_store.of_customer(delivery_id, customer_id, livemode)
    if delivery is None:
        raise DeliveryNotFound(f"no delivery {delivery_id}")
    return delivery


def check_secret(secret: str) -> str:
    """The one rule for a secret set by hand (portal, CLI, key issue): ``whsec_`` + standard
    base64 (padding optional) of 16 to 128 bytes, what Standard Webhooks libraries decode."""
    key = decode_secret(secret) if isinstance(secret, str) else None
    if key is None:
        raise AccountError("the webhook secret must be whsec_ followed by standard base64 (A-Z, a-z, 0-9, + "
                           f"and /) of {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes; or generate one")
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise AccountError(f"the base64 part of the webhook secret must decode to {MIN_SECRET_BYTES} to "
                           f"{MAX_SECRET_BYTES} bytes, not {len(key)}")
    return secret


def set_payload(key_id: str, customer_id: str, payload: str) -> ApiKey:
    """What the key's event bodies carry: ``full`` or ``thin`` (D20); later events only."""
    if payload not in events.PAYLOADS:
        raise AccountError(f"payload must be one of {', '.join(events.PAYLOADS)}")
    key = owned_key(key_id, customer_id)
    settings_store.set_payload(key.id, payload)
    return key_store.get(key.id)


def set_webhook(key_id: str, customer_id: str, url: str | None, secret: str | None = None) -> ApiKey:
    """Set (or with an empty ``url`` remove) the key's webhook URL, and its secret when given.

    The one place a webhook URL and secret are checked and stored: the portal, the
    operator's ``keys set-webhook`` and ``keys issue`` (``accounts.issue_key``) all
    come here, so every entry point applies the same rules (14.12).
    ``secret`` None or empty keeps the current one; a secret given replaces it at once and
    ends a rotation under way. Deliveries already written keep the URL they were
    addressed to; a redelivery takes the key's URL of that moment.
    """
    key = owned_key(key_id, customer_id)
    url = (url or "").strip()
    if url:
        check_webhook_url(url)
    settings_store.set_webhook(key.id, url=url or None,
                          secret_enc=encrypt_secret(check_secret(secret)) if secret else None)
    return key_store.get(key.id)


def generate_secret(key_id: str, customer_id: str) -> str:
    """Replace the key's signing secret with a new random one; returns it, to show once.

    Attempts made from now on, retries of earlier deliveries included, are signed
    with the new secret alone (a rotation under way ends): ``roll_secret`` is the
    rotation that breaks no receiver.
    """
    key = owned_key(key_id, customer_id)
    plaintext = new_webhook_secret()
    _replace_secret(key, plaintext)
    log.info("key %s: webhook secret rotated", key.id)
    return plaintext


def _replace_secret(key: ApiKey | WebhookEndpoint, plaintext: str) -> None:
    """Make ``plaintext`` the key's only secret, if its secrets are still those ``key`` was read
    with: compare-and-set, so of two requests racing (a double click on "Generate secret" or on
    "Roll secret" with no overlap) one wins and the other is told, instead of both showing a
    secret as in force when only the last one written signs."""
    changed = settings_store.replace_secret(key.id, secret_enc=encrypt_secret(plaintext),
                                       was_secret_enc=key.webhook_secret_enc,
                                       was_next_secret_enc=key.webhook_next_secret_enc, model=type(key))
    if not changed:
        raise SecretChanged()


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


@dataclass
class SigningSecrets:
    """The key's active secrets: ``current`` signs ``X-Service-Signature``; ``active``
    (current first, then the next one during a rotation) sign ``webhook-signature``."""

    current: str | None
    active: list[str]


@dataclass
class RolledSecret:
    secret: str  # the next secret's plaintext, to show once
    switch_at: datetime  # when it becomes the only one (now, for an overlap of 0 or a first secret)
    overlapping: bool = False  # both secrets sign until switch_at (False: it replaced the old one at once)


def _promote_if_due(key: ApiKey | WebhookEndpoint, now: datetime) -> None:
    """End the key's rotation when its overlap is over: the next secret becomes current and
    the old one is gone. Compare-and-set, so concurrent callers switch once."""
    if not key.webhook_next_secret_enc or key.webhook_secret_switch_at is None or key.webhook_secret_switch_at > now:
        return
    _switch(key)


def _switch(key: ApiKey | WebhookEndpoint) -> bool:
    nxt = key.webhook_next_secret_enc
    changed = settings_store.switch_to_next(key.id, nxt, type(key))
    key.webhook_secret_enc, key.webhook_next_secret_enc, key.webhook_secret_switch_at = nxt, None, None
    if changed:
        log.info("key %s: webhook secret rotation finished, the next secret is now the only one", key.id)
    return bool(changed)


def signing_secrets(key: ApiKey | WebhookEndpoint, now: datetime) -> SigningSecrets:
    """The secrets that sign an attempt made ``now``, as they are now, so a rotation also
    covers the retries of earlier deliveries. A secret that cannot be decrypted
    (``SECRET_KEY`` changed) is left out, with a warning."""
    _promote_if_due(key, now)
    current = decrypt_secret(key.webhook_secret_enc)
    nxt = decrypt_secret(key.webhook_next_secret_enc)
    for token, plaintext in ((key.webhook_secret_enc, current), (key.webhook_next_secret_enc, nxt)):
        if token and plaintext is None:
            log.warning("key %s: a webhook secret cannot be decrypted (SECRET_KEY changed?); "
                        "deliveries are signed without it", key.id)
    return SigningSecrets(current, [s for s in (current, nxt) if s])


def _unix_ms(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)


SIGNATURE_HEADERS = (SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER)


def unsigned_headers(delivery: WebhookDelivery, now: datetime) -> dict:
    """The headers of an attempt made at ``now``, all but the two signatures: ``X-Service-*``
    (§6.2) and Standard Webhooks' ``webhook-id`` and ``webhook-timestamp`` (D16). The
    portal's delivery console shows them as sent."""
    ms = _unix_ms(now)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Service-Event": delivery.event,
        "X-Service-Delivery": delivery.id,
        "X-Service-Timestamp": str(ms),
        ID_HEADER: delivery.id,
        TIMESTAMP_HEADER: str(ms // 1000),
    }


def delivery_headers(delivery: WebhookDelivery, body: bytes, now: datetime,
                     key: ApiKey | WebhookEndpoint | None = None) -> dict:
    """Every header of one attempt of ``delivery`` made ``now``, with ``body`` its exact bytes.

    ``unsigned_headers``, ``X-Service-Signature`` from the current secret, and
    ``webhook-signature`` with one ``v1,`` entry per active secret (D16). A key without a
    usable secret sends neither signature header (an empty key could be forged). ``key``
    may be passed when the caller has the row already.
    """
    ms = _unix_ms(now)
    headers = unsigned_headers(delivery, now)
    secrets_now = signing_secrets(key or _signer(delivery), now)
    if secrets_now.current:
        headers[SIGNATURE_HEADER] = sign(secrets_now.current, body)
    if secrets_now.active:
        headers[STANDARD_SIGNATURE_HEADER] = sign_standard(secrets_now.active, delivery.id, ms // 1000, body)
    return headers


def _signer(delivery: WebhookDelivery) -> ApiKey | WebhookEndpoint:
    """The row whose secrets sign the delivery: its endpoint's, or its key's (the first endpoint, D22)."""
    if delivery.endpoint_id and delivery.endpoint_id != first_endpoint_id(delivery.api_key_id):
        row = endpoint_store.get(delivery.endpoint_id)
        if row is not None:
            return row
    return key_store.get(delivery.api_key_id)


def _key_for(key_id: str, customer_id: str | None) -> ApiKey:
    """The key, of ``customer_id``; ``None`` is the operator (CLI), who may act on any key."""
    if not isinstance(key_id, str) or "\x00" in key_id or len(key_id) > 40:
        raise LookupError(f"no key {key_id}")
    if customer_id is not None:
        return owned_key(key_id, customer_id)
    key = key_store.find(key_id)
    if key is None:
        raise LookupError(f"no key {key_id}")
    return key


def secret_state(key: ApiKey | WebhookEndpoint, now: datetime | None = None) -> dict:
    """Whether the key has a secret and a rotation under way (ending when), for pages and the CLI."""
    _promote_if_due(key, now or utcnow())
    return {"has_secret": bool(key.webhook_secret_enc), "rotating": bool(key.webhook_next_secret_enc),
            "switch_at": iso(key.webhook_secret_switch_at) if key.webhook_next_secret_enc else None}


def check_overlap_hours(hours) -> int:
    if isinstance(hours, bool) or not isinstance(hours, int) or not 0 <= hours <= MAX_OVERLAP_HOURS:
        raise AccountError(f"the overlap must be a whole number of hours from 0 to {MAX_OVERLAP_HOURS} (7 days)")
    return hours


def roll_secret(key_id: str, customer_id: str | None, overlap_hours: int = DEFAULT_OVERLAP_HOURS,
                now: datetime | None = None) -> RolledSecret:
    """Create the key's next secret; returns it (to show once) and when it becomes the only one.

    During the overlap ``X-Service-Signature`` keeps the current secret and
    ``webhook-signature`` carries both. An overlap of 0, or a key without a usable
    secret, makes the new secret current at once. A rotation already under way is
    refused: switch it first, so a next secret a receiver may have installed is never
    silently replaced.
    """
    return roll_secret_of(_key_for(key_id, customer_id), overlap_hours, now or utcnow())


def roll_secret_of(key: ApiKey | WebhookEndpoint, overlap_hours: int, now: datetime) -> RolledSecret:
    """``roll_secret`` of a key or an endpoint row (D22: each endpoint rotates its own secret)."""
    overlap_hours = check_overlap_hours(overlap_hours)
    _promote_if_due(key, now)
    if key.webhook_next_secret_enc:
        raise AccountError("a secret rotation is already under way: switch to the next secret first")
    plaintext = new_webhook_secret()
    if overlap_hours == 0 or decrypt_secret(key.webhook_secret_enc) is None:
        _replace_secret(key, plaintext)
        log.info("key %s: webhook secret replaced (no overlap)", key.id)
        return RolledSecret(plaintext, now)
    switch_at = now + timedelta(hours=overlap_hours)
    # Compare-and-set on the secrets read: a concurrent roll or switch that won makes this one a
    # 409 rather than a rotation from a current secret that is no longer the one shown.
    changed = settings_store.start_rotation(key.id, next_secret_enc=encrypt_secret(plaintext), switch_at=switch_at,
                                       was_secret_enc=key.webhook_secret_enc, model=type(key))
    if not changed:
        raise SecretChanged()
    log.info("key %s: webhook secret rolled, both secrets sign until %s", key.id, iso(switch_at))
    return RolledSecret(plaintext, switch_at, overlapping=True)


def switch_secret(key_id: str, customer_id: str | None, now: datetime | None = None) -> ApiKey:
    """End the rotation under way now: the next secret becomes the only one."""
    key = _key_for(key_id, customer_id)
    switch_secret_of(key, now or utcnow())
    return key_store.get(key.id)


def switch_secret_of(key: ApiKey | WebhookEndpoint, now: datetime) -> None:
    """``switch_secret`` of a key or an endpoint row (D22: each endpoint rotates its own secret)."""
    _promote_if_due(key, now)
    if not key.webhook_next_secret_enc:
        raise AccountError("no secret rotation is under way: roll the secret first")
    if not _switch(key):  # another switch or roll of the rotation read here won
        raise SecretChanged()


# --- The customer's deliveries over the API (D17) ---------------------------------------


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
    if event is not None and event not in events.DELIVERY_EVENTS:
        raise InvalidRequest(f"event must be one of {', '.join(events.DELIVERY_EVENTS)}")
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


