"""Many webhook deliveries at once in one worker process (D18).

``python -m workers`` runs the ``webhooks`` queue here instead of on RQ's one-job-at-a-time
loop: a dispatcher thread takes delivery jobs from the queue only when one of
``WEBHOOK_CONCURRENCY`` threads is free, and each thread runs ``webhook_jobs.run`` (the
same attempt as the RQ job: the service fences it, writes its attempt row before the
request and records the outcome). Threads rather than asyncio: the request goes through
the same ``requests`` session whose connections the SSRF guard checks and the attempt
deadline watches (``app.plumbing.outbound_urls``), and the database calls around it stay the
synchronous service calls; a delivery spends its time waiting on a socket, where a thread
costs no CPU.

Isolation is per endpoint (D18 amended): at most ``WEBHOOK_ENDPOINT_CONCURRENCY`` of a
process's threads send to one endpoint (D22: one of a key's endpoints, by its id) at a time, so an endpoint that
hangs holds only its own share, even when other customers' endpoints are on the same host and
port (a shared gateway, an automation platform). A larger ceiling per receiver host,
``WEBHOOK_HOST_CONCURRENCY`` (host name and port), is politeness toward a shared receiver.
A job refused by either is parked in memory, in order, under what refused it (its endpoint, or
its host), and run by the next thread that finishes with that endpoint or host; it holds no
thread meanwhile, so other endpoints' deliveries keep flowing. Past ``MAX_PARKED`` parked jobs
in one line, a job is put back on the schedule a second later (``deliveries.defer``).
Engine tracking never waits here: it keeps RQ's loop in the main
thread, on its own queue.

Durability is the RQ job's: a job is taken from Redis by a script that marks it started in
the same step, so a job is either waiting in Redis or held by this process. A process
SIGKILLed with jobs in flight or parked leaves their deliveries pending without a live job,
and the recovery sweep re-dispatches them (an attempt row left ``in_progress`` is closed as
``worker_lost`` first); a warm stop puts parked jobs back in Redis and lets the requests in
flight end (each is bounded by ``WEBHOOK_TIMEOUT_SECONDS``).
"""
from __future__ import annotations

import collections
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from redis.exceptions import RedisError
from rq.job import Job, JobStatus

from app.plumbing import runtime
from app.plumbing.db import CONNECTION_ERRORS
from app.plumbing.jobs import WEBHOOK_QUEUE, queue
from app.webhooks import deliveries
from workers import webhook_jobs
from workers.database_gate import DatabaseGate

log = logging.getLogger("workers.deliveries")

# How many jobs one endpoint (or host) may have parked in a process before more are put back on
# the schedule.
MAX_PARKED = 1000
DEFER_SECONDS = 1.0
# A job whose service call failed (the database refused a connection, a deadlock...) is put
# back on the schedule this much later, under the same id: it never made its request, or, if
# it did, the compare-and-set on ``attempts`` makes the replay a no-op ("stale").
ERROR_RETRY_SECONDS = 2.0
# The dispatcher's longest wait for a job or a free thread: how fast it sees a stop request.
POLL_SECONDS = 0.5

# LPOP up to ARGV[1] job ids from the queue and mark each started, in one step: a job is
# never out of the queue while its hash still says queued (the sweep would take it for alive).
TAKE_SCRIPT = """
local ids = redis.call('LPOP', KEYS[1], ARGV[1])
if not ids then return {} end
for _, id in ipairs(ids) do
  redis.call('HSET', ARGV[2] .. id, 'status', ARGV[3])
end
return ids
"""


def host_of(url: str) -> str:
    """The receiver host a URL names, for the per-host ceiling: ``host:port``, lower case."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{(parts.hostname or '').lower()}:{port}"
    except ValueError:
        return url


def endpoint_of(endpoint_id: str, url: str) -> str:
    """The endpoint a delivery goes to, for the per-endpoint share: its id (D22), so two endpoints
    of one key, or of two keys, at the same URL hold separate shares, and an endpoint whose URL
    changes keeps its own."""
    return endpoint_id


class DeliveryPool:
    def __init__(self, connection=None, size: int | None = None, per_endpoint: int | None = None,
                 per_host: int | None = None, stopping: threading.Event | None = None,
                 database: DatabaseGate | None = None):
        self.connection = connection or runtime.redis()
        self.size = max(1, size if size is not None else runtime.config["WEBHOOK_CONCURRENCY"])
        # 0: no share (or ceiling) below the pool's own size.
        per_endpoint = per_endpoint if per_endpoint is not None else runtime.config["WEBHOOK_ENDPOINT_CONCURRENCY"]
        self.per_endpoint = per_endpoint if per_endpoint > 0 else self.size
        per_host = per_host if per_host is not None else runtime.config["WEBHOOK_HOST_CONCURRENCY"]
        self.per_host = per_host if per_host > 0 else self.size
        self.stopping = stopping or threading.Event()
        self.database = database or DatabaseGate(self.stopping)
        self.queue = queue(WEBHOOK_QUEUE)
        self._take = self.connection.register_script(TAKE_SCRIPT)
        self._free = threading.Semaphore(self.size)
        self._lock = threading.Lock()
        # Requests in flight per endpoint and per host; job ids waiting, per endpoint or host.
        self._busy: dict[str, int] = collections.Counter()
        self._host_busy: dict[str, int] = collections.Counter()
        self._parked: dict[tuple[str, str], collections.deque] = {}  # ("endpoint"|"host", name) -> ids
        # The threads share the process's database pool (32 connections by default) and wait for
        # a free connection: each holds one only around its service calls, never during the
        # request. A connection per thread (as before) took ~100 of PostgreSQL's default 100
        # slots; the server refused the rest, and those jobs were dropped.
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="delivery")
        self._thread: threading.Thread | None = None
        self.completed = 0

    # --- the dispatcher -------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> DeliveryPool:
        self._thread = threading.Thread(target=self.run, name="delivery-dispatcher", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        outage = False
        while not self.stopping.is_set():
            if not self._free.acquire(timeout=POLL_SECONDS):
                continue
            free = 1
            while free < self.size and self._free.acquire(blocking=False):
                free += 1
            try:
                job_ids = self._take_jobs(free)
                if outage:
                    log.info("delivery pool: Redis is back")
                    outage = False
            except RedisError as exc:
                job_ids = []
                if not outage:
                    log.warning("delivery pool: Redis unavailable (%s), retrying", exc.__class__.__name__)
                    outage = True
                self.stopping.wait(1.0)
            for job_id in job_ids:
                self._executor.submit(self._run_job, job_id)
            for _ in range(free - len(job_ids)):
                self._free.release()
            if not job_ids and not outage:
                self._wait_for_jobs()

    def _take_jobs(self, n: int) -> list[str]:
        ids = self._take(keys=[self.queue.key], args=[n, Job.redis_job_namespace_prefix, JobStatus.STARTED.value])
        return [i.decode() if isinstance(i, bytes) else i for i in ids]

    def _wait_for_jobs(self) -> None:
        """Block until the queue has a job (or POLL_SECONDS pass), taking none: BLMOVE of the
        list onto itself returns as soon as something is pushed and leaves it in the queue."""
        try:
            self.connection.blmove(self.queue.key, self.queue.key, POLL_SECONDS, "LEFT", "LEFT")
        except RedisError:
            pass  # met again by the next take

    # --- one job --------------------------------------------------------------------------

    def _run_job(self, job_id: str) -> None:
        """Run ``job_id``, then whatever was parked for the endpoint and host it freed, on this thread.

        A parked job that turns out to have nothing to send (its delivery succeeded meanwhile,
        or it was a duplicate the sweep enqueued: ``final``/``stale``) frees no share, but the
        chain goes on with the next parked job all the same: stopping there left the jobs
        parked behind it with no thread to run them until the sweep took them for lost."""
        freed = None
        try:
            while job_id is not None and not self.stopping.is_set():
                freed = self._attempt(job_id) or freed
                job_id = self._next_parked(*freed) if freed else None
            if job_id is not None:  # stopping: back to Redis rather than lost
                self._put_back(job_id, 0)
        finally:
            self._free.release()

    def _attempt(self, job_id: str) -> tuple[str, str] | None:
        """One job: returns the endpoint and host it held a share of (now released), if any."""
        delivery_id = job_id[len("dlv-"):].rsplit("-", 1)[0]
        held: list[tuple[str, str]] = []

        def admit(endpoint_id: str, url: str) -> bool:
            endpoint, host = endpoint_of(endpoint_id, url), host_of(url)
            with self._lock:
                if self._busy[endpoint] >= self.per_endpoint:
                    self._park(("endpoint", endpoint), job_id, delivery_id)
                    return False
                if self._host_busy[host] >= self.per_host:
                    self._park(("host", host), job_id, delivery_id)
                    return False
                self._busy[endpoint] += 1
                self._host_busy[host] += 1
            held.append((endpoint, host))
            return True

        try:
            self.database.wait()
            result = webhook_jobs.run(delivery_id, job_id, admit, self.database)
            if result != "busy":
                self._forget(job_id)
        except CONNECTION_ERRORS as exc:
            self.database.connection_lost(exc)  # one line for the outage, not one per job
            self._put_back(job_id, ERROR_RETRY_SECONDS)
        except Exception as exc:
            # A database outage (or a bug): the job goes back on the schedule rather than being
            # dropped. Dropped, it was neither in the queue nor parked, its hash said "started",
            # and its delivery waited for the sweep (RECOVERY_STALE_SECONDS and more): fast
            # receivers' deliveries sat there when ~100 threads met a PostgreSQL out of connections.
            log.warning("delivery job %s failed (%s: %s); retrying in %.0f s", job_id, exc.__class__.__name__,
                        str(exc).splitlines()[0] if str(exc) else "", ERROR_RETRY_SECONDS)
            self._put_back(job_id, ERROR_RETRY_SECONDS)
        finally:
            if held:
                endpoint, host = held[0]
                with self._lock:
                    self._busy[endpoint] -= 1
                    self._host_busy[host] -= 1
                self.completed += 1
        return held[0] if held else None

    def _park(self, line: tuple[str, str], job_id: str, delivery_id: str) -> None:
        """Under the lock: keep the job for the next thread done with the endpoint or host that
        refused it (``line``), or reschedule it."""
        parked = self._parked.setdefault(line, collections.deque())
        if len(parked) < MAX_PARKED:
            parked.append(job_id)
        else:
            threading.Thread(target=deliveries.defer, args=(delivery_id, job_id, DEFER_SECONDS),
                             daemon=True).start()

    def _next_parked(self, endpoint: str, host: str) -> str | None:
        """A job parked for the endpoint just freed, else one parked for its host's ceiling.
        (A job parked for the host may still find its own endpoint busy: it parks there anew.)"""
        with self._lock:
            if self._host_busy[host] >= self.per_host:
                return None
            for line, room in ((("endpoint", endpoint), self._busy[endpoint] < self.per_endpoint),
                               (("host", host), True)):
                parked = self._parked.get(line)
                if parked and room:
                    job_id = parked.popleft()
                    if not parked:
                        del self._parked[line]
                    return job_id
        return None

    def _forget(self, job_id: str) -> None:
        """A job that ran (or found nothing to do) is done: drop its hash, as RQ's result_ttl=0 does."""
        try:
            self.connection.delete(Job.redis_job_namespace_prefix + job_id)
        except RedisError:
            pass  # it expires with its ttl

    def _put_back(self, job_id: str, delay: float) -> None:
        deliveries.defer(job_id[len("dlv-"):].rsplit("-", 1)[0], job_id, delay)

    # --- stopping ---------------------------------------------------------------------------

    def parked(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._parked.values())

    def in_flight(self) -> int:
        with self._lock:
            return sum(self._host_busy.values())

    def stop(self, timeout: float | None = None) -> None:
        """Take no more jobs, put the parked ones back in Redis, let the requests in flight end."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(POLL_SECONDS * 4)
        with self._lock:
            parked = [job_id for q in self._parked.values() for job_id in q]
            self._parked.clear()
        for job_id in parked:
            self._put_back(job_id, 0)
        if timeout is None:
            timeout = runtime.config["WEBHOOK_TIMEOUT_SECONDS"] + 5
        waiter = threading.Thread(target=self._executor.shutdown, kwargs={"wait": True}, daemon=True)
        waiter.start()
        waiter.join(timeout)
