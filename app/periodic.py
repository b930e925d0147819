"""The periodic jobs, as data: what runs, how often (a setting), and one place that runs them.

Every worker's maintenance turn (``workers.__main__``, every ``RECOVERY_INTERVAL_SECONDS``) calls
``run_due``; each job runs when its interval has passed since any worker last ran it, one worker at
a time: the first worker to set the job's Redis key (``SET NX`` with the interval as its expiry)
runs it, the others skip it until the key expires. A job that fails is retried at the next turn
after its interval; its work is idempotent (every job is fenced by its rows), so a turn that runs
twice changes nothing.

A new periodic job is one entry in ``SCHEDULE`` (and its interval setting in ``app.plumbing.config``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import app.recovery as recovery
from app.activity import entries
from app.events import feed
from app.plumbing import metrics, runtime
from app.plumbing.db import CONNECTION_ERRORS, connection_context
from app.plumbing.redis_conn import OUTAGE_ERRORS
from app.privacy import erasure
from app.sources import probes
from app.tracking import callbacks
from app.watches import watchlist
from app.webhooks import deliveries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    # The setting that says every how many seconds it runs.
    interval_setting: str
    # What it does, on the connection ``run`` holds for it; returns a report (counts by action)
    # for the log and the metrics.
    run: Callable[[], dict]
    # Seconds in one unit of the setting (60: a setting in minutes).
    unit: int = 1

    @property
    def lock(self) -> str:
        return f"scan-api:periodic:{self.name}"

    def interval(self) -> int:
        return int(runtime.config[self.interval_setting]) * self.unit


SCHEDULE = (
    # Nothing lost when Redis, a worker or a dispatch fails (D13): lost jobs, reservations, deliveries.
    PeriodicJob("recovery", "RECOVERY_INTERVAL_SECONDS", recovery.sweep),
    # Personal data kept no longer than each customer's result_retention_days (D20).
    PeriodicJob("retention", "RETENTION_INTERVAL_SECONDS",
                lambda: {"scans_erased": erasure.erase_past_retention()}),
    # The activity log's day partitions: the coming days' made, those past ACTIVITY_RETENTION_DAYS dropped.
    PeriodicJob("activity_log", "RETENTION_INTERVAL_SECONDS", entries.upkeep),
    # Webhook deliveries and their bodies kept DELIVERY_RETENTION_DAYS, then removed (D22).
    PeriodicJob("delivery_retention", "RETENTION_INTERVAL_SECONDS",
                lambda: {"deliveries_removed": deliveries.remove_past_retention()}),
    # The engine callback ids kept to refuse replays (E7), forgotten once a replay would be stale.
    PeriodicJob("callback_ids", "RECOVERY_INTERVAL_SECONDS", callbacks.forget_expired),
    # Stored events (the events list and stream) kept DELIVERY_RETENTION_DAYS too, then removed (D27).
    PeriodicJob("event_retention", "RETENTION_INTERVAL_SECONDS",
                lambda: {"events_removed": feed.remove_past_retention()}),
    # The watches' due scans (D28), claimed from the database in batches.
    PeriodicJob("watches", "WATCH_INTERVAL_SECONDS", watchlist.run_due),
    # Source health (D30): a probe round per source every SOURCE_PROBE_MINUTES (at most two
    # submissions per source per interval, one worker at a time)...
    PeriodicJob("source_probes", "SOURCE_PROBE_MINUTES", probes.send, unit=60),
    # ...and, at every turn, the rounds answered judged, the sources judged, old counts removed.
    PeriodicJob("sources", "RECOVERY_INTERVAL_SECONDS", probes.run_health),
)
BY_NAME = {job.name: job for job in SCHEDULE}


# Counts not worth a log line (routine upkeep at every turn).
QUIET = ("idempotency_purged", "callback_ids_forgotten")


def claim(job: PeriodicJob) -> bool:
    """Whether this worker runs ``job`` now: no worker ran it within its interval."""
    return bool(runtime.redis().set(job.lock, "1", nx=True, ex=max(1, job.interval() - 1)))


def run(job: PeriodicJob) -> dict:
    """Run ``job`` now (its claim taken, or the operator's command) on one connection held for
    the whole job, and record that it ran."""
    with connection_context():
        report = job.run()
    metrics.periodic_job_ran(job.name)
    if any(count for action, count in report.items() if action not in QUIET):
        log.info("%s: %s", job.name, report)
    return report


def run_due() -> dict[str, dict]:
    """Run every job that is due and not claimed by another worker: the reports by job name.
    A job that fails is logged and tried again after its interval, and the others still run; a
    lost database or Redis connection ends the turn (the worker reports the outage once)."""
    reports = {}
    for job in SCHEDULE:
        if not claim(job):
            continue
        try:
            reports[job.name] = run(job)
        except (*CONNECTION_ERRORS, *OUTAGE_ERRORS):
            raise
        except Exception:
            log.exception("periodic job %s failed; it runs again in %s s", job.name, job.interval())
    return reports
