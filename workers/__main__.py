"""``python -m workers``: an RQ worker with its scheduler on ``engine`` and ``webhooks``.

Jobs run in the worker process (``SimpleWorker``): tracking and delivery jobs are
short HTTP calls, and forking per job would cost more than the job. RQ's job timeout
still bounds each one. The scheduler is RQ's, made precise (``PreciseScheduler``):
due times are kept to the millisecond and it looks for due jobs every 0.2 s. Every
``RECOVERY_INTERVAL_SECONDS`` a worker runs the recovery sweep, one worker at a time
under a Redis lock. If Redis goes away the worker waits and reconnects instead of
exiting.
"""
from __future__ import annotations

import argparse
import sys
import logging
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, TimeoutError as RedisTimeoutError
from rq import Queue, SimpleWorker
from rq.defaults import DEFAULT_WORKER_TTL
from rq.scheduler import RQScheduler

from app import create_app, runtime
from app.config import startup_error_line
from app.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE, promote_due
from app.startup import StartupError, check

log = logging.getLogger("workers")
SWEEP_LOCK = "scan-api:recovery-sweep"


def run_sweep_once() -> dict | None:
    """Run the sweep unless another worker holds the lock for this interval."""
    interval = int(runtime.config["RECOVERY_INTERVAL_SECONDS"])
    if not runtime.redis().set(SWEEP_LOCK, "1", nx=True, ex=max(1, interval - 1)):
        return None
    from app.services.recovery import sweep
    report = sweep()
    if any(v for k, v in report.items() if k != "idempotency_purged"):
        log.info("recovery sweep: %s", report)
    return report


# How often the scheduler moves due jobs to their queue (RQ's default: every second).
SCHEDULER_INTERVAL = 0.2


# RQ internals: RQ 2.12 has no public way to change its scheduler's precision or to
# give a worker another scheduler class, so PreciseScheduler overrides ``work`` and
# ``enqueue_scheduled_jobs`` (using the scheduler's private state as RQ's own code does)
# and ScanWorker overrides ``_start_scheduler``. Moving the due jobs is app.jobs.promote_due.
class PreciseScheduler(RQScheduler):
    """RQ's scheduler, to the millisecond rather than the second.

    RQ's takes the jobs whose due time is at most now rounded down to the second, once
    a second; ``app.jobs`` stores due times to the millisecond, and this one takes
    those due by now, every SCHEDULER_INTERVAL. ``work`` and ``enqueue_scheduled_jobs``
    are RQ 2.12's with those two changes (the heartbeat stays once a second, and
    ``interval``, which also sets the lock's lifetime, stays RQ's); the lock that elects
    one scheduler per queue is RQ's.
    """

    def work(self):
        self._install_signal_handlers()
        self.register_birth()
        beat = 0.0
        while True:
            if self._stop_requested:
                self.stop()
                break
            if self.should_reacquire_locks:
                self.acquire_locks()
            if time.monotonic() - beat >= self.interval:
                self.heartbeat()
                beat = time.monotonic()
            self.enqueue_scheduled_jobs()
            time.sleep(SCHEDULER_INTERVAL)

    def enqueue_scheduled_jobs(self):
        self._status = self.Status.WORKING
        if not self._scheduled_job_registries and self._acquired_locks:
            self.prepare_registries()
        for registry in self._scheduled_job_registries:
            promote_due(Queue(registry.name, connection=self.connection, serializer=self.serializer), time.time())
        self._status = self.Status.STARTED


class ScanWorker(SimpleWorker):
    """SimpleWorker with the precise scheduler, that also runs the recovery sweep as a maintenance task."""

    def _start_scheduler(self, burst=False, logging_level="INFO", date_format=None, log_format=None):
        """RQ 2.12's ``_start_scheduler``, starting a PreciseScheduler."""
        kwargs = {"logging_level": logging_level if logging_level is not None else self.log.level}
        if date_format is not None:
            kwargs["date_format"] = date_format
        if log_format is not None:
            kwargs["log_format"] = log_format
        self.scheduler = PreciseScheduler(self.queues, connection=self.connection, serializer=self.serializer,
                                          **kwargs)
        self.scheduler.acquire_locks()
        if self.scheduler.acquired_locks:
            if burst:
                try:
                    self.scheduler.register_birth()
                    self.scheduler.enqueue_scheduled_jobs()
                finally:
                    self.scheduler.release_locks()
                    self.scheduler.register_death()
            else:
                self.scheduler.start()

    def run_maintenance_tasks(self):
        super().run_maintenance_tasks()
        try:
            run_sweep_once()
        except Exception:  # a failed sweep is retried next interval; the worker keeps working
            log.exception("recovery sweep failed")


def build_worker(queues=(ENGINE_QUEUE, WEBHOOK_QUEUE), name=None) -> ScanWorker:
    interval = max(1, int(runtime.config["RECOVERY_INTERVAL_SECONDS"]))
    # An idle RQ worker blocks on its queues for ``worker_ttl - 15`` s (405 s by default)
    # and runs maintenance only between two waits: size the wait to the sweep interval,
    # so that an idle worker still sweeps every RECOVERY_INTERVAL_SECONDS.
    return ScanWorker(list(queues), connection=runtime.redis(), name=name, maintenance_interval=interval,
                      worker_ttl=min(DEFAULT_WORKER_TTL, interval + 15))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers", description=__doc__.splitlines()[0])
    parser.add_argument("--burst", action="store_true", help="Exit when the queues are empty.")
    parser.add_argument("--queues", default=f"{ENGINE_QUEUE},{WEBHOOK_QUEUE}")
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    try:
        check()  # settings, and in production a reachable database: one line, not a traceback
        create_app()
    except StartupError as exc:
        print(startup_error_line(str(exc)), file=sys.stderr, flush=True)
        return 1
    queues = [q for q in args.queues.split(",") if q]
    while True:
        try:
            worker = build_worker(queues, args.name)
            worker.work(with_scheduler=True, burst=args.burst, logging_level=runtime.config["LOG_LEVEL"])
            return 0
        except (RedisConnectionError, RedisTimeoutError, RedisError) as exc:
            log.warning("Redis unavailable (%s); reconnecting in 2 s", exc.__class__.__name__)
            time.sleep(2)


if __name__ == "__main__":
    raise SystemExit(main())
