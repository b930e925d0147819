"""Webhook deliveries and their attempts (§6, D11, D13, D17).

A delivery pool makes hundreds of attempts a second in one process (``workers.delivery_pool``),
so the statements of an attempt are written once as SQL below: an attempt is three
statements (``load``, ``claim_attempt``, and on success ``close_attempt_and_finish``).
Every change of a delivery's state is a compare-and-set on its ``status``, ``attempts``
and ``job_id`` (the fencing token); the state machine itself, the retry schedule and
what counts as stale are ``app.webhooks.deliveries``'s.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from app.accounts.models import ApiKey
from app.plumbing.db import columns, execute, instance, repr_column, table
from app.webhooks.models import IN_PROGRESS, PENDING, DeliveryAttempt, WebhookDelivery, WebhookEndpoint

_col = repr_column
_D, _A = table(WebhookDelivery), table(DeliveryAttempt)
_KEY_COLUMNS = len(ApiKey._meta.sorted_fields)
_ENDPOINT_COLUMNS = len(WebhookEndpoint._meta.sorted_fields)
# The delivery, its key and its endpoint when that is not the key's first (D22): the secrets of
# one of them sign the attempt. One statement.
LOAD = (f"SELECT {columns(WebhookDelivery, 'd')}, {columns(ApiKey, 'k')}, {columns(WebhookEndpoint, 'e')} "
        f"FROM {_D} d JOIN {table(ApiKey)} k ON k.id = d.{_col(WebhookDelivery.api_key)} "
        f"LEFT JOIN {table(WebhookEndpoint)} e ON e.id = d.{_col(WebhookDelivery.endpoint_id)} WHERE d.id = ?")
# The claim: attempt ``n`` is this job's only while the delivery is pending, has had n - 1
# attempts and names this job. Parameters: delivery id, n - 1, job id.
CLAIM = (f"UPDATE {_D} SET {_col(WebhookDelivery.attempts)} = {_col(WebhookDelivery.attempts)} + 1 "
         f"WHERE id = ? AND {_col(WebhookDelivery.attempts)} = ? AND {_col(WebhookDelivery.job_id)} = ? "
         f"AND {_col(WebhookDelivery.status)} = '{PENDING}'")
_ATTEMPT_FIELDS = (DeliveryAttempt.delivery, DeliveryAttempt.number, DeliveryAttempt.started_at, DeliveryAttempt.url,
                   DeliveryAttempt.outcome)
_ATTEMPT_INSERT = f"INSERT INTO {_A} ({', '.join(_col(f) for f in _ATTEMPT_FIELDS)})"
# The claim and the attempt's row, in progress, in one statement (the row only if the claim
# took). Parameters: delivery id, n - 1, job id, n, started at, url.
CLAIM_AND_LOG = (f"WITH claimed AS ({CLAIM} RETURNING id) "
                 f"{_ATTEMPT_INSERT} SELECT id, ?, ?, ?, '{IN_PROGRESS}' FROM claimed RETURNING id")
# Closing an attempt, once: the sweep may have closed it as lost already. Parameters:
# outcome, status code, error, duration, excerpt, attempt id.
CLOSE = (f"UPDATE {_A} SET {_col(DeliveryAttempt.outcome)} = ?, {_col(DeliveryAttempt.status_code)} = ?, "
         f"{_col(DeliveryAttempt.error)} = ?, {_col(DeliveryAttempt.duration_ms)} = ?, "
         f"{_col(DeliveryAttempt.response_excerpt)} = (SELECT CASE WHEN d.body IS NULL THEN NULL ELSE ?::text END "
         f"FROM {_D} d WHERE d.id = {_A}.{_col(DeliveryAttempt.delivery)}) "
         f"WHERE id = ? AND {_col(DeliveryAttempt.outcome)} = '{IN_PROGRESS}'")
# (An attempt under way when its scan was erased keeps no excerpt: the receiver may echo the body.)
# Ending a delivery after its attempt ``n``. Parameters: status, finished at, delivery id, n.
FINISH = (f"UPDATE {_D} SET {_col(WebhookDelivery.status)} = ?, {_col(WebhookDelivery.finished_at)} = ?, "
          f"{_col(WebhookDelivery.next_attempt_at)} = NULL "
          f"WHERE id = ? AND {_col(WebhookDelivery.status)} = '{PENDING}' AND {_col(WebhookDelivery.attempts)} = ?")
# A successful attempt closed and its delivery ended in one statement; says
# whether the attempt was still open.
CLOSE_SUCCEEDED = (f"WITH closed AS ({CLOSE} RETURNING id), "
                   f"finished AS ({FINISH} AND EXISTS (SELECT 1 FROM closed) RETURNING id) "
                   f"SELECT count(*) FROM closed")


# --- An attempt ------------------------------------------------------------------------


def load(delivery_id: str) -> tuple[WebhookDelivery, ApiKey | WebhookEndpoint] | None:
    """The delivery and the row whose secrets sign it (its endpoint's, or its key's for the key's
    first endpoint), or None (one statement)."""
    row = execute(LOAD, (delivery_id,)).fetchone()
    if row is None:
        return None
    split = len(row) - _KEY_COLUMNS - _ENDPOINT_COLUMNS
    delivery = instance(WebhookDelivery, row[:split])
    if row[-_ENDPOINT_COLUMNS] is not None:  # the endpoint's id: a further endpoint's row was found
        return delivery, instance(WebhookEndpoint, row[-_ENDPOINT_COLUMNS:])
    return delivery, instance(ApiKey, row[split:split + _KEY_COLUMNS])


def claim_attempt(delivery: WebhookDelivery, *, number: int, job_id: str, started_at: datetime
                  ) -> DeliveryAttempt | None:
    """Claim attempt ``number`` for ``job_id`` and write its row, in progress (one
    statement); None when the delivery is not pending with ``number - 1`` attempts under this job."""
    params = (delivery.id, number - 1, job_id, number, started_at, delivery.url)
    row = execute(CLAIM_AND_LOG, params).fetchone()
    if row is None:
        return None
    return DeliveryAttempt(id=row[0], delivery=delivery.id, number=number, started_at=started_at, url=delivery.url,
                           outcome=IN_PROGRESS)


@dataclass
class Closing:
    """What an attempt is closed with (``CLOSE``'s parameters before the attempt's id)."""

    outcome: str
    status_code: int | None = None
    error: str | None = None
    duration_ms: int | None = None
    excerpt: str | None = None

    def params(self) -> tuple:
        return (self.outcome, self.status_code, self.error, self.duration_ms, self.excerpt)


def close_attempt(attempt_id: int, closing: Closing) -> int:
    """Close the attempt if it is still in progress; the rows changed (0 or 1)."""
    return execute(CLOSE, closing.params() + (attempt_id,)).rowcount


def close_attempt_and_finish(attempt_id: int, closing: Closing, *, delivery_id: str, number: int, status: str,
                             finished_at: datetime) -> int:
    """``close_attempt`` and, if it closed, ``finish`` the delivery after attempt ``number`` as
    ``status``, in one statement; the attempts closed (0 or 1)."""
    params = closing.params() + (attempt_id, status, finished_at, delivery_id, number)
    return execute(CLOSE_SUCCEEDED, params).fetchone()[0]


def finish(delivery_id: str, *, number: int, status: str, finished_at: datetime) -> None:
    """End a delivery still pending after its attempt ``number`` as ``status``."""
    execute(FINISH, (status, finished_at, delivery_id, number))


def hand_to_job(delivery_id: str, *, status: str, attempts: int, current_job_id: str, next_job_id: str,
                next_attempt_at: datetime) -> int:
    """Move the delivery's token from ``current_job_id`` to ``next_job_id``, due at
    ``next_attempt_at``, if it is still ``status`` with ``attempts``; the rows changed."""
    return (WebhookDelivery
            .update(job_id=next_job_id, next_attempt_at=next_attempt_at)
            .where((WebhookDelivery.id == delivery_id) & (WebhookDelivery.status == status)
                   & (WebhookDelivery.attempts == attempts)
                   & (WebhookDelivery.job_id == current_job_id))
            .execute())


def in_state(status: str, *, created_before: datetime | None) -> list[WebhookDelivery]:
    """The deliveries in ``status`` created before ``created_before`` (every one when None),
    with only what the recovery sweep reads: id, job, attempts, series start, due time, and the key
    and endpoint the auto-disable rule judges when it fails one for good."""
    where = WebhookDelivery.status == status
    if created_before is not None:
        where &= WebhookDelivery.created_at < created_before
    return list(WebhookDelivery
                .select(WebhookDelivery.id, WebhookDelivery.job_id, WebhookDelivery.attempts,
                        WebhookDelivery.series_start, WebhookDelivery.next_attempt_at,
                        WebhookDelivery.api_key, WebhookDelivery.endpoint_id)
                .where(where))


def last_attempt(delivery_id: str) -> DeliveryAttempt | None:
    return (DeliveryAttempt.select().where(DeliveryAttempt.delivery == delivery_id)
            .order_by(DeliveryAttempt.number.desc()).first())


# --- Deliveries: writing, reading, redelivering ----------------------------------------


def create(delivery_id: str, *, customer_id: str, api_key_id: str, scan_id: str | None, event: str, url: str | None,
           body: str, job_id: str | None, next_attempt_at: datetime | None, livemode: bool,
           endpoint_id: str | None = None, status: str = PENDING) -> WebhookDelivery:
    return WebhookDelivery.create(
        id=delivery_id, customer=customer_id, api_key=api_key_id, scan_id=scan_id, event=event,
        url=url, body=body, job_id=job_id, next_attempt_at=next_attempt_at, livemode=livemode,
        endpoint_id=endpoint_id, status=status)


def get(delivery_id: str) -> WebhookDelivery:
    return WebhookDelivery.get_by_id(delivery_id)


def of_customer(delivery_id: str, customer_id: str, livemode: bool | None = None) -> WebhookDelivery | None:
    """The customer's delivery (of one mode when ``livemode`` is given), or None."""
    query = (WebhookDelivery.id == delivery_id) & (WebhookDelivery.customer == customer_id)
    if livemode is not None:
        query &= WebhookDelivery.livemode == livemode
    return WebhookDelivery.get_or_none(query)


def owner(delivery_id: str) -> str | None:
    """The id of the customer the delivery belongs to, or None."""
    return WebhookDelivery.select(WebhookDelivery.customer).where(WebhookDelivery.id == delivery_id).scalar()


def restart_series(delivery: WebhookDelivery, *, status: str, url: str, next_attempt_at: datetime,
                   job_id: str) -> int:
    """Start a new attempt series (``status``, from the attempts made so far, to ``url``, under
    ``job_id``) if the delivery is still in the status and at the attempts ``delivery`` was read
    with, and still has its body (its scan was not erased meanwhile); the rows changed (0 or 1)."""
    return (WebhookDelivery
            .update(status=status, series_start=delivery.attempts, url=url, finished_at=None,
                    next_attempt_at=next_attempt_at, job_id=job_id)
            .where((WebhookDelivery.id == delivery.id) & (WebhookDelivery.status == delivery.status)
                   & (WebhookDelivery.attempts == delivery.attempts) & WebhookDelivery.body.is_null(False))
            .execute())


def test_event_times(api_key_id: str, *, since: datetime) -> list[datetime]:
    """When each of the key's test deliveries (those without a scan) created after ``since``
    was created, oldest first."""
    return [d.created_at for d in (WebhookDelivery.select(WebhookDelivery.created_at)
                                   .where((WebhookDelivery.api_key == api_key_id) & WebhookDelivery.scan_id.is_null()
                                          & (WebhookDelivery.created_at > since))
                                   .order_by(WebhookDelivery.created_at))]


def page_of_key(api_key_id: str, *, status: str | None, event: str | None, page: int,
                per_page: int, endpoint_id: str | None = None) -> tuple[int, list[WebhookDelivery]]:
    """How many deliveries of the key (with ``status``, ``event``, ``endpoint_id`` when given)
    there are, and page ``page`` of them, newest first."""
    query = WebhookDelivery.select().where(WebhookDelivery.api_key == api_key_id)
    if endpoint_id:
        query = query.where(WebhookDelivery.endpoint_id == endpoint_id)
    if status:
        query = query.where(WebhookDelivery.status == status)
    if event:
        query = query.where(WebhookDelivery.event == event)
    total = query.count()
    return total, list(query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
                       .paginate(page, per_page))


def attempts_of(delivery_ids: Iterable[str], *, newest_first: bool = False) -> list[DeliveryAttempt]:
    """The attempts of the deliveries (a non-empty list), by number."""
    order = DeliveryAttempt.number.desc() if newest_first else DeliveryAttempt.number
    return list(DeliveryAttempt.select().where(DeliveryAttempt.delivery.in_(list(delivery_ids))).order_by(order))


def of_scan(scan_id: str, customer_id: str) -> list[WebhookDelivery]:
    """The deliveries of the customer's scan, newest first."""
    return list(WebhookDelivery.select()
                .where((WebhookDelivery.scan_id == scan_id) & (WebhookDelivery.customer == customer_id))
                .order_by(WebhookDelivery.created_at.desc()))


def _customers(customer_id: str, livemode: bool):
    """The one query of a customer's deliveries (every key of theirs) of one mode, newest first."""
    return (WebhookDelivery.select()
            .where((WebhookDelivery.customer == customer_id) & (WebhookDelivery.livemode == livemode))
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc()))


def customers_delivery(customer_id: str, delivery_id: str, *, livemode: bool) -> WebhookDelivery | None:
    """The customer's delivery ``delivery_id`` of that mode, or None."""
    return _customers(customer_id, livemode).where(WebhookDelivery.id == delivery_id).first()


def customers_page(customer_id: str, *, livemode: bool, status: str | None, event: str | None,
                   scan_id: str | None, after: WebhookDelivery | None, limit: int,
                   endpoint_id: str | None = None) -> list[WebhookDelivery]:
    """Up to ``limit`` of the customer's deliveries of that mode (with ``status``, ``event``,
    ``scan_id`` when given), newest first, starting after the delivery ``after`` when given."""
    query = _customers(customer_id, livemode)
    if status:
        query = query.where(WebhookDelivery.status == status)
    if event:
        query = query.where(WebhookDelivery.event == event)
    if scan_id is not None:
        query = query.where(WebhookDelivery.scan_id == scan_id)
    if endpoint_id is not None:
        query = query.where(WebhookDelivery.endpoint_id == endpoint_id)
    if after is not None:
        query = query.where((WebhookDelivery.created_at < after.created_at)
                            | ((WebhookDelivery.created_at == after.created_at)
                               & (WebhookDelivery.id < after.id)))
    return list(query.limit(limit))


# --- erasure (D20) ---------------------------------------------------------------------


def erase_for_scans(scan_ids: list[str], *, pending: str, cancelled: str, now: datetime) -> int:
    """Forget the bodies of the deliveries of these scans and their attempts' response excerpts;
    a delivery still ``pending`` becomes ``cancelled`` (its jobs find it so and stop). Returns
    how many were cancelled."""
    rows = execute(
        f"WITH erased AS (UPDATE {_D} SET body = NULL, "
        f"{_col(WebhookDelivery.status)} = CASE WHEN {_col(WebhookDelivery.status)} = ? THEN ? "
        f"ELSE {_col(WebhookDelivery.status)} END, "
        f"{_col(WebhookDelivery.finished_at)} = COALESCE({_col(WebhookDelivery.finished_at)}, ?), "
        f"{_col(WebhookDelivery.next_attempt_at)} = NULL "
        f"WHERE {_col(WebhookDelivery.scan_id)} = ANY(?) "
        f"RETURNING id, {_col(WebhookDelivery.status)} AS status), "
        f"excerpts AS (UPDATE {_A} SET {_col(DeliveryAttempt.response_excerpt)} = NULL "
        f"WHERE {_col(DeliveryAttempt.delivery)} IN (SELECT id FROM erased) "
        f"AND {_col(DeliveryAttempt.response_excerpt)} IS NOT NULL) "
        f"SELECT count(*) FILTER (WHERE status = ?) FROM erased",
        (pending, cancelled, now, list(scan_ids), cancelled)).fetchone()
    return int(rows[0])



def delete_created_before(cutoff: datetime, *, keep_status: str, batch: int) -> int:
    """Delete up to ``batch`` deliveries created before ``cutoff`` (their attempts go with them),
    but those in ``keep_status``; how many were deleted."""
    ids = (WebhookDelivery.select(WebhookDelivery.id)
           .where((WebhookDelivery.created_at < cutoff) & (WebhookDelivery.status != keep_status)).limit(batch))
    DeliveryAttempt.delete().where(DeliveryAttempt.delivery.in_(ids)).execute()
    return WebhookDelivery.delete().where(WebhookDelivery.id.in_(ids)).execute()
