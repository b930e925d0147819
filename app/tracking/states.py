"""Scan state transitions (D5) and the rules of a look, used by the batch looks
(``app.tracking.looks``, D24).

A final state is set by compare-and-set: ``UPDATE ... WHERE status IN ('queued',
'running')``. Only the first writer sees one row changed, so a duplicate or replayed
job finishes a scan once, takes it out of the customer's in-flight count once and
records its webhook event once, in the same transaction.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from app.billing import quotas, refunds
from app.events import feed
from app.events import kinds as events
from app.plumbing import engine, metrics, runtime
from app.plumbing.db import CONNECTION_ERRORS, transaction
from app.plumbing.models import utcnow
from app.scans import findings, required, results
from app.scans import statements as scan_store
from app.scans.models import COMPLETED, FAILED, IN_FLIGHT, RUNNING
from app.scans.results import InvalidResult, normalize_result
from app.sources import health as source_health
from app.tracking import sandbox_engine
from app.tracking.handed_in import WATCH_SCANS_FINISHED
from app.tracking.statements import scan_states
from app.webhooks import outbox

log = logging.getLogger(__name__)

# The engine's eta is a whole number of seconds (E1), rounded up: a scan ends
# within the second before its eta. A scan is not looked at long before it can be done: the
# first look comes half a second before its eta and the next at it, keeping the pause between
# the engine finishing and the look below half a second for at most one more look per scan
# (due times are kept to the millisecond, see app.plumbing.jobs). Past the eta, the scan is looked at
# every ENGINE_POLL_SECONDS. Every look is bounded by the scan's deadline (the look that may
# time it out).
ETA_SLACK = 0.5
# The shortest pause between two looks at one scan.
MIN_DELAY = 0.25


def _until_eta(remaining: float) -> float:
    return remaining - ETA_SLACK if remaining > ETA_SLACK else remaining


def first_look_delay(eta_seconds: float, poll: float, *, callbacks: bool = False) -> float:
    """Seconds from submission (or from a look before the eta) to the next look at a scan the
    engine expects in ``eta_seconds``: just before the eta. With ``callbacks`` (E7: the engine
    calls back at each change, which makes the scan due at once) one poll past the eta: that look
    is the safety net for a callback lost."""
    if callbacks:
        return max(MIN_DELAY, eta_seconds + poll)
    return max(MIN_DELAY, _until_eta(eta_seconds))


def look_delay(eta_at, now, poll: float, *, callbacks: bool = False) -> float:
    """Seconds until the next look at an unfinished scan due at ``eta_at``: before the eta as
    ``first_look_delay`` (half a second before it, then at it); past the eta, ``poll``."""
    remaining = (eta_at - now).total_seconds() if eta_at else 0
    return first_look_delay(remaining, poll, callbacks=callbacks) if remaining > 0 else max(MIN_DELAY, poll)


def poll_seconds() -> float:
    return float(runtime.config["ENGINE_POLL_SECONDS"])


def next_interval(scan, now, *, callbacks: bool = False) -> float:
    """Until the engine's eta (half a second before it, then at it; with ``callbacks`` one poll
    past it), then ENGINE_POLL_SECONDS."""
    return look_delay(scan.eta_at, now, poll_seconds(), callbacks=callbacks)


def backoff(errors: int) -> float:
    """Engine errors back off exponentially from 1 s, up to three poll intervals."""
    return max(1.0, min(poll_seconds() * 3, 2.0 ** (errors - 1)))


def until_deadline(delay: float, deadline, now) -> float:
    """``delay``, but no later than the deadline while it is ahead (the look that may time the scan out)."""
    remaining = (deadline - now).total_seconds()
    return max(MIN_DELAY, min(delay, remaining)) if remaining > 0 else max(MIN_DELAY, delay)


def look_again_in(scan, now, deadline, *, errors: int = 0, callbacks: bool = False) -> float:
    """Seconds from ``now`` until the next look at a scan still in flight: the cadence
    (``next_interval``; ``callbacks``: the engine calls back and a callback makes the scan due,
    so only the batch looks pass it), or after ``errors`` engine errors in a row the back-off,
    never past its ``deadline`` while that is ahead."""
    delay = backoff(errors) if errors else next_interval(scan, now, callbacks=callbacks)
    return until_deadline(delay, deadline, now)


def first_look_in(eta_seconds: float, deadline, now, *, callbacks: bool = False) -> float:
    """Seconds from a scan's submission ``now`` to its first look (``first_look_delay``), never
    past its ``deadline``."""
    return until_deadline(first_look_delay(eta_seconds, poll_seconds(), callbacks=callbacks), deadline, now)


def deadline(scan):
    """When an unfinished scan fails with ``engine_timeout`` (D5): ``SCAN_TIMEOUT_SECONDS`` after
    its creation, or for a test scan the sandbox's timeout for its target (D15)."""
    return deadline_of(scan.created_at, livemode=scan.livemode, kind=scan.kind, target=scan.target)


def deadline_of(created_at, *, livemode: bool, kind: str, target: str):
    """``deadline`` of a scan not loaded as a row (a submission's)."""
    seconds = runtime.config["SCAN_TIMEOUT_SECONDS"] if livemode else sandbox_engine.timeout_seconds(kind, target)
    return created_at + timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a look at an unfinished scan saw: whether the engine runs it, and its recipes (None
    where the engine said nothing usable). Plain values: a batch look writes them with
    ``record_looks``."""
    running: bool
    recipes_total: int | None
    recipes_done: int | None


def running_events(scans: list, endpoints_of: dict | None = None) -> list:
    """The ``scan.running`` events of scans that have just moved to ``running`` (in the caller's
    transaction): their deliveries, whose jobs go once it has committed. ``endpoints_of``: the
    keys' endpoints when the caller read them already (``outbox.keys_endpoints``)."""
    return outbox.record_events(scans, events.SCAN_RUNNING, endpoints_of=endpoints_of)


@dataclass(frozen=True)
class Final:
    """A final state a look decided for a scan, written by ``finish``."""
    scan_id: str
    status: str  # COMPLETED or FAILED
    result_json: str | None = None
    code: str | None = None
    message: str = ""
    # The dict ``result_json`` was dumped from, for the writes after it to read (``results.parsed_result``).
    result: dict | None = field(default=None, compare=False, repr=False)

    @property
    def outcome(self) -> str:
        """``completed``, ``timeout`` or ``failed``: what a look reports."""
        if self.status == COMPLETED:
            return "completed"
        return "timeout" if self.code == "engine_timeout" else "failed"


def completed(scan_id: str, result: dict) -> Final:
    return Final(scan_id, COMPLETED, result_json=json.dumps(result, separators=(",", ":")), result=result)


def just_written(finals: Iterable[Final]) -> results.JustWritten:
    """The completed finals' results by scan id, as their text and the dict it was dumped from."""
    return {f.scan_id: (f.result_json, f.result) for f in finals if f.result is not None and f.result_json}


def failed(scan_id: str, code: str, message: str) -> Final:
    return Final(scan_id, FAILED, code=code, message=message[:500])


def finish(finals: list[Final]) -> int:
    """Write each final state once (compare-and-set: a scan already final is left alone), take
    the scans out of flight and record their events, all in one durable transaction; then
    announce them (``announce``). Returns how many took."""
    with transaction():
        scans = record_finals(finals)
    announce(scans, finals)
    return len(scans)


def record_finals(finals: list[Final]) -> list:
    """``finish``'s writes, in the caller's transaction (a batch look's finals share its
    commit): the scans that took; their deliveries' jobs go once it has committed.

    Scans, then customers, are written in id order, so two lookers whose batches share one never
    wait on each other in a circle. The customers' rows (the in-flight counts) and their events
    come last, in that order (``feed.stored_last``): their locks are held to the commit, and a
    customer's finals wait on each other only for those two statements and the commit, not for
    the rest. A completed scan's findings show the feedback given on them in earlier scans of
    the target (D26); a scan no look saw running has its ``scan.running`` recorded before its
    final event, so an endpoint that lists it always hears of it first."""
    now = utcnow()
    with feed.stored_last():
        scans = scan_states.finish([(f.scan_id, f.status, f.result_json or "{}", f.code or "engine_failed", f.message)
                                    for f in finals], statuses=IN_FLIGHT, completed=COMPLETED, now=now)
        findings.carry_feedback([s for s in scans if s.status == COMPLETED], just_written(finals))
        missed = required.settle(scans)  # D29: before their events, whose bodies read the result
        never_running = [s for s in scans if s.started_at is None]
        # The keys' endpoints read once for both events (two statements, and a model per row, each time).
        endpoints = outbox.keys_endpoints({s.api_key_id for s in scans})
        running_events([_as_running(s, now) for s in never_running], endpoints)
        outbox.record_events(scans, endpoints_of=endpoints)
        WATCH_SCANS_FINISHED()([s for s in scans if s.status == COMPLETED and s.watch_id])  # D28, after its final
        # Out of flight in the same transaction as the states (quotas: Customer.in_flight, or test_in_flight).
        # One statement locks every customer's row in id order; the refunds then write rows it holds.
        out_of_flight = Counter((s.customer_id, s.livemode) for s in scans)
        quotas.move_in_flight_many({owner: -n for owner, n in out_of_flight.items()})
        for customer_id, livemode in sorted({(s.customer_id, s.livemode) for s in missed}):
            refunds.refund_unmatched([s for s in missed if s.customer_id == customer_id and s.livemode == livemode])
    return scans


def _as_running(scan, now):
    """The scan as it stood while running (a copy: the ``scan.running`` body of a scan that ended
    before a look saw it running; the row itself is left as it is)."""
    return type(scan)(**{**scan.__data__, "status": RUNNING, "started_at": now, "completed_at": None,
                         "failed_at": None})


def announce(scans: list, finals: Iterable[Final] = ()) -> None:
    """After the commit of ``record_finals``: the metrics and log lines of the scans that ended,
    and their sources' answers counted for source health (D30) in a short transaction of their
    own, so that lookers finishing scans side by side never queue on a source's counts; a count
    lost to a failure here only thins one minute of a statistic. ``finals``: those written, whose
    results need no parsing again."""
    completed_scans = [s for s in scans if s.status == COMPLETED]
    if completed_scans:
        try:
            with transaction():
                source_health.record_scans(completed_scans, just_written(finals))
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:
            log.warning("source answers of %d scans not counted: %s", len(completed_scans), exc.__class__.__name__)
    for scan in scans:
        metrics.count_scan_finished(scan.kind, scan.status, scan.failure_code)
        if scan.status == COMPLETED:
            log.info("scan %s completed", scan.id, extra={"scan_id": scan.id})
        else:
            log.info("scan %s failed: %s", scan.id, scan.failure_code, extra={"scan_id": scan.id})


def complete(scan_id: str, result: dict) -> bool:
    """Mark completed with ``result``; False when the scan was already final."""
    return finish([completed(scan_id, result)]) == 1


def fail(scan_id: str, code: str, message: str) -> bool:
    return finish([failed(scan_id, code, message)]) == 1


def apply_look(scan, state: dict, *, past_deadline: bool = False) -> Final | Progress:
    """What the engine said of ``scan``: its final state, for the caller to ``finish``, or for an
    unfinished scan the progress to record (``Progress``); past the deadline, an
    unfinished scan fails with ``engine_timeout``. An answer that says nothing usable is an
    ``EngineError`` (the caller backs off and looks again)."""
    status = state.get("status")
    if status == "done":
        owner = results.Owner(scan.customer_id, scan.kind, scan.target) if scan.target is not None else None
        try:
            result = normalize_result(state.get("result"), scan.kind, scan_id=scan.id, owner=owner)
        except InvalidResult as exc:
            log.warning("scan %s: invalid engine result: %s", scan.id, exc)
            return failed(scan.id, "engine_failed", "the engine returned a result that is not valid")
        # The quarantined sources its submission left out (D30); a re-run asked named sources
        # only, and its merge keeps the original's other answers.
        if scan.livemode and not scan.rerun_of:
            result = source_health.mark_left_out(result, scan.kind)
        return completed(scan.id, _whole_picture(scan, result))
    if status == "error":
        error: dict = state["error"] if isinstance(state.get("error"), dict) else {}
        if error.get("code") == "not_found":  # the batch look's unknown id: a single look's 404
            raise engine.EngineError("the engine does not know this investigation")
        message = error.get("message") if isinstance(error.get("message"), str) else ""
        return failed(scan.id, "engine_failed", message or "the engine could not complete the investigation")
    if status in ("pending", "running"):
        if past_deadline:
            return failed(scan.id, "engine_timeout", "the engine did not finish the scan in time")
        total, done = state.get("recipes_total"), state.get("recipes_done")
        return Progress(running=status == "running",
                        recipes_total=total if isinstance(total, int) and total >= 0 else None,
                        recipes_done=done if isinstance(done, int) and done >= 0 else None)
    raise engine.EngineError(f"unknown engine status {status!r}")


def _whole_picture(scan, result: dict) -> dict:
    """A re-run's result merged into its original's (D26); any other scan's as it is. An original
    erased since (or of another owner) leaves the re-run's own result."""
    if not scan.rerun_of:
        return result
    original = scan_store.scan_by_id(scan.rerun_of)
    if (original is None or original.customer_id != scan.customer_id or original.status != COMPLETED
            or not original.result_json):
        return result
    return results.merge_rerun(json.loads(original.result_json), result, original.id)
