"""Loaded by every Python process of ``make test-future`` (its PYTHONPATH names this folder).

That run preloads libfaketime (0.9.10) with the monotonic clock left real, and there the
library fails ``clock_nanosleep(TIMER_ABSTIME)`` with EINVAL, which is how ``time.sleep``
waits. ``select()`` waits the same time on the real clock, so it stands in; nothing else
changes, and no other run loads this file.
"""
import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


time.sleep = _sleep
