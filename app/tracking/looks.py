"""Batch looks (D24): scans in flight tracked by due times in the database, not by a job each.

The one way a scan in flight is tracked: a submitted scan gets ``next_look_at``, the time of
its first look, in the UPDATE that records its engine id, and no RQ job. Lookers
(threads of the worker processes, ``workers.looker``; any number, on any number of hosts)
each run ``look_due`` in a loop:

1. claim: one statement locks up to ``ENGINE_BATCH_SIZE`` due scans, earliest first, with
   ``FOR UPDATE SKIP LOCKED`` (two lookers never take the same scan), in a transaction that
   lasts until the look is recorded. The claim writes nothing: its row locks are the claim. A
   looker that dies after its claim loses nothing: its connection ends, so does its
   transaction, and the scans are due again at once, whoever looks then; PostgreSQL ends the
   session of a looker that hangs (``idle_in_transaction_session_timeout``, the engine's
   status timeout per request plus a margin).
2. look: one engine request for the whole claim (E6's batch look); an engine that answers it
   with 404 or 405 does not offer it, and is asked scan by scan (single looks) for
   ``UNSUPPORTED_RECHECK_SECONDS`` before the batch look is tried again. A test-mode scan's
   look is the sandbox's, in process.
3. apply, with the rules of ``app.tracking.states``: final answers
   complete or fail their scans (compare-and-set on each status, the moves out of flight and the
   webhook events); scans the engine started become ``running`` once, with their
   ``scan.running`` events; past its deadline an unfinished scan fails with ``engine_timeout``
   (only after a look: amended D13). Every unfinished scan's progress, next due time and
   ``look_generation`` (the looks recorded) go in one UPDATE for the whole claim. All of it
   commits with the claim, in one transaction: durable when a scan moved to ``running`` or
   ended, else without waiting for the disk flush (a crash loses at most a progress and a due
   time: the row keeps its earlier due time, past by then, so the scan is looked at again at
   once). The deliveries' jobs go when it commits.

Nothing lives in Redis: emptying it loses no look. A scan in flight without a due time (tracked
by an RQ job chain before the upgrade that retired them) is given one by migration 22, by the
recovery sweep (``app.recovery``) and by any tracking job of before still in Redis
(``workers.engine_jobs.track_scan``).
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from app.events import feed
from app.plumbing import engine, metrics, runtime
from app.plumbing.db import transaction
from app.plumbing.models import utcnow
from app.scans.models import COMPLETED, IN_FLIGHT, QUEUED, RUNNING, Scan
from app.tracking import sandbox_engine
from app.tracking import states as tracking
from app.tracking.statements import scan_states

log = logging.getLogger(__name__)

# How long a claim may sit idle in its transaction beyond the engine's status timeout before
# PostgreSQL ends the session (a looker that hangs); its scans are then due again at once.
HOLD_MARGIN_SECONDS = 5.0
# After an engine answered the batch look with 404/405, how long to use single looks before
# asking it again (an engine upgraded to offer it is noticed within this).
UNSUPPORTED_RECHECK_SECONDS = 300.0

_unsupported_until = 0.0  # time.monotonic() until which the engine is asked scan by scan
_unsupported_lock = threading.Lock()


def first_look_at(now: datetime, eta_seconds: float, deadline: datetime, *, callbacks: bool = False) -> datetime:
    """The ``next_look_at`` of a scan just submitted: half a second before its eta, or with
    ``callbacks`` (E7) one poll past it, never past its ``deadline``."""
    return now + timedelta(seconds=tracking.first_look_in(eta_seconds, deadline, now, callbacks=callbacks))


def hold_seconds(*, requests: int = 1) -> float:
    """How long a claim may wait on ``requests`` engine requests, each up to the status timeout."""
    return float(runtime.config["ENGINE_STATUS_TIMEOUT_SECONDS"]) * requests + HOLD_MARGIN_SECONDS


def next_due() -> datetime | None:
    """The earliest due look (naive UTC), or None when no scan is tracked by looks."""
    return scan_states.next_due(statuses=IN_FLIGHT)


def look_due(*, limit: int | None = None) -> dict:
    """Claim the due scans (up to ``limit``, default ENGINE_BATCH_SIZE), look at them and record
    what the engine said. Returns what it did: ``claimed``, ``lags`` (seconds each claimed scan
    was past its due time), ``engine_requests``, and per outcome ``completed``, ``failed``
    (timeouts included), ``unfinished`` and ``engine_errors``."""
    now = utcnow()
    limit = limit or runtime.config["ENGINE_BATCH_SIZE"]
    report: dict = {"claimed": 0, "lags": [], "engine_requests": 0, "completed": 0, "failed": 0,
                    "unfinished": 0, "engine_errors": 0}
    finished: list = []
    # One transaction from the claim to the record: its row locks are the claim (a looker that
    # dies releases them with its connection: the scans are due again at once, nothing lost).
    with transaction():
        # One request for the claim, or one per scan from an engine without the batch look. (An
        # engine found without it during this look may outlast the hold: the session ends, the
        # look is lost, the scans are due again at once and claimed for single looks.)
        requests = 1 if time.monotonic() >= _unsupported_until else limit
        claimed = scan_states.claim_due(statuses=IN_FLIGHT, now=now, limit=limit,
                                        hold_seconds=hold_seconds(requests=requests))
        if not claimed:
            return report
        report["claimed"] = len(claimed)
        report["lags"] = [max(0.0, (now - due).total_seconds()) for due, _ in claimed]
        for lag in report["lags"]:
            metrics.observe_look_lag(lag)
        scans = [scan for _, scan in claimed]
        states, report["engine_requests"] = _look(scans)
        looked = utcnow()  # what the engine said is as of now: the deadline and the next look count from it
        records, errors, finals = [], [], []
        for scan in scans:
            outcome = _apply(scan, states.get(scan.id), looked)
            if isinstance(outcome, tracking.Final):
                finals.append(outcome)
                report["completed" if outcome.status == COMPLETED else "failed"] += 1
                continue
            kind, record = outcome
            report[kind] += 1
            records.append(record)
            if kind == "engine_errors":
                errors.append(scan.id)
        written = scan_states.record_looks(records, statuses=IN_FLIGHT, queued=QUEUED, running=RUNNING, now=looked)
        moved_ids = {scan_id for scan_id, moved_now in written if moved_now}
        moved = [scan for scan in scans if scan.id in moved_ids]
        # The finals and the running events at the end, their events stored last of all: the
        # finals lock their customers' rows (the in-flight counts) and stored events take their
        # customers' event lock, after every row lock (``app.events.statements.stored``); both are held to
        # the commit, which every other look ending a scan of theirs waits for.
        with feed.stored_last():
            if finals:
                finished = tracking.record_finals(finals)
            for scan in moved:  # as written: the events are of the scan now running
                scan.status, scan.started_at = RUNNING, looked
            if moved:
                tracking.running_events(moved)
        if not moved and not finals:
            # Progress and due times only: a crash may lose them, and the scans are looked at
            # again (as a chain's hand-over). Moves to ``running`` and final states are durable.
            scan_states.commit_without_flush()
    if errors:  # one line per batch, not a line per scan: an engine outage is one line per try
        first = states.get(errors[0])
        log.warning("engine error for %d of %d scans looked at (%s), e.g. scan %s; looking again with back-off",
                    len(errors), len(scans), first if isinstance(first, Exception) else "unusable answer", errors[0])
    tracking.announce(finished, finals)
    return report


def move_reported_starts(*, limit: int | None = None) -> int:
    """Move the queued scans that a callback said the engine runs (E7) to ``running``, up to
    ``limit`` (default ENGINE_BATCH_SIZE), with their ``scan.running`` events, in one durable
    transaction (the events are to be delivered); the deliveries' jobs go when it commits.
    Returns how many moved. A callback only records the report: a move each, with its event, in
    the API cost half of its CPU for callbacks, where a looker's turn moves them together."""
    with transaction():
        moved = scan_states.move_reported_starts(queued=QUEUED, running=RUNNING,
                                                 limit=limit or runtime.config["ENGINE_BATCH_SIZE"])
        if moved:
            tracking.running_events(moved)
    return len(moved)


def _apply(scan: Scan, state: dict | Exception | None, now: datetime) -> tracking.Final | tuple[str, tuple]:
    """One scan's final state, or when it stays in flight ``(unfinished or engine_errors, its row
    for record_looks)``."""
    deadline = tracking.deadline(scan)
    try:
        if isinstance(state, Exception) or state is None:
            raise state or engine.EngineError("no answer")
        outcome = tracking.apply_look(scan, state, past_deadline=now >= deadline)
    except engine.EngineError:
        errors = scan.check_errors + 1
        due = now + timedelta(seconds=tracking.look_again_in(scan, now, deadline, errors=errors,
                                                             callbacks=scan.callbacks))
        return "engine_errors", (scan.id, scan.look_generation, due, errors, None, None, False)
    if isinstance(outcome, tracking.Final):
        return outcome
    # With callbacks (E7) no look before the eta: a callback makes the scan due when it changes.
    due = now + timedelta(seconds=tracking.look_again_in(scan, now, deadline, callbacks=scan.callbacks))
    # ``running``: a queued scan moves to ``running`` (once, with its event).
    return "unfinished", (scan.id, scan.look_generation, due, 0, outcome.recipes_total, outcome.recipes_done,
                          outcome.running)


def _look(scans: list[Scan]) -> tuple[dict[str, dict | Exception], int]:
    """What the engine says of each scan (an ``EngineError`` for one it could not tell about),
    by scan id, and the number of requests made to ENGINE_URL."""
    states: dict[str, dict | Exception] = {}
    live = [s for s in scans if s.livemode]  # every claimed scan was submitted: its engine_id is set
    sandbox = [s for s in scans if not s.livemode]
    if sandbox:  # the sandbox's (D15), in process
        states.update(zip([s.id for s in sandbox], sandbox_engine.status_batch([str(s.engine_id) for s in sandbox])))
    requests = 0
    if live and time.monotonic() >= _unsupported_until:
        requests += 1
        try:
            states.update(zip([s.id for s in live], engine.status_batch([str(s.engine_id) for s in live])))
            return states, requests
        except engine.BatchLookUnsupported:
            _mark_unsupported()
        except engine.EngineError as exc:  # the whole request failed: every scan backs off
            states.update((s.id, exc) for s in live)
            return states, requests
    for scan in live:  # single looks: an engine without the batch look
        requests += 1
        try:
            states[scan.id] = engine.status(str(scan.engine_id))
        except engine.EngineError as exc:
            states[scan.id] = exc
    return states, requests


def _mark_unsupported() -> None:
    global _unsupported_until
    with _unsupported_lock:
        if time.monotonic() >= _unsupported_until:
            log.info("the engine does not offer the batch look (404/405): looking scan by scan for %.0f s",
                     UNSUPPORTED_RECHECK_SECONDS)
        _unsupported_until = time.monotonic() + UNSUPPORTED_RECHECK_SECONDS
