"""Erasing a scan's personal data (D20): on the customer's request and when retention ends.

Erasing a final scan removes its target, result and failure message, the bodies of its
webhook deliveries and their attempts' response excerpts, and from its stored events all but
their thin bodies; a delivery still pending is
cancelled (its jobs find it so and stop). What billing and the customer's records need stays:
the scan's id, kind, status, times, batch, purpose, case reference and mode, and every charge
and ledger row. A scan in flight has nothing final to erase yet (``ScanInFlight``, 409).

One operation serves both callers: ``DELETE /api/v1/scan/{id}`` and ``/scan/bulk/{id}``
(``erase_scan``, ``erase_batch``), and the periodic retention job (``erase_past_retention``),
which erases every final scan that ended more than its customer's ``result_retention_days``
ago, in batches of one transaction each so that a long backlog shows progress and holds no
lock for long.

Erasure leaves no handle that leads back to the person (D25): the scan's engine id goes with its
target and result, into an ``EngineDeletion`` row written in the same transaction. When it
commits (``app.plumbing.jobs`` enqueues wait for the commit) a job asks the engine to delete the
investigation (E7), retried until the engine answers 2xx or 404
(``app.plumbing.jobs.enqueue_engine_deletions``); the customer's answer
never waits for it, and the recovery sweep enqueues again a deletion whose job Redis lost
(``recover_engine_deletions``).
Test scans ran in the service's sandbox: nothing to delete anywhere.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from app.billing.statements import idempotency as idempotency_store
from app.events import feed
from app.plumbing import engine, jobs, metrics, runtime
from app.plumbing.db import transaction
from app.plumbing.errors import NotFound, ScanInFlight
from app.plumbing.models import iso, utcnow
from app.privacy.statements import engine_deletions as deletion_store
from app.scans import statements as scan_store
from app.scans.models import FINAL, BulkBatch, Scan
from app.scans.reads import owned
from app.webhooks.models import CANCELLED, PENDING
from app.webhooks.statements import deliveries as delivery_store

# Scans erased per transaction by the retention job.
RETENTION_BATCH = 500
# Engine deletions the recovery sweep looks at in one pass.
RECOVERY_BATCH = 1000

log = logging.getLogger(__name__)


def _erase(scan_ids: Sequence[str], now: datetime, *, reason: str, owner: tuple[str, bool] | None = None) -> list[str]:
    """Erase those of ``scan_ids`` that are final and not yet erased, with their deliveries'
    bodies, in one transaction; the ids erased now. ``reason``: request or retention (metrics).
    ``owner`` (customer id, mode), for an erasure on request: the stored answers its
    Idempotency-Keys replay lose the erased targets too (retention comes long after those
    answers expired: a day after the creation, D9)."""
    with transaction():
        rows = scan_store.erase(scan_ids, final=FINAL, now=now)
        erased = [scan_id for scan_id, _, _ in rows]
        # Live scans' investigations only: a test scan's id is the sandbox's, no engine has it.
        deletions = deletion_store.add([engine_id for _, engine_id, live in rows if live and engine_id], now)
        if deletions:  # Redis down: the sweep enqueues them
            jobs.enqueue_engine_deletions(deletions)  # once this transaction commits
        if erased:
            delivery_store.erase_for_scans(erased, pending=PENDING, cancelled=CANCELLED, now=now)
            feed.erase_for_scans(erased)  # their stored events keep thin bodies (D27)
            scan_store.erase_feedback(erased)  # notes on findings are about the person too (D23)
            if owner is not None:
                _forget_replayed_targets(*owner, set(erased))
    metrics.count_erased(reason, len(erased))
    return erased


def _forget_replayed_targets(customer_id: str, livemode: bool, erased: set[str]) -> None:
    """A creation's stored answer (a bulk call's lists each scan's target) without the targets
    of ``erased`` scans, as their reads are."""
    for record_id, body in idempotency_store.answers_naming(customer_id, livemode, sorted(erased)):
        answer = json.loads(body)
        for entry in answer.get("scans") or []:
            if entry.get("scan_id") in erased:
                entry.pop("target", None)
        idempotency_store.replace_answer(record_id, json.dumps(answer, separators=(",", ":")))


def erase_scan(*, customer_id: str, scan_id: str, livemode: bool) -> dict:
    """Erase one final scan of the customer (of the calling key's mode) at once:
    ``{ok, scan_id, erased_at}``; erasing it again answers the first erasure's time."""
    scan = owned(Scan, scan_id, customer_id, "scan", livemode)
    if scan.erased_at is None:
        if scan.status not in FINAL:
            raise ScanInFlight("this scan is still in flight: erase it once it is completed or failed")
        now = utcnow()
        if _erase([scan.id], now, reason="request", owner=(customer_id, livemode)):
            return {"ok": True, "scan_id": scan.id, "erased_at": iso(now)}
        scan = owned(Scan, scan_id, customer_id, "scan", livemode)  # erased meanwhile by another call
    return {"ok": True, "scan_id": scan.id, "erased_at": iso(scan.erased_at)}


def erase_batch(*, customer_id: str, bulk_id: str, livemode: bool) -> dict:
    """Erase every final scan of the customer's batch: ``{ok, bulk_id, erased, in_flight}``,
    ``erased`` counting the batch's scans erased now or before, ``in_flight`` those not final yet."""
    batch = owned(BulkBatch, bulk_id, customer_id, "bulk batch", livemode)
    states = scan_store.batch_states(batch.id)
    to_erase = [scan_id for scan_id, status, erased_at in states if status in FINAL and erased_at is None]
    if to_erase:
        _erase(to_erase, utcnow(), reason="request", owner=(customer_id, livemode))
    states = scan_store.batch_states(batch.id)  # a scan may have become final meanwhile: count what is
    return {"ok": True, "bulk_id": batch.id,
            "erased": sum(1 for _, _, erased_at in states if erased_at is not None),
            "in_flight": sum(1 for _, status, _ in states if status not in FINAL)}


def erase_for_subject(scan_ids: Sequence[str], now: datetime, *, owner: tuple[str, bool]) -> list[str]:
    """A data subject's erasure (``app.privacy.subjects``): the customer's final ``scan_ids``
    erased as its own request would erase them; the ids erased now."""
    return _erase(scan_ids, now, reason="request", owner=owner)


def due_for_retention(now: datetime | None = None) -> int:
    """How many final scans are past their customer's retention now (what the job would erase)."""
    return scan_store.count_past_retention(final=FINAL, now=now or utcnow())


def erase_any_scan(scan_id: str) -> dict:
    """The operator's erasure of any customer's final scan (a data subject's request that
    reached us), as its customer's own erasure would do it."""
    scan = scan_store.scan_by_id(scan_id)
    if scan is None:
        raise NotFound("no scan with this id")
    return erase_scan(customer_id=scan.customer_id, scan_id=scan.id, livemode=scan.livemode)


def erase_past_retention(now: datetime | None = None, *, batch: int = RETENTION_BATCH,
                         progress: Callable[[int], None] | None = None) -> int:
    """The retention job: erase every final scan past its customer's retention, ``batch``
    scans per transaction, until none is left; how many were erased. ``progress`` is told
    each batch's count (the operator's command shows a bar)."""
    now = now or utcnow()
    total = 0
    while True:
        due = scan_store.past_retention(final=FINAL, now=now, limit=batch)
        if not due:
            return total
        erased = len(_erase(due, now, reason="retention"))
        total += erased
        if progress is not None:
            progress(erased)



# --- the engine's copy (D25, E7) -------------------------------------------------------------

def engine_id_to_forget(deletion_id: str) -> str | None:
    """The engine id a deletion job is to delete at the engine; None once that is done."""
    return deletion_store.engine_id_of(deletion_id)


def engine_answered(deletion_id: str, outcome: str) -> None:
    """The engine's answer to a deletion (``engine.DELETED``, ``UNKNOWN`` or ``UNSUPPORTED``):
    nothing more to ask it either way, the row goes. An engine without deletion keeps the
    investigation: said once per erased scan, without its id."""
    if outcome == engine.UNSUPPORTED:
        log.warning("the engine does not offer deletion (HTTP 405): an erased scan's investigation stays there")
    deletion_store.remove(deletion_id)


def recover_engine_deletions(now: datetime, *, at_once: bool = False) -> int:
    """Enqueue again the engine deletions whose job Redis no longer holds (never enqueued, lost,
    or past its retries), those older than ``RECOVERY_STALE_SECONDS`` (every one ``at_once``);
    how many were enqueued. A duplicate job is harmless: the second asks, gets 404, and stops."""
    stale_before = None if at_once else now - timedelta(seconds=runtime.config["RECOVERY_STALE_SECONDS"])
    waiting = deletion_store.pending(stale_before, RECOVERY_BATCH)
    alive = jobs.live_job_ids([jobs.forget_job_id(deletion_id) for deletion_id in waiting])
    lost = [deletion_id for deletion_id in waiting if jobs.forget_job_id(deletion_id) not in alive]
    if lost and not jobs.enqueue_engine_deletions(lost):
        return 0
    return len(lost)
