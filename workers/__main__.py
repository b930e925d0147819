"""``python -m workers``: an RQ worker with its scheduler on ``engine`` and ``webhooks``.

Jobs run in the worker process (``SimpleWorker``): tracking and delivery jobs are
short HTTP calls, and forking per job would cost more than the job. RQ's job timeout
still bounds each one. Every ``RECOVERY_INTERVAL_SECONDS`` a worker runs the recovery
sweep, one worker at a time under a Redis lock. If Redis goes away the worker waits
and reconnects instead of exiting.
"""
from __future__ import annotations

import argparse
import sys
import logging
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, TimeoutError as RedisTimeoutError
from rq import SimpleWorker
from rq.defaults import DEFAULT_WORKER_TTL

from app import create_app, runtime
from app.config import ConfigError
from workers.queues import ENGINE_QUEUE, WEBHOOK_QUEUE

log = logging.getLogger("workers")
SWEEP_LOCK = "scan-api:recovery-sweep"


def run_sweep_once() -> dict | None:
    """Run the sweep unless another worker holds the lock for this interval."""
    interval = int(runtime.config["RECOVERY_INTERVAL_SECONDS"])
    if not runtime.redis().set(SWEEP_LOCK, "1", nx=True, ex=max(1, interval - 1)):
        return None
    from workers.recovery import sweep
    report = sweep()
    if any(v for k, v in report.items() if k != "idempotency_purged"):
        log.info("recovery sweep: %s", report)
    return report


class ScanWorker(SimpleWorker):
    """SimpleWorker that also runs the recovery sweep as a maintenance task."""

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
        create_app()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
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
