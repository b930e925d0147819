"""A key's further webhook endpoints (D22; its first endpoint is the key's own columns, written
by ``app.webhooks.statements.key_settings``)."""
from __future__ import annotations

from datetime import datetime

from peewee import fn

from app.accounts.models import ApiKey
from app.plumbing.db import columns, execute, instance, table
from app.webhooks.models import WebhookDelivery, WebhookEndpoint


def of_key(api_key_id: str) -> list[WebhookEndpoint]:
    """The key's further endpoints, oldest first."""
    return list(WebhookEndpoint.select().where(WebhookEndpoint.api_key == api_key_id)
                .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id))


def of_keys(api_key_ids: set[str]) -> dict[str, list[WebhookEndpoint]]:
    """``of_key`` for each of the keys, in one statement (a batch look's events name many keys)."""
    found: dict[str, list[WebhookEndpoint]] = {key_id: [] for key_id in api_key_ids}
    if api_key_ids:  # as text, as keys.get_many (read with it for every event)
        rows = execute(f"SELECT {columns(WebhookEndpoint)} FROM {table(WebhookEndpoint)} "
                       "WHERE api_key_id = ANY(?::varchar[]) ORDER BY created_at, id", (list(api_key_ids),))
        for endpoint in (instance(WebhookEndpoint, row) for row in rows.fetchall()):
            found[endpoint.api_key_id].append(endpoint)
    return found


def count_of_key(api_key_id: str) -> int:
    return WebhookEndpoint.select().where(WebhookEndpoint.api_key == api_key_id).count()


def get(endpoint_id: str) -> WebhookEndpoint | None:
    return WebhookEndpoint.get_or_none(WebhookEndpoint.id == endpoint_id)


def create(endpoint_id: str, *, customer_id: str, api_key_id: str, **fields) -> WebhookEndpoint:
    return WebhookEndpoint.create(id=endpoint_id, customer=customer_id, api_key=api_key_id, **fields)


def update(endpoint_id: str, **fields) -> None:
    WebhookEndpoint.update(**fields).where(WebhookEndpoint.id == endpoint_id).execute()


def delete(endpoint_id: str) -> None:
    WebhookEndpoint.delete().where(WebhookEndpoint.id == endpoint_id).execute()


def cancel_pending(endpoint_id: str, *, pending: str, cancelled: str, now: datetime) -> int:
    """End the endpoint's pending deliveries as ``cancelled`` (its job then finds it final); how many."""
    return (WebhookDelivery.update(status=cancelled, finished_at=now, next_attempt_at=None)
            .where((WebhookDelivery.endpoint_id == endpoint_id) & (WebhookDelivery.status == pending)).execute())


def lock(model: type[ApiKey] | type[WebhookEndpoint], row_id: str) -> None:
    """Lock the endpoint's row (the key's for the first endpoint) until the transaction ends."""
    list(model.select(model.id).where(model.id == row_id).for_update())


def last_success_at(endpoint_id: str) -> datetime | None:
    """When the endpoint's newest succeeded delivery was created, or None."""
    return (WebhookDelivery.select(fn.MAX(WebhookDelivery.created_at))
            .where((WebhookDelivery.endpoint_id == endpoint_id) & (WebhookDelivery.status == "succeeded")).scalar())


def failures_after(endpoint_id: str, after: datetime | None) -> tuple[int, datetime | None]:
    """How many of the endpoint's deliveries created after ``after`` (all when None) failed, and
    when the oldest of them was created."""
    query = (WebhookDelivery.select(fn.COUNT(WebhookDelivery.id), fn.MIN(WebhookDelivery.created_at))
             .where((WebhookDelivery.endpoint_id == endpoint_id) & (WebhookDelivery.status == "failed")))
    if after is not None:
        query = query.where(WebhookDelivery.created_at > after)
    row: tuple = query.tuples().get()  # type: ignore[assignment]  # tuples() rows are tuples
    return row[0], row[1]


def in_window(endpoint_id: str, *, statuses: tuple[str, ...], since: datetime, until: datetime
              ) -> list[WebhookDelivery]:
    """The endpoint's deliveries in ``statuses`` created in [since, until), oldest first."""
    return list(WebhookDelivery.select()
                .where((WebhookDelivery.endpoint_id == endpoint_id) & WebhookDelivery.status.in_(statuses)
                       & (WebhookDelivery.created_at >= since) & (WebhookDelivery.created_at < until)
                       & WebhookDelivery.body.is_null(False))
                .order_by(WebhookDelivery.created_at, WebhookDelivery.id))


def keys_listing(event: str) -> list[ApiKey]:
    """The keys not revoked with an endpoint (their own URL or a further one) whose events list
    ``event``, in id order."""
    further = WebhookEndpoint.select(WebhookEndpoint.api_key).where(WebhookEndpoint.webhook_events.contains(event))
    return list(ApiKey.select().where(ApiKey.revoked_at.is_null() & (
        (ApiKey.webhook_url.is_null(False) & ApiKey.webhook_events.contains(event)) | ApiKey.id.in_(further)))
        .order_by(ApiKey.id))
