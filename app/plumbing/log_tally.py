"""Occurrences logged in aggregate: one line per interval and process with their count, for what
can come in floods (forged engine callbacks, and the engine's own: several a scan). Apart from
``app.plumbing.logging_setup``, which reaches Flask for a request's fields, so that services may use it."""
from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import Counter


class Tally:
    """Occurrences counted by reason and logged as one line per ``interval`` seconds and process,
    with their count, never one line each: 50,000 forged engine callbacks wrote 51,520 lines (14 MB)
    and slowed every other call of the process. The first occurrence of an interval starts a timer
    (a daemon thread) that writes the line when the interval ends; a process that exits writes what
    it still holds. Exact counts are the metrics' (``app.plumbing.metrics``): the line says it happened."""

    def __init__(self, logger: logging.Logger, message: str, interval: float = 60.0, level: int = logging.WARNING):
        self.logger, self.message, self.interval, self.level = logger, message, interval, level
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._timer: threading.Timer | None = None
        self._pid = os.getpid()
        atexit.register(self.flush)

    def add(self, reason: str) -> None:
        with self._lock:
            if self._pid != os.getpid():  # a forked worker: its parent's timer did not come along
                self._counts, self._timer, self._pid = Counter(), None, os.getpid()
            self._counts[reason] += 1
            if self._timer is None:
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> dict[str, int]:
        """Write the line of what was counted since the last one (nothing when nothing was) and
        return its counts."""
        with self._lock:
            counts, self._counts = dict(self._counts), Counter()
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if counts:
            self.logger.log(self.level, self.message, sum(counts.values()), self.interval,
                                ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())),
                                extra={"http": {"count": sum(counts.values()), "reasons": counts}})
        return counts
