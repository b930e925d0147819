"""The webhook delivery state machine (§6, D11, D13): what happens to a delivery
around each of its attempts. The worker (``workers.webhook_jobs``) only loads an
attempt here, makes the HTTP request and hands its ``Outcome`` back here.

A job ``dlv-<delivery>-<n>`` may make attempt ``n`` only, and only while it is the
delivery's current job. It reserves the attempt with a compare-and-set on the
delivery's ``attempts`` counter and writes the attempt row as ``in_progress``
*before* sending, so every request has exactly one row: a duplicate or replayed job
loses the compare-and-set and sends nothing; a worker killed during the request
leaves its row ``in_progress``, and the recovery sweep (``recover_deliveries``)
closes it as ``worker_lost`` and goes on with the schedule.

After the request, one transaction records the outcome on the attempt row and moves
the delivery on: ``succeeded`` on any 2xx; otherwise the next job is scheduled
``WEBHOOK_RETRY_SCHEDULE[k-1]`` seconds later (k = the attempt's place in its series),
or the delivery is ``failed`` when the schedule is used up (``_after_failure``: the one
place that decides whether and when a delivery is retried). The next job is enqueued
only after that commit; if Redis refuses it, the sweep enqueues it.

A delivery pool makes hundreds of attempts a second in one process (``workers.delivery_pool``),
so the statements of an attempt are written once as SQL below: an attempt is three
prepared statements (load, claim, and on success close).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from app import metrics, runtime
from app.db import columns, db, execute, execute_prepared, instance, repr_column, table
from app.jobs import DELIVERY_JOB_TIMEOUT, delivery_job_id, enqueue_delivery, job_attempt_number, live_job_ids
from app.models import ApiKey, DeliveryAttempt, WebhookDelivery, utcnow
from app.models.webhooks import FAILED, PENDING, SUCCEEDED
from app.services import webhooks

log = logging.getLogger(__name__)

IN_PROGRESS = "in_progress"
# RQ kills a delivery job after the job_timeout that app.jobs.enqueue_delivery
# gives it (120 s): an attempt in progress for longer has certainly been abandoned.
ATTEMPT_DEADLINE_SECONDS = DELIVERY_JOB_TIMEOUT
# How much of a receiver's answer an attempt keeps.
EXCERPT_BYTES = 1024


@dataclass
class Outcome:
    """What one HTTP request came to."""

    status_code: int | None = None
    error: str | None = None
    excerpt: str | None = None
    duration_ms: int = 0

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300


@dataclass
class Attempt:
    """An attempt reserved for a job: the request to make and the rows to record it on."""

    delivery: WebhookDelivery
    row: DeliveryAttempt
    url: str
    headers: dict
    body: bytes


_col = repr_column
_D, _A = table(WebhookDelivery), table(DeliveryAttempt)
_KEY_COLUMNS = len(ApiKey._meta.sorted_fields)
# The delivery and its key (whose secrets sign the attempt), in one statement.
LOAD = (f"SELECT {columns(WebhookDelivery, 'd')}, {columns(ApiKey, 'k')} FROM {_D} d "
        f"JOIN {table(ApiKey)} k ON k.id = d.{_col(WebhookDelivery.api_key)} WHERE d.id = ?")
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
         f"{_col(DeliveryAttempt.response_excerpt)} = ? "
         f"WHERE id = ? AND {_col(DeliveryAttempt.outcome)} = '{IN_PROGRESS}'")
# Ending a delivery after its attempt ``n``. Parameters: status, finished at, delivery id, n.
FINISH = (f"UPDATE {_D} SET {_col(WebhookDelivery.status)} = ?, {_col(WebhookDelivery.finished_at)} = ?, "
          f"{_col(WebhookDelivery.next_attempt_at)} = NULL "
          f"WHERE id = ? AND {_col(WebhookDelivery.status)} = '{PENDING}' AND {_col(WebhookDelivery.attempts)} = ?")
# A successful attempt closed and its delivery ended in one statement; says
# whether the attempt was still open.
CLOSE_SUCCEEDED = (f"WITH closed AS ({CLOSE} RETURNING id), "
                   f"finished AS ({FINISH} AND EXISTS (SELECT 1 FROM closed) RETURNING id) "
                   f"SELECT count(*) FROM closed")


def start_attempt(delivery_id: str, job_id: str | None,
                  admit: Callable[[str, str], bool] | None = None) -> Attempt | str:
    """Reserve the attempt job ``job_id`` stands for, or say why it makes none
    (``"final"``: the delivery is over; ``"stale"``: the job is not the current one;
    ``"busy"``: ``admit(key_id, url)``, asked before anything is written, refused it).

    ``admit`` is the worker's per-endpoint gate (D18): a refused job has made no attempt
    and may be run again later under the same id (``defer``)."""
    row = execute_prepared(LOAD, (delivery_id,)).fetchone()
    delivery = instance(WebhookDelivery, row[:-_KEY_COLUMNS]) if row else None
    if delivery is None or delivery.status != PENDING:
        return "final"
    number = delivery.attempts + 1
    if job_id is None or delivery.job_id != job_id or job_attempt_number(job_id) != number:
        log.info("delivery %s: job %s is not the current one, stopping", delivery_id, job_id)
        return "stale"
    if admit is not None and not admit(delivery.api_key_id, delivery.url):
        return "busy"
    # Everything that could fail is done before the claim: a claimed attempt is always
    # followed by its request (or its worker died, which the sweep sees).
    body = delivery.body.encode("utf-8")
    now = utcnow()
    # Every header, both signature schemes, from the key's secrets as they are now (D16),
    # so a rotation also covers the retries of earlier deliveries.
    headers = webhooks.delivery_headers(delivery, body, now, key=instance(ApiKey, row[-_KEY_COLUMNS:]))
    row = reserve(delivery, number, job_id, now)
    if row is None:
        return "stale"
    return Attempt(delivery, row, delivery.url, headers, body)


def reserve(delivery: WebhookDelivery, number: int, job_id: str, now) -> DeliveryAttempt | None:
    """Claim attempt ``number`` and log it as in progress, or None when another job has."""
    values = (number, now, delivery.url)
    row = execute_prepared(CLAIM_AND_LOG, (delivery.id, number - 1, job_id) + values).fetchone()
    if row is None:
        return None
    return DeliveryAttempt(id=row[0], delivery=delivery.id, number=number, started_at=now, url=delivery.url,
                           outcome=IN_PROGRESS)


def response_excerpt(data: bytes | None) -> str:
    """What an attempt keeps of a receiver's answer: its first EXCERPT_BYTES bytes as UTF-8
    text (anything else, binary or UTF-16, with replacement characters) without NUL.

    The receiver is untrusted and PostgreSQL refuses NUL in text: an excerpt that could
    not be stored left its attempt unrecorded, and the delivery was sent again although
    the receiver had answered 2xx. So this holds on every database, not only there.
    """
    text = (data or b"")[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    return text.replace("\x00", "")


def record(delivery: WebhookDelivery, attempt: DeliveryAttempt, outcome: Outcome) -> str:
    now = utcnow()
    closing = (SUCCEEDED if outcome.succeeded else FAILED, outcome.status_code, outcome.error, outcome.duration_ms,
               outcome.excerpt, attempt.id)
    next_job = None
    if outcome.succeeded:
        params = closing + (SUCCEEDED, now, delivery.id, attempt.number)
        closed = execute_prepared(CLOSE_SUCCEEDED, params).fetchone()[0]
    else:
        with db.atomic():
            closed = execute(CLOSE, closing).rowcount
            if closed:
                next_job = _after_failure(delivery, attempt.number, now)
    if not closed:
        # The sweep took this attempt for lost and already went on with the schedule.
        return "superseded"
    log.info("delivery %s attempt %d: %s", delivery.id, attempt.number,
             outcome.error or f"HTTP {outcome.status_code}")
    metrics.count_webhook_attempt(outcome.succeeded, outcome.error, outcome.status_code)
    if outcome.succeeded and not delivery.series_start:  # a redelivery's wait is the customer's choice
        metrics.observe_delivery_acknowledged(delivery.event, (now - delivery.created_at).total_seconds())
    if next_job is not None:
        enqueue_delivery(delivery.id, *next_job)
    return SUCCEEDED if outcome.succeeded else FAILED


def defer(delivery_id: str, job_id: str, delay_seconds: float) -> bool:
    """Put back a job that ``start_attempt`` found ``"busy"`` (it made no attempt): the
    same job, so the same attempt, ``delay_seconds`` later. If Redis refuses, the sweep
    enqueues it."""
    return enqueue_delivery(delivery_id, job_id, delay_seconds)


def _finish(delivery_id: str, number: int, status: str, now) -> None:
    execute(FINISH, (status, now, delivery_id, number))


def _after_failure(delivery: WebhookDelivery, number: int, now) -> tuple[str, float] | None:
    """Hand the delivery to the job of attempt ``number + 1`` (compare-and-set on the
    token), or fail it when its series has had every retry. Call inside the transaction
    that closes attempt ``number``; returns ``(job id, delay)`` to enqueue after it."""
    schedule = runtime.config["WEBHOOK_RETRY_SCHEDULE"]
    place = number - delivery.series_start
    if place > len(schedule):
        _finish(delivery.id, number, FAILED, now)
        return None
    delay = float(schedule[place - 1])
    next_job = delivery_job_id(delivery.id, number + 1)
    handed = (WebhookDelivery
              .update(job_id=next_job, next_attempt_at=now + timedelta(seconds=delay))
              .where((WebhookDelivery.id == delivery.id) & (WebhookDelivery.status == PENDING)
                     & (WebhookDelivery.attempts == number)
                     & (WebhookDelivery.job_id == delivery_job_id(delivery.id, number)))
              .execute())
    return (next_job, delay) if handed else None


# --- Recovery (D13) -------------------------------------------------------------------


def recover_deliveries(now, *, at_once: bool = False) -> dict:
    """Re-dispatch pending deliveries whose job Redis no longer holds.

    A delivery created (or last attempted) less than ``RECOVERY_STALE_SECONDS`` ago is
    left alone, as its job may be on its way into Redis, unless ``at_once`` (the
    operator's ``scans recover``: a job enqueued twice still makes one attempt). An attempt still
    ``in_progress`` after ``ATTEMPT_DEADLINE_SECONDS`` is closed as ``worker_lost``
    (a failed attempt) and the schedule goes on from it; otherwise the waiting job is
    enqueued again under the same id, at its due time. Re-enqueuing a job that turns
    out to be alive is harmless: only one of the two can claim the attempt.
    """
    stale_before = None if at_once else now - timedelta(seconds=runtime.config["RECOVERY_STALE_SECONDS"])
    where = WebhookDelivery.status == PENDING
    if stale_before is not None:
        where &= WebhookDelivery.created_at < stale_before
    candidates = list(WebhookDelivery
                      .select(WebhookDelivery.id, WebhookDelivery.job_id, WebhookDelivery.attempts,
                              WebhookDelivery.series_start, WebhookDelivery.next_attempt_at)
                      .where(where))
    alive = live_job_ids([d.job_id for d in candidates if d.job_id])
    report = {"deliveries_redispatched": 0, "attempts_closed": 0}
    for delivery in candidates:
        if delivery.job_id in alive:
            continue
        closed, redispatched = _recover(delivery, now, stale_before)
        report["attempts_closed"] += closed
        report["deliveries_redispatched"] += redispatched
    return report


def _recover(delivery: WebhookDelivery, now, stale_before) -> tuple[bool, bool]:
    """Returns (an attempt was closed as lost, a job was enqueued)."""
    last = (DeliveryAttempt.select().where(DeliveryAttempt.delivery == delivery.id)
            .order_by(DeliveryAttempt.number.desc()).first())
    if last is not None and last.outcome == IN_PROGRESS:
        if last.started_at >= now - timedelta(seconds=max(ATTEMPT_DEADLINE_SECONDS,
                                                          runtime.config["RECOVERY_STALE_SECONDS"])):
            return False, False
        return _close_lost(delivery, last, now)
    if last is not None and stale_before is not None and last.started_at >= stale_before:
        return False, False
    delay = max(0.0, ((delivery.next_attempt_at or now) - now).total_seconds())
    log.info("delivery %s: job %s was lost, re-dispatched", delivery.id, delivery.job_id)
    return False, enqueue_delivery(delivery.id, delivery.job_id, delay)


def _close_lost(delivery: WebhookDelivery, attempt: DeliveryAttempt, now) -> tuple[bool, bool]:
    """Close an abandoned attempt as failed (``worker_lost``) and go on with the schedule."""
    with db.atomic():
        closed = execute(CLOSE, (FAILED, None, "worker_lost", None, None, attempt.id)).rowcount
        if not closed:
            return False, False
        next_job = _after_failure(delivery, attempt.number, now)
    log.warning("delivery %s attempt %d: the worker was lost", delivery.id, attempt.number)
    metrics.count_webhook_attempt(False, "worker_lost", None)
    return True, next_job is not None and enqueue_delivery(delivery.id, *next_job)
