"""The recovery sweep (D13): nothing is lost when Redis, a worker or a
dispatch fails.

It finds
- submitted scans in flight without a due look (``next_look_at``): tracked by an RQ job chain
  before the upgrade that retired them (D24), or written since by a process of before it. Each
  is made due now (the batch looks take it; its old chain's token is cleared, so a late job of
  that chain, still running the code of before, stops). A scan with a due look needs nothing:
  its tracking lives in the database, so neither Redis nor a worker can lose it;
- scans reserved but never recorded as submitted (the API process died during its
  engine call): the client never got a 202, so they are reversed like a 502;
- pending webhook deliveries whose job is gone (see ``app.webhooks.deliveries``);
- erased scans' engine deletions whose job is gone (see ``app.privacy.erasure``);
- scheduled jobs overdue by more than ``RECOVERY_STALE_SECONDS``: RQ's scheduler is
  not running (after a worker group is killed its lock lingers for about a minute), so
  the sweep moves them to their queue as the scheduler would. A job that both move
  runs twice, which changes nothing: every job is fenced by its row.

Run by every worker every ``RECOVERY_INTERVAL_SECONDS`` (one at a time, under a Redis
lock) and on demand by ``flask --app wsgi scans recover``. The operator's command
(``at_once``) takes every delivery and engine deletion whose job is not alive, however
recent: run right after Redis came back, it re-dispatches them all now. The periodic sweep
keeps its grace period, which spares the jobs between two tries.

The sweep never fails a scan: a scan made due gets a look at the engine, which
completes it however late, or fails it if the engine still has it unfinished past the
timeout (amended D13).
"""
from __future__ import annotations

import logging
from datetime import UTC, timedelta

from app.billing import idempotency, quotas
from app.intake.creation import reverse_reservation
from app.plumbing import metrics, runtime
from app.plumbing.db import connection_context
from app.plumbing.jobs import QUEUES, promote_due, queue
from app.plumbing.models import utcnow
from app.privacy import erasure
from app.scans.models import IN_FLIGHT, QUEUED
from app.tracking.statements import scan_states
from app.webhooks import deliveries

log = logging.getLogger(__name__)

def recover_scans(now) -> int:
    """Make every submitted scan in flight without a due look due now (see the module's
    docstring); how many."""
    handed = scan_states.give_due_times(statuses=IN_FLIGHT, now=now)
    if handed:
        log.info("%d scan(s) in flight had no due look (tracked by a job chain before the upgrade): due now",
                 len(handed))
    return len(handed)


def hand_over(scan_id: str) -> bool:
    """``recover_scans`` for one scan, at once: what a tracking job of before the upgrade does
    when it comes due (``workers.engine_jobs.track_scan``). Whether it was handed over."""
    return bool(scan_states.give_due_times(statuses=IN_FLIGHT, now=utcnow(), scan_id=scan_id))


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
                  "scans_redispatched": recover_scans(now),
                  "reservations_reversed": reverse_unsubmitted(now)}
        report.update(deliveries.recover_deliveries(now, at_once=at_once))
        report["engine_deletions_redispatched"] = erasure.recover_engine_deletions(now, at_once=at_once)
        report["idempotency_purged"] = idempotency.purge_expired()
        report["quota_minutes_pruned"] = quotas.prune_minutes(now)
    metrics.count_sweep(report)
    return report
