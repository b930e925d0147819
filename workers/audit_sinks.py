"""The audit sinks' pusher (D32): a thread of ``python -m workers`` that sends each due sink's next
batch (``app.activity.audit_sinks``) on a small pool of its own threads.

Isolation is per sink, as webhook deliveries are per endpoint (``workers.delivery_pool``): a sink
has at most one batch in flight in a process (and, through its lease, in all of them), so a sink
that hangs until the timeout holds one thread and delays only its own entries; the others keep
being picked as they fall due. The request is the webhooks' own (``webhook_jobs.post``: the
guarded session that checks every connection's address, the attempt's deadline, no redirects).

Durability is the database's: a batch moves its sink's position only when acknowledged, by the
lease holder. A worker killed in the middle of a batch leaves the position where it was, and the
lease expires: the next worker sends the same entries again (each with its stable
``activity_id``). Nothing is lost, at worst repeated.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from app.activity import audit_sinks
from app.extensions import db
from app.plumbing.db import CONNECTION_ERRORS
from workers import webhook_jobs

log = logging.getLogger("workers.audit_sinks")

POLL_SECONDS = 1.0
DEFAULT_CONCURRENCY = 8


class SinkPusher:
    def __init__(self, size: int = DEFAULT_CONCURRENCY, stopping: threading.Event | None = None,
                 poll_seconds: float = POLL_SECONDS):
        self.size = max(1, size)
        self.stopping = stopping or threading.Event()
        self.poll_seconds = poll_seconds
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="audit-sink")
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> SinkPusher:
        self._thread = threading.Thread(target=self.run, name="audit-sink-pusher", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        paused = False  # an outage is one line here (the worker's database watch logs its retries)
        while not self.stopping.is_set():
            try:
                self.dispatch()
                paused = False
            except CONNECTION_ERRORS as exc:
                if not paused:
                    log.warning("audit sinks: paused until the database answers (%s)", exc.__class__.__name__)
                paused = True
            except Exception as exc:  # a bug must not end the thread: one line, and the next turn
                log.warning("audit sinks: dispatch failed (%s)", exc.__class__.__name__)
            self.stopping.wait(self.poll_seconds)

    def dispatch(self) -> int:
        """Hand each due sink without a batch in flight here to a free thread; how many."""
        with self._lock:
            busy = sorted(self._in_flight)
            room = self.size - len(busy)
        if room <= 0:
            return 0
        with db.connection_context():
            sink_ids = audit_sinks.due(exclude=busy, limit=room)
        for sink_id in sink_ids:
            with self._lock:
                self._in_flight.add(sink_id)
            self._executor.submit(self._push, sink_id)
        return len(sink_ids)

    def _push(self, sink_id: str) -> str | None:
        try:
            return push(sink_id)
        except Exception as exc:  # the lease expires and the batch is sent again: nothing lost
            log.warning("audit sink %s: batch failed (%s)", sink_id, exc.__class__.__name__)
            return None
        finally:
            with self._lock:
                self._in_flight.discard(sink_id)

    def stop(self, timeout: float = 15) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(self.poll_seconds * 4)
        waiter = threading.Thread(target=self._executor.shutdown, kwargs={"wait": True}, daemon=True)
        waiter.start()
        waiter.join(timeout)


def push(sink_id: str) -> str | None:
    """One batch of one sink: leased and read, sent (no database connection held meanwhile),
    recorded. None when there was nothing to send."""
    with db.connection_context():
        batch = audit_sinks.take_batch(sink_id)
    if batch is None:
        return None
    outcome = webhook_jobs.post(batch.url, batch.headers, batch.body)
    with db.connection_context():
        return audit_sinks.record(batch, status=outcome.status_code, error=outcome.error)
