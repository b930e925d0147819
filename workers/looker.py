"""The worker's lookers: threads that run the batch looks (``app.tracking.looks``, D24).

Each thread moves the scans the engine's callbacks said it runs to running (E7), claims the due
scans, looks at them and records what it saw, again and again
while scans are due (after a batch that was not full, a pause of ``BATCH_LINGER`` first, so that
scans falling due one by one are looked at together); with none due it waits until the earliest due time, at most
``IDLE_WAIT`` (a scan created meanwhile, by another process, is due at the earliest about
half a second after its creation). Any number of threads, processes and hosts share the due
scans: the claim skips the rows another claim holds. A lost database connection costs one
log line per reconnection attempt (the process's ``DatabaseGate``), never a traceback per
turn; the scans wait in the database meanwhile and are looked at when it answers.
"""
from __future__ import annotations

import logging
import threading

from app.plumbing import runtime
from app.plumbing.db import CONNECTION_ERRORS, connection_context
from app.plumbing.models import utcnow
from app.tracking import looks

log = logging.getLogger("workers.looker")

# The longest wait between two turns while nothing is due.
IDLE_WAIT = 0.2
# The wait when the due scans are all claimed by other lookers (their claims end with their
# looks; the due times stay as they were meanwhile, so waiting "until the earliest" would spin).
HELD_WAIT = 0.05
# After a batch that was not full, the wait before the next claim: the scans that fall due
# meanwhile (an engine's callbacks make them due one by one) are then looked at together, in one
# engine request and one transaction, instead of one small batch each as soon as each is due. A
# batch's cost is mostly its own (the claim, the request, the record, the finals' statements, the
# commit): at 800 finals a second, batches of 2 or 3 were most of the workers' and PostgreSQL's
# CPU per scan. It adds at most this to a final state's delay; a full batch goes on at once.
BATCH_LINGER = 0.1
# After an unexpected error, the wait before the next turn doubles from 1 s up to this (one line
# each time, without the traceback: the error's class only, as its text may quote a row).
MAX_ERROR_WAIT = 30.0


class Lookers:
    def __init__(self, *, size: int | None = None, stopping: threading.Event, database):
        self.size = size or runtime.config["ENGINE_LOOK_THREADS"]
        self.stopping, self.database = stopping, database
        self.threads: list[threading.Thread] = []
        self._failures = threading.local()

    def start(self) -> Lookers:
        for number in range(self.size):
            thread = threading.Thread(target=self.run, name=f"looker-{number}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.database.wait()
            if self.stopping.is_set():
                break
            self.stopping.wait(self.turn())

    def turn(self) -> float:
        """Look at what is due; the seconds to wait before the next turn."""
        try:
            with connection_context():
                # The scans the engine's callbacks said it runs first: their moves to running go
                # together in a transaction, between two looks, as the looks' own moves do.
                moved = looks.move_reported_starts()
                claimed = looks.look_due()["claimed"]
                due = None if claimed else looks.next_due()
        except CONNECTION_ERRORS as exc:
            self.database.connection_lost(exc)
            return 0.0
        except Exception as exc:
            failures = getattr(self._failures, "count", 0) + 1
            self._failures.count = failures
            wait = min(MAX_ERROR_WAIT, 2.0 ** (failures - 1))
            log.error("batch look failed (%s); trying again in %.0f s",  # noqa: TRY400 - no row in the log
                      exc.__class__.__name__, wait)
            return wait
        self._failures.count = 0
        if claimed or moved:
            return 0.0 if max(claimed, moved) >= runtime.config["ENGINE_BATCH_SIZE"] else BATCH_LINGER
        if due is None:
            return IDLE_WAIT
        until_due = (due - utcnow()).total_seconds()
        return HELD_WAIT if until_due <= 0 else min(IDLE_WAIT, until_due)
