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

from app import runtime
from app.extensions import db
from app.logging_setup import log_context
from app.models import utcnow
from app.models.scans import FINAL
from app.services import engine, reads, scans, tracking
from app.services.results import InvalidResult, normalize_result

log = logging.getLogger(__name__)


def _poll_seconds() -> float:
    return float(runtime.config["ENGINE_POLL_SECONDS"])


MIN_DELAY = tracking.MIN_DELAY


def next_interval(scan, now) -> float:
    """Until the engine's eta (half a second before it, then at it), at most ENGINE_POLL_SECONDS."""
    return tracking.look_delay(scan.eta_at, now, _poll_seconds())


def backoff(errors: int) -> float:
    """Engine errors back off exponentially from 1 s, up to three poll intervals."""
    return max(1.0, min(_poll_seconds() * 3, 2.0 ** (errors - 1)))


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
        tracking.hand_over(scan_id, job_id, _poll_seconds())
        return "waiting"
    # Amended D13: the timeout is a verdict on what the engine says, never on age alone.
    # A scan the engine finished while Redis or the workers were down completes however
    # late this look comes; one it cannot tell about (unreachable, nonsense) stays in
    # flight and is looked at again.
    try:
        state = scans.engine_for(scan.livemode).status(scan.engine_id)
        outcome = _apply(scan, state, past_deadline=now >= deadline)
        if isinstance(outcome, dict):  # unfinished: the progress to record
            progress, outcome = outcome, "unfinished"
    except engine.EngineError as exc:
        errors = scan.check_errors + 1
        log.warning("scan %s: engine error %d (%s), retrying", scan_id, errors, exc)
        tracking.hand_over(scan_id, job_id, _until_deadline(backoff(errors), deadline, now), check_errors=errors,
                           last_checked_at=now)
        return "engine_error"
    if outcome == "unfinished":
        # The progress and the hand-over to the next look: one UPDATE, one commit.
        tracking.hand_over(scan_id, job_id, _until_deadline(next_interval(scan, now), deadline, now),
                           in_flight_only=True, durable=False, **progress)
    return outcome


def _until_deadline(delay: float, deadline, now) -> float:
    """``delay``, but no later than the deadline while it is ahead (the look that may time the scan out)."""
    remaining = (deadline - now).total_seconds()
    return max(MIN_DELAY, min(delay, remaining)) if remaining > 0 else max(MIN_DELAY, delay)


def _apply(scan, state: dict, *, past_deadline: bool = False) -> str | dict:
    """Act on the engine's answer: the outcome, or for an unfinished scan the progress to record
    (past the deadline, an unfinished scan fails with ``engine_timeout``)."""
    status = state.get("status")
    if status == "done":
        try:
            result = normalize_result(state.get("result"), scan.kind, scan_id=scan.id)
        except InvalidResult as exc:
            log.warning("scan %s: invalid engine result: %s", scan.id, exc)
            tracking.fail(scan.id, "engine_failed", "the engine returned a result that is not valid")
            return "failed"
        tracking.complete(scan.id, result)
        return "completed"
    if status == "error":
        error = state.get("error") if isinstance(state.get("error"), dict) else {}
        message = error.get("message") if isinstance(error.get("message"), str) else ""
        tracking.fail(scan.id, "engine_failed", message or "the engine could not complete the investigation")
        return "failed"
    if status in ("pending", "running"):
        if past_deadline:
            tracking.fail(scan.id, "engine_timeout", "the engine did not finish the scan in time")
            return "timeout"
        total, done = state.get("recipes_total"), state.get("recipes_done")
        return tracking.progress_changes(
            running=status == "running",
            recipes_total=total if isinstance(total, int) and total >= 0 else None,
            recipes_done=done if isinstance(done, int) and done >= 0 else None)
    raise engine.EngineError(f"unknown engine status {status!r}")
