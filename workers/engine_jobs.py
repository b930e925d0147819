"""Tracking jobs: each run looks at one scan's engine state once, then returns.

A job never sleeps waiting for the engine (D13): when the scan is unfinished it
schedules its successor with ``enqueue_in`` and ends. Each scan has one live chain:
the scan row's ``tracking_job_id`` is a fencing token, and a job whose id is not the
current token (a duplicate, a replay, a chain the sweep replaced) does nothing.
Handing the token to the successor is a compare-and-set, so two jobs can never both
continue a chain.
"""
from __future__ import annotations

import logging

from rq import get_current_job

from app.extensions import db
from app.logging_setup import log_context
from app.models import utcnow
from app.models.scans import FINAL
from app.services import engine, erasure, reads, scans, tracking

log = logging.getLogger(__name__)


backoff = tracking.backoff


def track_scan(scan_id: str) -> str:
    job = get_current_job()
    job_id = job.id if job else None
    with log_context(scan_id=scan_id), db.connection_context():
        return _track(scan_id, job_id)


def _track(scan_id: str, job_id: str | None) -> str:
    scan = reads.scan_by_id(scan_id)
    if scan is None or scan.status in FINAL:
        return "final"
    if job_id is not None and scan.tracking_job_id != job_id:
        log.info("scan %s: job %s is not the current tracker, stopping", scan_id, job_id)
        return "stale"
    now = utcnow()
    deadline = tracking.deadline(scan)  # a test scan's is the sandbox's (D15)
    if scan.engine_id is None:
        # Reserved but not yet recorded as submitted (creation is still in its engine call):
        # nothing to look at. Never failed here, however old: if its creator died, the
        # sweep reverses the reservation (no 202 was ever answered).
        tracking.hand_over(scan_id, job_id, tracking.poll_seconds())
        return "waiting"
    # Amended D13: the timeout is a verdict on what the engine says, never on age alone.
    # A scan the engine finished while Redis or the workers were down completes however
    # late this look comes; one it cannot tell about (unreachable, nonsense) stays in
    # flight and is looked at again.
    try:
        state = scans.engine_for(scan.livemode).status(scan.engine_id)
        outcome = tracking.apply_look(scan, state, past_deadline=now >= deadline)
    except engine.EngineError as exc:
        errors = scan.check_errors + 1
        log.warning("scan %s: engine error %d (%s), retrying", scan_id, errors, exc)
        tracking.hand_over(scan_id, job_id, tracking.look_again_in(scan, now, deadline, errors=errors),
                           check_errors=errors, last_checked_at=now)
        return "engine_error"
    if isinstance(outcome, tracking.Final):
        tracking.finish([outcome])
        return outcome.outcome
    # Unfinished: the progress and the hand-over to the next look, in one UPDATE, one commit.
    tracking.hand_over(scan_id, job_id, tracking.look_again_in(scan, now, deadline), in_flight_only=True,
                       durable=False, **outcome.changes())
    return "unfinished"


def forget_investigation(deletion_id: str) -> str:
    """Ask the engine to delete an erased scan's investigation (D25, E7). An engine error raises:
    RQ tries again on ``app.jobs.FORGET_RETRY_SCHEDULE``, then the recovery sweep does."""
    with db.connection_context():
        engine_id = erasure.engine_id_to_forget(deletion_id)
        if engine_id is None:
            return "done"  # a duplicate job: another one got the engine's answer
        outcome = engine.delete(engine_id)
        erasure.engine_answered(deletion_id, outcome)
        return outcome
