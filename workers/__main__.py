"""``python -m workers``: an RQ worker with its scheduler on ``engine`` and ``webhooks``.

With the engine queue it also runs the batch looks (``workers.looker``, D24): threads that
look at the scans in flight due in the database, many per engine request (the one way a scan
in flight is tracked); the engine queue carries the engine deletions of erased scans, and
hands over any tracking job left from before the upgrade (``workers.engine_jobs``).

Jobs run in the worker process (``SimpleWorker``): engine and delivery jobs are
short HTTP calls, and forking per job would cost more than the job. RQ's job timeout
still bounds each one. The scheduler is RQ's, made precise (``PreciseScheduler``):
due times are kept to the millisecond and it looks for due jobs every 0.2 s. Every
``RECOVERY_INTERVAL_SECONDS`` a worker runs the periodic jobs that are due
(``app.periodic.SCHEDULE``: the recovery sweep, retention), each one worker at a
time under a Redis lock. If Redis goes away the worker waits and reconnects instead of
exiting; the first SIGTERM (or Ctrl+C) stops it within seconds all the same, with one
log line and no traceback (``STOPPING``).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq import Queue, SimpleWorker, worker_registration
from rq.defaults import DEFAULT_WORKER_TTL
from rq.exceptions import StopRequested
from rq.scheduler import RQScheduler
from rq.worker import WorkerStatus

from app import create_app, periodic
from app.plumbing import runtime
from app.plumbing.config import retired_setting_lines, startup_error_line
from app.plumbing.db import CONNECTION_ERRORS
from app.plumbing.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE, promote_due
from app.plumbing.startup import StartupError, check
from workers.database_gate import DatabaseGate

log = logging.getLogger("workers")
# Set by the first SIGTERM/SIGINT, whoever receives it (the worker or ``main`` between
# two workers): from then on nothing reconnects to Redis, and ``main`` returns.
STOPPING = threading.Event()
# The queue RQ's loop waits on when the delivery pool takes all of a worker's queues; nothing fills it.
IDLE_QUEUE = "webhooks-pool-idle"
# How long the scheduler waits after a Redis error before trying again.
SCHEDULER_RETRY_SECONDS = 1.0
# The process's one view of the database's health, shared by RQ's loop and the delivery pool.
DATABASE = DatabaseGate(STOPPING)


# How often the scheduler moves due jobs to their queue (RQ's default: every second).
SCHEDULER_INTERVAL = 0.2


# RQ internals: RQ 2.12 has no public way to change its scheduler's precision or to
# give a worker another scheduler class, so PreciseScheduler overrides ``work`` and
# ``enqueue_scheduled_jobs`` (using the scheduler's private state as RQ's own code does)
# and ScanWorker overrides ``_start_scheduler``. Moving the due jobs is app.plumbing.jobs.promote_due.
class PreciseScheduler(RQScheduler):
    """RQ's scheduler, to the millisecond rather than the second.

    RQ's takes the jobs whose due time is at most now rounded down to the second, once
    a second; ``app.plumbing.jobs`` stores due times to the millisecond, and this one takes
    those due by now, every SCHEDULER_INTERVAL. ``work`` and ``enqueue_scheduled_jobs``
    are RQ 2.12's with those two changes (the heartbeat stays once a second, and
    ``interval``, which also sets the lock's lifetime, stays RQ's); the lock that elects
    one scheduler per queue is RQ's.
    """

    def work(self):
        """RQ 2.12's loop, made to ride out a Redis outage: RQ's scheduler process dies on
        the first Redis error (with a traceback); this one logs one line, waits and goes on,
        and still stops within SCHEDULER_INTERVAL of a SIGTERM."""
        self._install_signal_handlers()
        beat, born, outage = 0.0, False, False
        while not self._stop_requested:
            try:
                if not born:
                    self.register_birth()
                    born = True
                if self.should_reacquire_locks:
                    self.acquire_locks()
                if time.monotonic() - beat >= self.interval:
                    self.heartbeat()
                    beat = time.monotonic()
                self.enqueue_scheduled_jobs()
                if outage:
                    log.info("scheduler: Redis is back")
                    outage = False
                pause = SCHEDULER_INTERVAL
            except RedisError as exc:
                if not outage:
                    log.warning("scheduler: Redis unavailable (%s), retrying every %.0f s",
                                exc.__class__.__name__, SCHEDULER_RETRY_SECONDS)
                    outage = True
                pause = SCHEDULER_RETRY_SECONDS
            deadline = time.monotonic() + pause
            while not self._stop_requested and time.monotonic() < deadline:
                time.sleep(min(SCHEDULER_INTERVAL, pause))
        try:
            self.stop()
        except RedisError:  # the locks expire by themselves
            log.info("scheduler: stopped without releasing its locks (Redis unavailable)")

    def enqueue_scheduled_jobs(self):
        self._status = self.Status.WORKING
        if not self._scheduled_job_registries and self._acquired_locks:
            self.prepare_registries()
        for registry in self._scheduled_job_registries:
            promote_due(Queue(registry.name, connection=self.connection, serializer=self.serializer), time.time())
        self._status = self.Status.STARTED


class ScanWorker(SimpleWorker):
    """SimpleWorker with the precise scheduler, that also runs the periodic jobs (recovery,
    retention) as a maintenance task.

    Queues named in ``pooled`` are scheduled (their due jobs promoted) and listed as this
    worker's, but their jobs are taken by the delivery pool (``workers.delivery_pool``),
    not by RQ's one-at-a-time loop: that loop only dequeues the others (``engine``), so
    tracking never waits behind a webhook. With no other queue it waits on an empty one
    (``IDLE_QUEUE``) and keeps its heartbeat, scheduler and sweep.
    """

    def __init__(self, *args, pooled=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.pooled = set(pooled)
        self._ordered_queues = self._dequeued(self._ordered_queues)

    def _dequeued(self, queues):
        mine = [q for q in queues if q.name not in self.pooled]
        return mine or [Queue(IDLE_QUEUE, connection=self.connection, serializer=self.serializer)]

    def reorder_queues(self, reference_queue):
        super().reorder_queues(reference_queue)
        self._ordered_queues = self._dequeued(self._ordered_queues)

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

    def execute_job(self, job, queue):
        DATABASE.wait()  # while the database is down, hold the job rather than fail it
        return super().execute_job(job, queue)

    def handle_exception(self, job, *exc_info):
        if isinstance(exc_info[1], CONNECTION_ERRORS):
            DATABASE.connection_lost(exc_info[1])  # one line for the outage, not a traceback per job
            return
        super().handle_exception(job, *exc_info)

    def run_maintenance_tasks(self):
        try:
            super().run_maintenance_tasks()
            periodic.run_due()
        except CONNECTION_ERRORS as exc:
            DATABASE.connection_lost(exc)
        except RedisConnectionError as exc:  # see _outage_safe: one line, retried next turn
            log.warning("maintenance skipped: Redis unavailable (%s)", exc.__class__.__name__)
        except RedisError as exc:
            log.warning("periodic jobs failed: Redis answered %s", exc.__class__.__name__)
        except Exception:  # a failed turn is retried next interval; the worker keeps working
            log.exception("periodic jobs failed")

    # --- riding out a Redis outage ------------------------------------------------------
    # RQ retries a lost connection only inside its dequeue loop; the same error one step
    # outside it (the suspension check, maintenance, the heartbeat after a job) ends the
    # work loop with a traceback. Those steps skip their turn instead, and the dequeue
    # loop that follows meets the outage and waits it out as RQ means it to.
    _redis_lost = False

    def check_for_suspension(self, burst):
        try:
            super().check_for_suspension(burst)
        except RedisConnectionError:
            pass

    def set_state(self, state, pipeline=None):
        # The state is kept in the process first (``get_state`` reads that), then in Redis.
        try:
            super().set_state(state, pipeline)
        except RedisConnectionError:
            if pipeline is not None:
                raise

    def heartbeat(self, timeout=None, pipeline=None):
        # The first call of each turn of RQ's dequeue loop, its retries while Redis is
        # down included: an idle worker asked to stop stops here at the latest.
        if self._stop_requested and pipeline is None and self.get_state() != WorkerStatus.BUSY:
            raise StopRequested()
        try:
            if self._redis_lost and pipeline is None:
                # Redis is back, perhaps restarted empty: be listed again as at birth.
                with self.connection.pipeline() as pipe:
                    pipe.hset(self.key, mapping=self.serialize())
                    worker_registration.register(self, pipe)
                    pipe.execute()
                self._redis_lost = False
                log.info("Redis is back")
            return super().heartbeat(timeout, pipeline)
        except RedisConnectionError:
            if pipeline is not None:
                raise
            self._redis_lost = True

    # --- stopping while Redis is down ---------------------------------------------------
    # RQ's signal handler stops an idle worker by raising StopRequested (an Exception)
    # wherever the main thread is, and writes to Redis on the way out. With Redis down the
    # worker is mostly in RQ's connection-retry loop, logging: the exception was swallowed
    # by the logging module (which prints a traceback) or the handler itself failed on
    # Redis, and the loop, which never looks at a stop request, retried until SIGKILL.
    # Here the stop is a StopNow (a SystemExit: no ``except Exception`` takes it, RQ's
    # work loop lets it through after its teardown), the request is also recorded where
    # the retry loop looks, and a Redis error on the way out costs one log line.

    def _install_signal_handlers(self):
        super()._install_signal_handlers()
        if STOPPING.is_set():  # the signal came while the worker was starting
            self._stop_requested = True

    def request_stop(self, signum, frame):
        STOPPING.set()
        try:
            super().request_stop(signum, frame)
        except StopRequested:  # idle: stop now
            self._stop_requested = True
            self._stop_now(frame)
        except RedisError:
            # Only a busy worker writes to Redis here (to record the request): like RQ,
            # it stops once its job is done.
            self._stop_requested = True
            if self.scheduler:
                self.stop_scheduler()

    def _stop_now(self, frame):
        """Raise ``StopNow`` where the main thread is, unless it is inside a finalizer: an
        exception raised in a ``__del__`` (RQ's scheduler drops a Redis connection pool on
        every look, and the garbage collector may finalize it just then) is printed as a
        traceback and dropped. Then the stop is raised again a moment later (SIGUSR1)."""
        inner = frame
        while inner is not None:
            if inner.f_code.co_name == "__del__":
                signal.signal(signal.SIGUSR1, lambda signum, later: self._stop_now(later))
                threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGUSR1)).start()
                return
            inner = inner.f_back
        raise StopNow() from None

    def teardown(self):
        try:
            super().teardown()
        except RedisError as exc:
            # Its registration expires by itself (worker_ttl).
            log.warning("worker stopped without unregistering: Redis unavailable (%s)", exc.__class__.__name__)


class StopNow(SystemExit):
    """Raised by the first SIGTERM/SIGINT in an idle worker; ``main`` returns 0 on it."""

    def __init__(self):
        super().__init__(0)


def build_worker(queues=(ENGINE_QUEUE, WEBHOOK_QUEUE), name=None, pooled=()) -> ScanWorker:
    interval = max(1, int(runtime.config["RECOVERY_INTERVAL_SECONDS"]))
    # An idle RQ worker blocks on its queues for ``worker_ttl - 15`` s (405 s by default)
    # and runs maintenance only between two waits: size the wait to the sweep interval,
    # so that an idle worker still sweeps every RECOVERY_INTERVAL_SECONDS.
    return ScanWorker(list(queues), connection=runtime.redis(), name=name, maintenance_interval=interval,
                      worker_ttl=min(DEFAULT_WORKER_TTL, interval + 15), pooled=pooled)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers", description=__doc__.splitlines()[0])
    parser.add_argument("--burst", action="store_true", help="Exit when the queues are empty.")
    parser.add_argument("--queues", default=f"{ENGINE_QUEUE},{WEBHOOK_QUEUE}")
    parser.add_argument("--name", default=None)
    parser.add_argument("--webhook-concurrency", type=int, default=None, metavar="N",
                        help="Webhook deliveries in flight at once (default: WEBHOOK_CONCURRENCY, 100).")
    args = parser.parse_args(argv)
    if args.webhook_concurrency is not None and args.webhook_concurrency < 1:
        parser.error("--webhook-concurrency must be at least 1")
    try:
        check()  # settings, and in production a reachable database: one line, not a traceback
        create_app()
    except StartupError as exc:
        print(startup_error_line(str(exc)), file=sys.stderr, flush=True)
        return 1
    for line in retired_setting_lines():
        log.warning(line)
    queues = [q for q in args.queues.split(",") if q]
    _trap_signals()
    lookers = None
    if ENGINE_QUEUE in queues and not args.burst:  # D24: scans in flight hold no job
        from workers.looker import Lookers
        lookers = Lookers(stopping=STOPPING, database=DATABASE).start()
        log.info("looking at scans in flight in batches of up to %d (%d threads)",
                 runtime.config["ENGINE_BATCH_SIZE"], lookers.size)
    pool = None
    if WEBHOOK_QUEUE in queues and not args.burst:  # a burst (tests, one-off drains) runs them on RQ's loop
        from workers.delivery_pool import DeliveryPool
        pool = DeliveryPool(size=args.webhook_concurrency, stopping=STOPPING, database=DATABASE)  # started by _work
        log.info("delivering webhooks %d at a time (at most %d per endpoint, %d per receiver host)",
                 pool.size, pool.per_endpoint, pool.per_host)
    sinks = None
    if WEBHOOK_QUEUE in queues and not args.burst:  # audit sinks (D32) go out with the webhooks
        from workers.audit_sinks import SinkPusher
        sinks = SinkPusher(stopping=STOPPING).start()
    try:
        return _work(queues, args, pool)
    finally:
        if sinks is not None:
            sinks.stop()
        if pool is not None:
            pool.stop()
        if lookers is not None:
            lookers.stop()


def _work(queues, args, pool) -> int:
    while not STOPPING.is_set():
        try:
            worker = build_worker(queues, args.name, pooled=(WEBHOOK_QUEUE,) if pool is not None else ())
            if pool is not None and not pool.started:
                # Only now: RQ's worker has just raised the shared Redis client's socket timeout
                # above its blocking wait on the queue. A connection the pool's threads opened
                # before that kept the 5 s one; RQ's loop, given it from the shared pool, timed out
                # in its 60 s wait, and RQ's "Redis connection timeout, quitting..." ended the
                # whole process with deliveries still queued.
                pool.start()
            worker.work(with_scheduler=True, burst=args.burst, logging_level=runtime.config["LOG_LEVEL"])
            return 0
        except StopNow:
            break
        except (RedisConnectionError, RedisTimeoutError, RedisError) as exc:
            _trap_signals()
            if STOPPING.is_set():
                break
            log.warning("Redis unavailable (%s); reconnecting in 2 s", exc.__class__.__name__)
            deadline = time.monotonic() + 2
            while not STOPPING.is_set() and time.monotonic() < deadline:
                time.sleep(0.1)
    log.info("worker stopped on request")
    return 0


def _trap_signals() -> None:
    """Between two workers (and until one installs its own handlers) a signal only sets STOPPING."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: STOPPING.set())


if __name__ == "__main__":
    raise SystemExit(main())
