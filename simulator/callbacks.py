"""The simulated engine's callbacks (E7).

A submission (single or batch item) with ``"callback_url"`` is answered with ``"callbacks": true``
when the simulator has ``ENGINE_CALLBACK_SECRET`` (a ``whsec_`` secret shared with the service);
then, whenever the investigation's status or ``recipes_done`` changes, the simulator POSTs
``{"id", "reference", "status", "recipes_done", "recipes_total"}`` (never the result) to that URL,
signed as Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,...``).
Without the secret it makes no promise and sends nothing.

The changes are known at submission (progress is a function of time, ``progress_at``), so each is
scheduled then and sent when due by a few background threads (``SENDERS``, each keeping its
connection alive, so that tens of thousands of investigations in flight are called back on time):
a request never waits for a callback.
Sending is at most once and best effort, as E7 allows: a receiver's error or silence is counted,
not retried. ``POST /_sim/engine/callbacks {"drop": true}`` drops every callback instead of
sending it (lost callbacks); ``GET /_sim/engine/callbacks`` → ``{"drop", "scheduled", "sent",
"failed", "dropped"}``. A reset (``/_sim/engine/reset``) forgets those scheduled and the counts, and
stops dropping. A deleted investigation's callbacks still scheduled are not sent.
"""
from __future__ import annotations

import heapq
import itertools
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import requests

from app.simulated.conventions import PENDING_FRACTION, Plan, Progress, progress_at
from simulator.receiver import standard_signature

SEND_TIMEOUT_SECONDS = 2.0
# Callbacks sent at a time. One thread opening a connection per callback sent about 40 a second on
# a loaded two-core machine: 25,000 scans in flight announce about 800 changes a second.
SENDERS = 8
COUNT_NAMES = ("sent", "failed", "dropped")


@dataclass(frozen=True)
class Callback:
    engine_id: str
    url: str
    body: dict


def changes(plan: Plan) -> list[tuple[float, Progress]]:
    """``(seconds after submission, progress)`` at each change of status or ``recipes_done``."""
    pending_end = plan.duration_s * PENDING_FRACTION
    span = plan.duration_s - pending_end
    # Where progress_at can change: the end of pending, each recipe's end, the end; a hair later so
    # that the integer arithmetic of progress_at has crossed the boundary.
    moments = [pending_end] + [pending_end + span * k / plan.recipes for k in range(1, plan.recipes)]
    moments.append(plan.duration_s)
    found, last = [], progress_at(plan, 0.0)
    for moment in sorted(moments):
        now = progress_at(plan, moment + 1e-6)
        if now != last:
            found.append((moment, now))
            last = now
    return found


class CallbackSender:
    """The schedule of callbacks and the thread that sends them when due."""

    def __init__(self, secret: str, is_deleted: Callable[[str], bool]) -> None:
        self.secret = secret
        self._is_deleted = is_deleted
        self._due: list[tuple[float, int, Callback]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._drop = False
        self._counts: Counter = Counter()
        self._in_hand = 0  # taken from the schedule, not yet sent, dropped or skipped

    def schedule(self, engine_id: str, reference: str | None, url: str, plan: Plan, created_s: float) -> None:
        with self._wake:
            for after, progress in changes(plan):
                body = {"id": engine_id, "reference": reference, "status": progress.status,
                        "recipes_done": progress.recipes_done, "recipes_total": plan.recipes}
                heapq.heappush(self._due, (created_s + after, next(self._order), Callback(engine_id, url, body)))
            if not self._threads:
                self._threads = [threading.Thread(target=self._run, name=f"sim-callbacks-{i}", daemon=True)
                                 for i in range(SENDERS)]
                for thread in self._threads:
                    thread.start()
            self._wake.notify_all()

    def set_drop(self, drop: bool) -> None:
        with self._wake:
            self._drop = drop

    def state(self) -> dict:
        with self._wake:
            return {"drop": self._drop, "scheduled": len(self._due) + self._in_hand,
                    **{name: self._counts[name] for name in COUNT_NAMES}}

    def reset(self) -> None:
        with self._wake:
            self._due.clear()
            self._drop = False
            self._counts.clear()

    def _run(self) -> None:
        session = requests.Session()  # one kept-alive connection per sender
        while True:
            callback = self._next_due()
            with self._wake:
                dropped = self._drop
            outcome = (None if self._is_deleted(callback.engine_id) else "dropped" if dropped
                       else self._send(callback, session))
            with self._wake:
                self._in_hand -= 1
                if outcome:
                    self._counts[outcome] += 1

    def _next_due(self) -> Callback:
        with self._wake:
            while True:
                now = time.time()
                if self._due and self._due[0][0] <= now:
                    self._in_hand += 1
                    return heapq.heappop(self._due)[2]
                self._wake.wait(timeout=None if not self._due else max(0.0, self._due[0][0] - now))

    def _send(self, callback: Callback, session: requests.Session) -> str:
        raw = json.dumps(callback.body, separators=(",", ":")).encode()
        msg_id, timestamp = f"msg_{secrets.token_hex(12)}", str(int(time.time()))
        headers = {"Content-Type": "application/json", "webhook-id": msg_id, "webhook-timestamp": timestamp,
                   "webhook-signature": standard_signature(self.secret, msg_id, timestamp, raw)}
        try:
            answer = session.post(callback.url, data=raw, headers=headers, timeout=SEND_TIMEOUT_SECONDS,
                                   allow_redirects=False)
        except requests.RequestException:
            return "failed"
        return "sent" if 200 <= answer.status_code < 300 else "failed"
