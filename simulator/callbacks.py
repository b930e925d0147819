"""The simulated engine's callbacks (E7).

A submission (single or batch item) with ``"callback_url"`` is answered with ``"callbacks": true``
when the simulator has ``ENGINE_CALLBACK_SECRET`` (a ``whsec_`` secret shared with the service);
then, whenever the investigation's status or ``recipes_done`` changes, the simulator POSTs
``{"id", "reference", "status", "recipes_done", "recipes_total"}`` (never the result) to that URL,
signed as Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,...``).
Without the secret it makes no promise and sends nothing.

Progress is a function of time (``progress_at``), so the moments of change are known at submission
(``changes``). The schedule holds two entries per investigation at most: the moment of its next
progress, and the moment of its final. Several sender threads (``SIM_CALLBACK_SENDERS``, default 8)
take the entries due, a due final before any progress, else oldest first; a request never waits for
a callback. A sender that takes an entry sends the investigation's state as of now (what a look
would answer then), then schedules the investigation's next progress after that one, if any before
the final; once the final is sent, the other entry is dropped unsent. Why several: one sender sent about 64 callbacks a second, and a receiver slow to answer (or
silent until the timeout) held every other receiver's callbacks behind it; with several, it holds
only the sender sending to it. Why the newest only: a sender that is behind (a 100,000-scan benchmark
kept 895,925 callbacks waiting when there was one entry per change) would otherwise send progress
already out of date, and a scan's "done" waited behind its own stale "running"s; a behind sender
sends the newest state once, and the changes it skipped are counted ``superseded``. On time, every
change is sent, in order. Behind, a final never waits for its progress: it has its own entry. Two
entries at most per investigation also keep 100,000 investigations in about 200,000 entries. Each sender keeps its own HTTP session, so a receiver sees one kept-alive
connection per sender rather than one connection per callback.

Sending is best effort, as E7 allows: a receiver's error or silence is counted, not retried, except
an answer that asks for a retry (503 or 429, the service's "a look holds the scan, send it again
shortly"), sent again after its ``Retry-After``, and no answer within ``SEND_TIMEOUT_SECONDS``
(or no connection), sent again after a second (at most ``RETRIES`` times, then counted failed):
E7's callbacks are at least once, and without that a "done" refused while a slow look held its
scan was lost until the look one poll after the eta (the end-to-end test's rare failure). A retry
sends the newest state at the time of the retry. ``POST /_sim/engine/callbacks {"drop": true}``
drops every callback instead of sending it (lost callbacks); ``GET /_sim/engine/callbacks`` →
``{"drop", "scheduled", "sent", "failed", "dropped", "retried", "superseded"}`` (``scheduled``: the
investigations with a callback still to send, those in a sender's hands included). A reset
(``/_sim/engine/reset``) forgets those scheduled and the counts, and stops dropping. A deleted
investigation is not sent again.
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable

import requests

from app.tracking.simulated.conventions import PENDING_FRACTION, Plan, Progress, progress_at
from simulator.receiver import standard_signature

log = logging.getLogger(__name__)

SEND_TIMEOUT_SECONDS = 2.0
COUNT_NAMES = ("sent", "failed", "dropped", "retried", "superseded")
RETRIES = 5
RETRY_STATUSES = (429, 503)
DEFAULT_SENDERS = 8
# progress_at's boundaries come from float arithmetic: a clock read at a change's due moment can be a
# hair short of it, and would send the state before the change again.
HAIR_S = 1e-6


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
        now = progress_at(plan, moment + HAIR_S)
        if now != last:
            found.append((moment, now))
            last = now
    return found


class _Investigation:
    """An investigation's one entry in the schedule. ``next`` is the index (in ``changes(plan)``) of
    its first change neither sent nor superseded yet; the changes are computed again when needed
    rather than kept, so that an entry stays small."""

    __slots__ = ("attempt", "closed", "created_s", "engine_id", "epoch", "next", "plan", "reference", "url")

    def __init__(self, engine_id: str, reference: str | None, url: str, plan: Plan, created_s: float,
                 epoch: int) -> None:
        self.engine_id, self.reference, self.url, self.plan = engine_id, reference, url, plan
        self.created_s, self.epoch = created_s, epoch
        self.next = self.attempt = 0
        self.closed = False  # its final sent (or failed, dropped), or the investigation deleted


class CallbackSender:
    """The schedule of callbacks (two entries per investigation at most: its next progress and its
    final) and the threads that send them."""

    def __init__(self, secret: str, is_deleted: Callable[[str], bool], senders: int = DEFAULT_SENDERS) -> None:
        if senders < 1:
            raise ValueError(f"at least one callback sender, not {senders}")
        self.secret = secret
        self.senders = senders
        self._is_deleted = is_deleted
        # Two schedules: every investigation's final (an entry of its own from the submission on), and
        # its next progress. Senders take a due final first, and a final never waits for the progress
        # before it: behind, a final waited in its investigation's one entry for every progress due
        # before it (the scale phase's finals came no sooner than the looks one poll past the eta),
        # and a final is what the service waits for. Whichever entry sends the final, the other is
        # then dropped unsent.
        self._finals: list[tuple[float, int, _Investigation]] = []
        self._due: list[tuple[float, int, _Investigation]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._drop = False
        self._counts: Counter = Counter()
        self._in_hand: list[_Investigation] = []  # taken by senders, not yet back or done with
        self._open = 0  # investigations with a callback still to send ("scheduled")
        # A reset forgets what senders hold too: what they took before it is neither counted nor
        # scheduled again when they are done with it.
        self._epoch = 0

    def schedule(self, engine_id: str, reference: str | None, url: str, plan: Plan, created_s: float) -> None:
        found = changes(plan)
        if not found:  # nothing will ever change (no plan is so, but then nothing to say)
            return
        with self._wake:
            investigation = _Investigation(engine_id, reference, url, plan, created_s, self._epoch)
            self._open += 1
            self._push(created_s + found[0][0], investigation)
            if len(found) > 1:  # its final is due then whatever its progress waits for (see _finals)
                heapq.heappush(self._finals, (created_s + found[-1][0], next(self._order), investigation))
            if not self._threads:
                self._threads = [threading.Thread(target=self._run, name=f"sim-callbacks-{n}", daemon=True)
                                 for n in range(self.senders)]
                for thread in self._threads:
                    thread.start()

    def set_drop(self, drop: bool) -> None:
        with self._wake:
            self._drop = drop

    def state(self) -> dict:
        with self._wake:
            return {"drop": self._drop, "scheduled": self._open,
                    **{name: self._counts[name] for name in COUNT_NAMES}}

    def reset(self) -> None:
        with self._wake:
            self._due.clear()
            self._finals.clear()
            self._drop = False
            self._counts.clear()
            self._in_hand.clear()
            self._open = 0
            self._epoch += 1

    def _close(self, investigation: _Investigation) -> None:
        """Under ``_wake``: the investigation has no callback left to send (counted once)."""
        if not investigation.closed:
            investigation.closed = True
            self._open -= 1

    def _push(self, due: float, investigation: _Investigation) -> None:
        """Schedule (under ``_wake``), with the finals when its next change is its last; wakes a
        sender, which may have to wait less now."""
        final = investigation.next == len(changes(investigation.plan)) - 1
        heapq.heappush(self._finals if final else self._due, (due, next(self._order), investigation))
        self._wake.notify()

    def _run(self) -> None:
        session = requests.Session()  # this sender's own: its connections are kept alive and reused
        while True:
            investigation = self._next_due()
            try:
                self._take(session, investigation)
            except Exception:  # a sender must not die of one callback: counted failed, the investigation forgotten
                log.exception("callback for %s", investigation.engine_id)
                self._done(investigation, "failed", investigation.next, [])

    def _take(self, session: requests.Session, investigation: _Investigation) -> None:
        """Send the investigation's progress as of now, if it still exists and its final was not sent."""
        found = changes(investigation.plan)
        if investigation.next >= len(found) or self._is_deleted(investigation.engine_id):
            self._done(investigation, None, investigation.next, [])  # its other entry sent the final
            return
        # As of now, and at least the change it was due for (see HAIR_S).
        elapsed = max(time.time() - investigation.created_s, found[investigation.next][0] + HAIR_S)
        progress = progress_at(investigation.plan, elapsed)
        index = next((i for i in range(len(found) - 1, investigation.next - 1, -1) if found[i][1] == progress),
                     investigation.next)
        with self._wake:
            dropped = self._drop
        body = {"id": investigation.engine_id, "reference": investigation.reference, "status": progress.status,
                "recipes_done": progress.recipes_done, "recipes_total": investigation.plan.recipes}
        outcome = "dropped" if dropped else self._send(session, investigation, body)
        self._done(investigation, outcome, index, found)

    def _done(self, investigation: _Investigation, outcome: str | float | None, index: int,
              found: list[tuple[float, Progress]]) -> None:
        """Count ``outcome`` for the change at ``index`` and schedule what comes next: the same
        investigation again after a retry's delay, else its change after ``index`` (none after the last)."""
        with self._wake:
            if investigation.epoch != self._epoch:  # forgotten by a reset while in a sender's hands
                return
            self._in_hand.remove(investigation)
            self._wake.notify()  # its other entry, held back meanwhile, may be due
            if outcome is None:  # deleted, or finished by its other entry: forgotten
                self._close(investigation)
                return
            if isinstance(outcome, float):  # asked to retry after that many seconds: due again then
                investigation.attempt += 1
                self._counts["retried"] += 1
                self._push(time.time() + outcome, investigation)
                return
            self._counts[outcome] += 1
            self._counts["superseded"] += index - investigation.next
            investigation.next, investigation.attempt = index + 1, 0
            if investigation.next >= len(changes(investigation.plan)):
                self._close(investigation)
            # The next progress, if any before the final: the final has its own entry already.
            if investigation.next < len(found) - 1:
                self._push(investigation.created_s + found[investigation.next][0], investigation)

    def _next_due(self) -> _Investigation:
        with self._wake:
            while True:
                now = time.time()
                heads = []
                for schedule in (self._finals, self._due):  # a due final first
                    taken = self._take_due(schedule, now)
                    if isinstance(taken, _Investigation):
                        self._in_hand.append(taken)
                        self._wake.notify()  # another sender may find the next due at once
                        return taken
                    if taken is not None:
                        heads.append(taken)
                # Nothing to take now: until the earliest entry due, or until a sender is done.
                self._wake.wait(timeout=max(0.0, min(heads) - now) if heads else None)

    def _take_due(self, schedule: list, now: float) -> _Investigation | float | None:
        """Under ``_wake``: pop the earliest entry of ``schedule`` due by ``now`` whose investigation
        no sender holds, else the due time of the earliest such entry (None: there is none). One
        sender at a time per investigation: a receiver that does not answer holds only the sender
        sending to it, not a second one with its final's entry too."""
        held = []
        try:
            while schedule:
                due, _, investigation = schedule[0]
                if any(investigation is busy for busy in self._in_hand):
                    held.append(heapq.heappop(schedule))
                    continue
                if due <= now:
                    heapq.heappop(schedule)
                    return investigation
                return due
            return None
        finally:
            for entry in held:
                heapq.heappush(schedule, entry)

    def _send(self, session: requests.Session, investigation: _Investigation, body: dict) -> str | float:
        """``sent``, ``failed``, or the seconds after which to send it again (a retry asked for)."""
        raw = json.dumps(body, separators=(",", ":")).encode()
        msg_id, timestamp = f"msg_{secrets.token_hex(12)}", str(int(time.time()))
        headers = {"Content-Type": "application/json", "webhook-id": msg_id, "webhook-timestamp": timestamp,
                   "webhook-signature": standard_signature(self.secret, msg_id, timestamp, raw)}
        try:
            answer = session.post(investigation.url, data=raw, headers=headers, timeout=SEND_TIMEOUT_SECONDS,
                                  allow_redirects=False)
        except requests.RequestException:  # no answer in time (a receiver held up): sent again too
            return 1.0 if investigation.attempt < RETRIES else "failed"
        if answer.status_code in RETRY_STATUSES and investigation.attempt < RETRIES:
            retry_after = answer.headers.get("Retry-After", "")
            return float(min(30, int(retry_after))) if retry_after.isdigit() else 1.0
        return "sent" if 200 <= answer.status_code < 300 else "failed"
