"""The recovery sweep (D13): nothing is lost when Redis, a worker or a
dispatch fails.

It finds
- in-flight scans not looked at for ``RECOVERY_STALE_SECONDS`` whose tracking job is
  gone from Redis (flushed, never enqueued, or abandoned by a killed worker), and
  starts a new chain for each (the old token is replaced, so a late old job stops);
- scans reserved but never recorded as submitted (the API process died during its
  engine call): the client never got a 202, so they are reversed like a 502;
- pending webhook deliveries whose job is gone (see ``app.services.deliveries``);
- erased scans' engine deletions whose job is gone (see ``app.services.erasure``);
- scheduled jobs overdue by more than ``RECOVERY_STALE_SECONDS``: RQ's scheduler is
  not running (after a worker group is killed its lock lingers for about a minute), so
  the sweep moves them to their queue as the scheduler would. A job that both move
  runs twice, which changes nothing: every job is fenced by its row.

Run by every worker every ``RECOVERY_INTERVAL_SECONDS`` (one at a time, under a Redis
lock) and on demand by ``flask --app wsgi scans recover``. The operator's command
(``at_once``) takes every scan and delivery in flight whose job is not alive, however
recently it was looked at: run right after Redis came back, it re-dispatches them all
now. A duplicate of a chain that was in fact alive (a job running at that moment) is
harmless: the fencing token makes one of the two stop. The periodic sweep keeps its
grace period, which spares the chains between two looks that cost.

The sweep never fails a scan: a re-dispatched scan gets a look at the engine, which
completes it however late, or fails it if the engine still has it unfinished past the
timeout (amended D13).
"""
from __future__ import annotations

import logging
from datetime import UTC, timedelta

from app import metrics, runtime
from app.db import connection_context
from app.jobs import QUEUES, live_job_ids, promote_due, queue
from app.models import utcnow
from app.models.scans import IN_FLIGHT, QUEUED
from app.services import deliveries, erasure, idempotency, looks, quotas, tracking
from app.services.scans import reverse_reservation
from app.store import scan_states

log = logging.getLogger(__name__)

def recover_scans(now, *, at_once: bool = False) -> int:
    """Track again each submitted scan in flight whose tracking job is gone: only those not
    looked at for RECOVERY_STALE_SECONDS, or every one ``at_once``. With batch looks on (D24)
    it is handed to them, due now; otherwise a new chain starts for it, and so does one for
    each scan the batch looks tracked before they were switched off."""
    stale_before = now - timedelta(seconds=runtime.config["RECOVERY_STALE_SECONDS"])
    batch = looks.enabled()
    candidates = scan_states.submitted_unwatched(statuses=IN_FLIGHT, stale_before=None if at_once else stale_before,
                                                 chained_only=batch)
    alive = live_job_ids([job_id for _, job_id in candidates if job_id])
    redispatched = 0
    for scan_id, job_id in candidates:
        if job_id in alive:
            continue
        if batch:
            moved = scan_states.adopt(scan_id, current_job_id=job_id, statuses=IN_FLIGHT, due=now)
        else:
            moved = tracking.hand_over(scan_id, job_id, 0, last_checked_at=now)
        if moved:
            redispatched += 1
            log.info("scan %s: tracking job %s was lost, re-dispatched", scan_id, job_id)
    return redispatched


def reverse_unsubmitted(now) -> int:
    stale_before = now - timedelta(seconds=runtime.config["RECOVERY_STALE_SECONDS"])
    orphans = scan_states.unsubmitted(status=QUEUED, created_before=stale_before)
    for scan in orphans:
        reverse_reservation(scan)
    return len(orphans)


def promote_overdue(now) -> int:
    """Enqueue scheduled jobs that RQ's scheduler should have enqueued long ago."""
    overdue = now - timedelta(seconds=runtime.config["RECOVERY_STALE_SECONDS"])
    overdue_before = overdue.replace(tzinfo=UTC).timestamp()  # ``now`` is naive UTC
    moved = sum(promote_due(queue(name), int(overdue_before)) for name in QUEUES)
    if moved:
        log.warning("moved %d overdue scheduled job(s) to their queues: is RQ's scheduler running?", moved)
    return moved


def sweep(at_once: bool = False) -> dict:
    """One recovery pass; ``at_once`` is the operator's (see the module's docstring). A
    reservation is reversed only after RECOVERY_STALE_SECONDS either way: until then its
    creator may still be in its engine call."""
    now = utcnow()
    with connection_context():
        report = {"scheduled_jobs_promoted": promote_overdue(now),
                  "scans_redispatched": recover_scans(now, at_once=at_once),
                  "reservations_reversed": reverse_unsubmitted(now)}
        report.update(deliveries.recover_deliveries(now, at_once=at_once))
        report["engine_deletions_redispatched"] = erasure.recover_engine_deletions(now, at_once=at_once)
        report["idempotency_purged"] = idempotency.purge_expired()
        report["quota_minutes_pruned"] = quotas.prune_minutes(now)
    metrics.count_sweep(report)
    return report
