"""Riding out a database outage: one log line per reconnection attempt, with back-off.

Without it, every job a worker took while PostgreSQL was down failed with a traceback
(1,098 of them in a 15 s outage). Now the first job that meets a lost connection marks
the database lost, with one line; before the next job, one thread probes the database
(a fresh connection and ``SELECT 1``) with back-off, one line per attempt, while the
other threads wait; when it answers, one line says so and work resumes. A job that
failed meanwhile is not lost: the delivery pool puts it back on the schedule, and the
recovery sweep re-dispatches a tracking chain that broke (D13).
"""
from __future__ import annotations

import logging
import threading

from app.plumbing import runtime
from app.plumbing.db import DatabaseUnreachable, check_reachable

log = logging.getLogger("workers.database")

FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0


class DatabaseGate:
    def __init__(self, stopping: threading.Event | None = None):
        self.stopping = stopping or threading.Event()
        self._lost = threading.Event()
        self._probing = threading.Lock()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def connection_lost(self, exc: BaseException) -> None:
        """A job met a broken or refused connection: say so once, and hold the next jobs."""
        if not self._lost.is_set():
            self._lost.set()
            log.warning("database unavailable (%s); holding jobs until it answers", exc.__class__.__name__)

    def wait(self) -> None:
        """Return at once while the database answers; while it is lost, probe it with back-off
        (one thread probes, one line per attempt; the others wait) until it answers or a stop."""
        if not self._lost.is_set():
            return
        with self._probing:
            delay = FIRST_RETRY_SECONDS
            while self._lost.is_set() and not self.stopping.is_set():
                try:
                    check_reachable(runtime.config["DATABASE_URL"], timeout=2)
                except DatabaseUnreachable as exc:
                    log.warning("%s; retrying in %.0f s", exc, delay)
                    self.stopping.wait(delay)
                    delay = min(MAX_RETRY_SECONDS, delay * 2)
                    continue
                self._lost.clear()
                log.info("database is back")
