"""A key's webhook endpoints (D22): listing, creating, changing, deleting, rolling their
secrets, auto-disable and recovery.

The key's first endpoint is the key's own webhook columns (so ``keys set-webhook``, the key
page and the deliveries written before endpoints keep working); further ones are
``WebhookEndpoint`` rows with the same column names (``outbox.Endpoint`` hides the
difference). Fan-out of an event to the endpoints is ``outbox.record_event``.

Functions take the key the caller acts for (an API key, or the portal's key page's key) and
raise ``EndpointNotFound`` for an endpoint of another key; a refused input raises
``InvalidRequest``.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.events import kinds as events
from app.plumbing import metrics, runtime
from app.plumbing.crypto import encrypt_secret, new_webhook_secret
from app.plumbing.db import write_transaction
from app.plumbing.errors import AccountError, Conflict, EndpointNotFound, InvalidRequest, SecretChanged
from app.plumbing.jobs import delivery_job_id
from app.plumbing.models import iso, new_id, utcnow
from app.plumbing.outbound_urls import check_webhook_url
from app.webhooks.event_kinds import ENDPOINT_DISABLED
from app.webhooks.key_settings import check_secret
from app.webhooks.models import CANCELLED, FAILED, PENDING, SKIPPED, WebhookDelivery
from app.webhooks.outbox import (
    DEFAULT_EVENTS,
    Endpoint,
    first_endpoint_id,
    key_endpoints,
    record_key_event,
    send_on_commit,
)
from app.webhooks.signing_secrets import (
    DEFAULT_OVERLAP_HOURS,
    RolledSecret,
    roll_secret_of,
    secret_state,
    switch_secret_of,
)
from app.webhooks.statements import deliveries as delivery_store
from app.webhooks.statements import endpoints as store
from app.webhooks.statements import key_settings as settings_store

log = logging.getLogger(__name__)

MAX_ENDPOINTS = 10
MAX_DESCRIPTION = 500
# What an endpoint may list: every event a delivery may carry (the registry's, every domain's).
EVENT_NAMES = events.delivery_events()
# Auto-disable needs at least this many failed deliveries in the failing time (D22).
MIN_FAILURES_TO_DISABLE = 10
# Recovering sends these again: what failed, and what a disabled endpoint did not get.
RECOVERABLE = (FAILED, SKIPPED)


# --- Reading --------------------------------------------------------------------------


def endpoint_dict(endpoint: Endpoint, now: datetime | None = None) -> dict:
    """An endpoint as the API and the portal show it (never its secret)."""
    secret = secret_state(endpoint.row, now or utcnow())
    return {"endpoint_id": endpoint.id, "url": endpoint.url, "events": endpoint.events,
            "payload": endpoint.payload, "enabled": endpoint.enabled, "description": endpoint.description,
            "disabled_at": iso(endpoint.disabled_at),
            "secret_rotation_ends_at": secret["switch_at"]}


def list_endpoints(key: ApiKey) -> list[dict]:
    """The key's endpoints, the first first."""
    return [endpoint_dict(e) for e in key_endpoints(key_store.get(key.id))]


def find(key: ApiKey, endpoint_id: str) -> Endpoint:
    """The key's endpoint ``endpoint_id``; ``EndpointNotFound`` for another key's or none."""
    for endpoint in key_endpoints(key_store.get(key.id)):  # as stored now, not as the caller read it
        if endpoint.id == endpoint_id:
            return endpoint
    raise EndpointNotFound(f"no endpoint {endpoint_id}"[:80])


def read(key: ApiKey, endpoint_id: str) -> dict:
    return endpoint_dict(find(key, endpoint_id))


# --- Checks ---------------------------------------------------------------------------


def check_events(names) -> list[str]:
    if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
        raise InvalidRequest(f"events must be a non-empty list of: {', '.join(EVENT_NAMES)}")
    unknown = [n for n in names if n not in EVENT_NAMES]
    if unknown:
        raise InvalidRequest(f"events must be among {', '.join(EVENT_NAMES)}")
    return list(dict.fromkeys(names))  # once each, in the order given


def _check_payload(payload) -> str:
    if payload not in events.PAYLOADS:
        raise InvalidRequest(f"payload must be one of {', '.join(events.PAYLOADS)}")
    return payload


def _check_description(text) -> str:
    if not isinstance(text, str) or len(text) > MAX_DESCRIPTION:
        raise InvalidRequest(f"description must be text of at most {MAX_DESCRIPTION} characters")
    return text


def _check_url(url) -> str:
    url = (url or "").strip() if isinstance(url, str) else ""
    if not url:
        raise InvalidRequest("url is required")
    try:
        check_webhook_url(url)
    except AccountError as refused:  # the same rules (SSRF) as the key's URL, as a 400
        raise InvalidRequest(str(refused)) from None
    return url


def _check_secret(secret) -> str:
    try:
        return check_secret(secret)
    except AccountError as refused:
        raise InvalidRequest(str(refused)) from None


# --- Changing -------------------------------------------------------------------------


def create(key: ApiKey, *, url, events=None, payload="full", enabled=True, description="",
           secret=None) -> tuple[dict, str]:
    """A new endpoint of the key; returns it and its secret (to show once: ``secret`` when given,
    else a generated one). A key without a webhook URL gets it as its first endpoint."""
    fields = {"webhook_url": _check_url(url), "webhook_events": check_events(events or list(DEFAULT_EVENTS)),
              "webhook_payload": _check_payload(payload), "webhook_enabled": bool(enabled),
              "webhook_description": _check_description(description)}
    plaintext = _check_secret(secret) if secret else new_webhook_secret()
    fields["webhook_secret_enc"] = encrypt_secret(plaintext)
    with write_transaction():
        key_store.lock(key.id)  # two creations at once both count the other
        fresh = key_store.get(key.id)
        if fresh.webhook_url is None:
            settings_store.update_key(key.id, webhook_next_secret_enc=None, webhook_secret_switch_at=None,
                             webhook_disabled_at=None, **fields)
            endpoint_id = first_endpoint_id(key.id)
        else:
            if 1 + store.count_of_key(key.id) >= MAX_ENDPOINTS:
                # The key's state refuses it, not the request's shape: a 409, like other conflicts.
                raise Conflict(f"a key has at most {MAX_ENDPOINTS} endpoints", code="endpoint_limit")
            endpoint_id = new_id("ep")
            store.create(endpoint_id, customer_id=key.customer_id, api_key_id=key.id, **fields)
    log.info("key %s: endpoint %s created", key.id, endpoint_id)
    return read(key_store.get(key.id), endpoint_id), plaintext


UPDATABLE = ("url", "events", "payload", "enabled", "description")


def update(key: ApiKey, endpoint_id: str, **changes) -> dict:
    """Change the endpoint's ``url``, ``events``, ``payload``, ``enabled`` or ``description``
    (those given). Enabling an endpoint auto-disable stopped resumes its deliveries."""
    endpoint = find(key, endpoint_id)
    fields: dict = {}
    if "url" in changes:
        fields["webhook_url"] = _check_url(changes["url"])
    if "events" in changes:
        fields["webhook_events"] = check_events(changes["events"])
    if "payload" in changes:
        fields["webhook_payload"] = _check_payload(changes["payload"])
    if "description" in changes:
        fields["webhook_description"] = _check_description(changes["description"])
    if "enabled" in changes:
        fields.update(webhook_enabled=bool(changes["enabled"]), webhook_disabled_at=None)
    if fields:
        _save(endpoint, **fields)
    return read(key_store.get(key.id), endpoint_id)


def set_enabled(key: ApiKey, endpoint_id: str, *, enabled: bool) -> dict:
    return update(key, endpoint_id, enabled=enabled)


def _save(endpoint: Endpoint, **fields) -> None:
    if endpoint.first:
        settings_store.update_key(endpoint.key.id, **fields)
    else:
        store.update(endpoint.id, **fields)


def delete(key: ApiKey, endpoint_id: str) -> None:
    """Remove the endpoint: no later event goes there; its deliveries stay listed. Deleting the
    first endpoint removes the key's webhook URL and secret (as ``keys set-webhook`` with no URL).
    A further endpoint's pending deliveries are cancelled with it: no secret is left to sign them."""
    endpoint = find(key, endpoint_id)
    with write_transaction():
        if endpoint.first:
            settings_store.update_key(key.id, webhook_url=None, webhook_secret_enc=None, webhook_next_secret_enc=None,
                             webhook_secret_switch_at=None, webhook_events=None, webhook_enabled=True,
                             webhook_description="", webhook_disabled_at=None, webhook_payload="full")
        else:
            store.delete(endpoint.id)
            store.cancel_pending(endpoint.id, pending=PENDING, cancelled=CANCELLED, now=utcnow())
    log.info("key %s: endpoint %s deleted", key.id, endpoint_id)


def roll_secret(key: ApiKey, endpoint_id: str, *, overlap_hours: int = DEFAULT_OVERLAP_HOURS,
                now: datetime | None = None) -> RolledSecret:
    """The endpoint's next secret (to show once), with a rolling overlap as the key's (D16)."""
    try:
        return roll_secret_of(find(key, endpoint_id).row, overlap_hours, now or utcnow())
    except SecretChanged:
        raise  # a concurrent roll or switch won: 409 conflict
    except AccountError as refused:
        raise InvalidRequest(str(refused)) from None


def switch_secret(key: ApiKey, endpoint_id: str, *, now: datetime | None = None) -> dict:
    """End the endpoint's rotation now: its next secret becomes the only one."""
    try:
        switch_secret_of(find(key, endpoint_id).row, now or utcnow())
    except SecretChanged:
        raise  # a concurrent roll or switch won: 409 conflict
    except AccountError as refused:
        raise InvalidRequest(str(refused)) from None
    return read(key, endpoint_id)


# --- Auto-disable (D22) -----------------------------------------------------------------


def failing_since(endpoint_id: str) -> tuple[int, datetime | None]:
    """How many deliveries to the endpoint failed since its last success, and since when."""
    return store.failures_after(endpoint_id, store.last_success_at(endpoint_id))


def after_failure(delivery: WebhookDelivery, now: datetime | None = None) -> bool:
    """Called when a delivery failed for good (its last attempt failed, or the recovery sweep
    closed it as lost): disable its endpoint if the rule of ``disable_if_dead`` holds; returns
    whether it did."""
    key = key_store.get(delivery.api_key_id)
    endpoint = next((e for e in key_endpoints(key) if e.id == delivery.endpoint_id), None)
    return endpoint is not None and disable_if_dead(endpoint, now or utcnow())


def disable_if_dead(endpoint: Endpoint, now: datetime, *, as_of: datetime | None = None) -> bool:
    """The auto-disable rule, in this one place (D22): an enabled endpoint to which every delivery
    has failed for ``WEBHOOK_DISABLE_AFTER_HOURS``, with at least 10 failed, is disabled; its later
    events are recorded as ``skipped``, an ``endpoint.disabled`` event goes to the key's other
    enabled endpoints that list it, and the metric counts it. Returns whether it disabled it.

    ``as_of`` judges the rule at another moment than ``now`` (the operator's QA clock,
    ``keys check-endpoints --hours-ahead``); the disabling itself is dated ``now``."""
    if not endpoint.enabled:
        return False
    count, since = failing_since(endpoint.id)
    hours = runtime.config["WEBHOOK_DISABLE_AFTER_HOURS"]
    if since is None or count < MIN_FAILURES_TO_DISABLE or since > (as_of or now) - timedelta(hours=hours):
        return False
    key = endpoint.key
    with write_transaction():
        store.lock(type(endpoint.row), endpoint.row.id)
        if not find(key_store.get(key.id), endpoint.id).enabled:  # another worker disabled it meanwhile
            return False
        _save(endpoint, webhook_enabled=False, webhook_disabled_at=now)
        body = {"event": ENDPOINT_DISABLED, "endpoint_id": endpoint.id, "livemode": key.livemode,
                "disabled_at": iso(now), "failing_since": iso(since), "failed_deliveries": count}
        record_key_event(key_store.get(key.id), body, leave_out=endpoint.id)  # sent once this commits
    log.warning("key %s: endpoint %s disabled after %d failed deliveries since %s", key.id, endpoint.id, count,
                iso(since))
    metrics.count_endpoint_disabled()
    return True


def check_endpoints(key: ApiKey, *, now: datetime | None = None, hours_ahead: int = 0) -> list[str]:
    """Judge the auto-disable rule for each of the key's enabled endpoints, as if ``hours_ahead``
    hours had passed (the operator's QA clock: the workers judge it after each delivery that
    failed for good); returns the ids of those it disabled."""
    now = now or utcnow()
    as_of = now + timedelta(hours=hours_ahead)
    return [e.id for e in key_endpoints(key_store.get(key.id)) if disable_if_dead(e, now, as_of=as_of)]


# --- Recovery ---------------------------------------------------------------------------


def recover(key: ApiKey, endpoint_id: str, *, since: datetime, until: datetime | None = None) -> int:
    """Send again, once each, oldest first, every delivery to the endpoint created in [since,
    until) that failed or was skipped while it was disabled, to its URL of now; returns how many
    were queued."""
    endpoint = find(key, endpoint_id)
    until = until or utcnow()
    if since >= until:
        raise InvalidRequest("since must be before until")
    queued = []
    for delivery in store.in_window(endpoint.id, statuses=RECOVERABLE, since=since, until=until):
        changed = delivery_store.restart_series(
            delivery, status=PENDING, url=endpoint.url, next_attempt_at=utcnow(),
            job_id=_job_id(delivery))
        if changed:  # a concurrent recover or redeliver took it: sent once, not twice
            queued.append(delivery_store.get(delivery.id))
            send_on_commit(queued[-1])
    log.info("key %s: endpoint %s recovery queued %d deliveries", key.id, endpoint.id, len(queued))
    return len(queued)


def _job_id(delivery: WebhookDelivery) -> str:
    return delivery_job_id(delivery.id, delivery.attempts + 1)
