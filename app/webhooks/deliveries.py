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
place that decides whether and when a delivery is retried). It registers what follows on
that transaction's commit (``app.plumbing.db.after_commit``; ``app.plumbing.jobs`` enqueues wait for it by
themselves): the next job, or for a delivery that failed for good the auto-disable rule of D22;
if Redis refuses the job, the sweep enqueues it.

A delivery pool makes hundreds of attempts a second in one process (``workers.delivery_pool``),
so an attempt is three statements (load, claim, and on success close), written
once as SQL in ``app.webhooks.statements.deliveries``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.plumbing import metrics, runtime
from app.plumbing.db import after_commit, transaction
from app.plumbing.jobs import DELIVERY_JOB_TIMEOUT, delivery_job_id, enqueue_delivery, job_attempt_number, live_job_ids
from app.plumbing.models import utcnow
from app.webhooks import endpoints, signing_secrets
from app.webhooks.models import FAILED, IN_PROGRESS, PENDING, SUCCEEDED, DeliveryAttempt, WebhookDelivery
from app.webhooks.statements import deliveries as store

log = logging.getLogger(__name__)

# RQ kills a delivery job after the job_timeout that app.plumbing.jobs.enqueue_delivery
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


def start_attempt(delivery_id: str, job_id: str | None,
                  admit: Callable[[str, str], bool] | None = None) -> Attempt | str:
    """Reserve the attempt job ``job_id`` stands for, or say why it makes none
    (``"final"``: the delivery is over; ``"stale"``: the job is not the current one;
    ``"busy"``: ``admit(endpoint_id, url)``, asked before anything is written, refused it).

    ``admit`` is the worker's per-endpoint gate (D18): a refused job has made no attempt
    and may be run again later under the same id (``defer``)."""
    loaded = store.load(delivery_id)
    if loaded is None or loaded[0].status != PENDING:
        return "final"
    delivery, signer = loaded  # the key, or the endpoint (D22) whose secrets sign
    if delivery.body is None:  # never pending: erasing its scan cancels it in the same statement
        return "final"
    number = delivery.attempts + 1
    if job_id is None or delivery.job_id != job_id or job_attempt_number(job_id) != number:
        log.info("delivery %s: job %s is not the current one, stopping", delivery_id, job_id)
        return "stale"
    if admit is not None and not admit(delivery.endpoint_id or delivery.api_key_id, delivery.url):
        return "busy"
    # Everything that could fail is done before the claim: a claimed attempt is always
    # followed by its request (or its worker died, which the sweep sees).
    body = delivery.body.encode("utf-8")
    now = utcnow()
    # Every header, both signature schemes, from the key's secrets as they are now (D16),
    # so a rotation also covers the retries of earlier deliveries.
    headers = signing_secrets.delivery_headers(delivery, body, now, key=signer)
    attempt = reserve(delivery, number, job_id, now)
    if attempt is None:
        return "stale"
    return Attempt(delivery, attempt, delivery.url, headers, body)


def reserve(delivery: WebhookDelivery, number: int, job_id: str, now) -> DeliveryAttempt | None:
    """Claim attempt ``number`` and log it as in progress, or None when another job has."""
    return store.claim_attempt(delivery, number=number, job_id=job_id, started_at=now)


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
    closing = store.Closing(SUCCEEDED if outcome.succeeded else FAILED, outcome.status_code, outcome.error,
                            outcome.duration_ms, outcome.excerpt)
    if outcome.succeeded:
        closed = store.close_attempt_and_finish(attempt.id, closing, delivery_id=delivery.id, number=attempt.number,
                                                status=SUCCEEDED, finished_at=now)
    else:
        with transaction():
            closed = store.close_attempt(attempt.id, closing)
            if closed:
                _after_failure(delivery, attempt.number, now)
    if not closed:
        # The sweep took this attempt for lost and already went on with the schedule.
        return "superseded"
    log.info("delivery %s attempt %d: %s", delivery.id, attempt.number,
             outcome.error or f"HTTP {outcome.status_code}")
    metrics.count_webhook_attempt(outcome.succeeded, outcome.error, outcome.status_code)
    if outcome.succeeded and not delivery.series_start:  # a redelivery's wait is the customer's choice
        metrics.observe_delivery_acknowledged(delivery.event, (now - delivery.created_at).total_seconds())
    return SUCCEEDED if outcome.succeeded else FAILED


def defer(delivery_id: str, job_id: str, delay_seconds: float) -> bool:
    """Put back a job that ``start_attempt`` found ``"busy"`` (it made no attempt): the
    same job, so the same attempt, ``delay_seconds`` later. If Redis refuses, the sweep
    enqueues it."""
    return enqueue_delivery(delivery_id, job_id, delay_seconds)


def _after_failure(delivery: WebhookDelivery, number: int, now) -> bool:
    """Hand the delivery to the job of attempt ``number + 1`` (compare-and-set on the
    token), or fail it when its series has had every retry. Call inside the transaction
    that closes attempt ``number``: once it commits, the next job is enqueued, or the
    endpoint of a delivery failed for good is judged by the auto-disable rule (D22). Both
    ways a failed attempt ends (answered, or closed as lost by the sweep) come here, so the
    rule is never skipped. Returns whether a next job was handed the delivery."""
    schedule = runtime.config["WEBHOOK_RETRY_SCHEDULE"]
    place = number - delivery.series_start
    if place > len(schedule):
        store.finish(delivery.id, number=number, status=FAILED, finished_at=now)
        after_commit(endpoints.after_failure, delivery, now)
        return False
    delay = float(schedule[place - 1])
    next_job = delivery_job_id(delivery.id, number + 1)
    handed = store.hand_to_job(delivery.id, status=PENDING, attempts=number,
                               current_job_id=delivery_job_id(delivery.id, number), next_job_id=next_job,
                               next_attempt_at=now + timedelta(seconds=delay))
    if handed:
        enqueue_delivery(delivery.id, next_job, delay)  # once this transaction commits
    return bool(handed)


# --- Retention (D22) ------------------------------------------------------------------

RETENTION_BATCH = 1000


def remove_past_retention(now: datetime | None = None) -> int:
    """Remove the deliveries (bodies and attempts with them) created more than
    ``DELIVERY_RETENTION_DAYS`` ago, in batches so no statement holds many rows; a delivery still
    pending is left to finish. Returns how many were removed."""
    cutoff = (now or utcnow()) - timedelta(days=runtime.config["DELIVERY_RETENTION_DAYS"])
    removed = 0
    while True:
        with transaction():
            count = store.delete_created_before(cutoff, keep_status=PENDING, batch=RETENTION_BATCH)
        removed += count
        if count < RETENTION_BATCH:
            return removed


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
    candidates = store.in_state(PENDING, created_before=stale_before)
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
    """Returns (an attempt was closed as lost, a job was enqueued or registered to be)."""
    last = store.last_attempt(delivery.id)
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
    with transaction():
        closed = store.close_attempt(attempt.id, store.Closing(FAILED, error="worker_lost"))
        if not closed:
            return False, False
        handed = _after_failure(delivery, attempt.number, now)
    log.warning("delivery %s attempt %d: the worker was lost", delivery.id, attempt.number)
    metrics.count_webhook_attempt(False, "worker_lost", None)
    return True, handed
