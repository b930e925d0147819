"""Progress of a wait: a tqdm bar on a terminal, a plain line per change (and every 30 s) otherwise,
so that logs and CI output stay readable."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from scan_api_client.models import Batch, Scan

STATES = ("queued", "running", "completed", "failed")
PLAIN_EVERY_SECONDS = 30.0


def counts(state: Scan | Batch) -> dict[str, int]:
    if isinstance(state, Batch):
        return {name: int(getattr(state, name) or 0) for name in STATES}
    return {name: int(state.status == name) for name in STATES}


class ProgressBar:
    def __init__(self, stream: TextIO, label: str, clock: Callable[[], float] | None = None):
        self.stream, self.label = stream, label
        self.clock = clock or time.monotonic
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.start = self.clock()
        self.last_line: str | None = None
        self.last_at: float | None = None
        self.bar: tqdm | None = None

    def update(self, state: Scan | Batch) -> None:
        now = self.clock()
        by_state = counts(state)
        total = sum(by_state.values())
        done = by_state["completed"] + by_state["failed"]
        detail = "  ".join(f"{name} {by_state[name]}" for name in STATES)
        progress = getattr(state, "progress", None)
        if progress is not None and progress.recipes_total:
            detail += f"  (recipes {progress.recipes_done}/{progress.recipes_total})"
        if self.tty:
            if self.bar is None:
                self.bar = tqdm(total=total, desc=self.label, file=self.stream, unit="scan", leave=True,
                                dynamic_ncols=True,
                                bar_format="{desc} {bar:24} {n_fmt}/{total_fmt}{postfix}  {elapsed}")
            if self.bar.total != total:
                self.bar.total = total
            self.bar.n = done
            self.bar.set_postfix_str(detail, refresh=False)
            self.bar.refresh()
            return
        if detail != self.last_line or self.last_at is None or now - self.last_at >= PLAIN_EVERY_SECONDS:
            elapsed = max(0, int(now - self.start))
            self.stream.write(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {self.label}: {detail}  "
                              f"({done}/{total} done)\n")
            self.stream.flush()
            self.last_line, self.last_at = detail, now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
