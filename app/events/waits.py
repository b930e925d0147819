"""Waiting instead of polling (D27): the wake-ups of a read that answers as soon as its scan is
final (its batch all done) and of the event stream, both woken by the stored events' announcements.

The signal: every stored event is announced at its commit (``app.events.statements.stored``, NOTIFY). One
``Hub`` per process holds one LISTEN session (``app.events.statements.signals``) on a thread of its own and
wakes the waiters of the scans, batches and customers an announcement names, so any number of
API hosts serve waits and streams whichever host or worker changed the scan. The stored scans
and events are the truth: a waiter reads again when woken, and when the listener is not
connected at least every ``REREAD_SECONDS`` (announcements made meanwhile are lost), so nothing
is lost, only late. While it is connected no announcement is missed (the listener wakes every
waiter when it loses and when it regains its session), and an un-woken waiter reads again only
every ``QUIET_REREAD_SECONDS``: 2,000 waiters re-reading every 5 s cost 400 reads a second,
nearly half a core of this machine, for nothing.

A waiter is a flag the listener sets, not a thread. In the API's threaded workers a request's
thread sleeps on it; in the held-connection server (``gunicorn.held.conf.py``: gevent, where
nginx sends every ``?wait=`` and the stream) the same code runs on greenlets, so a waiting call
costs a greenlet and a socket, not a thread. For that, the hub and its locks and flags are made
in the process that uses them, after the server made ``threading`` cooperative (a lock made
before, in gunicorn's master, would block the whole process instead of one greenlet). Held
connections are counted per key in Redis (a sorted set of holds with their end times, so a
killed process's holds lapse by themselves): at most ``MAX_HELD``, beyond which a call is
refused with 429 ``rate_limited`` and ``Retry-After``.
"""
from __future__ import annotations

import json
import logging
import math
import os
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from app.events import kinds as events
from app.events.statements import signals
from app.plumbing import runtime
from app.plumbing.db import release_connection
from app.plumbing.errors import InvalidRequest, RateLimited

log = logging.getLogger(__name__)

MAX_HELD = 100           # held connections (waits and streams) per key
REREAD_SECONDS = 5.0     # a waiter reads the truth again at least this often while the listener is away
QUIET_REREAD_SECONDS = 30.0  # ... and this often while it listens (a last safety net)
WAIT_RANGE = (1, 60)     # the seconds a call may ask to wait
KEY_CHECK_SECONDS = 10.0  # a held call asks again this often whether its key may make it (a stream: each heartbeat)
HOLD_MARGIN = 30         # a hold lapses this long after its end when its process did not release it
LISTEN_RETRY_SECONDS = 1.0

T = TypeVar("T")
_SET_LIFE = WAIT_RANGE[1] + HOLD_MARGIN + 1


def scan_topic(scan_id: str) -> str:
    return f"scan:{scan_id}"


def bulk_topic(bulk_id: str) -> str:
    return f"bulk:{bulk_id}"


def feed_topic(customer_id: str, livemode: bool) -> str:
    return f"feed:{customer_id}:{int(livemode)}"


# Kinds that never end a wait on a scan or a batch (their scan is not final after them): such an
# announcement wakes the customer's streams only. A scan's waiters read their scan again when woken,
# so 2,000 waiters woken by their scans' running events read 2,000 scans for nothing.
_NOT_FINAL = frozenset({events.SCAN_RUNNING.name})


def topics_of(payload: str) -> list[str]:
    """The topics an announcement (``app.events.statements.stored.add``'s JSON) wakes: its customer's feed, and
    its scan and batch unless its kind cannot end their waits (one without a kind wakes them)."""
    try:
        note = json.loads(payload)
        topics = [feed_topic(note["c"], bool(note["m"]))]
    except (ValueError, KeyError, TypeError):
        return []
    if note.get("k") in _NOT_FINAL:
        return topics
    if note.get("s"):
        topics.append(scan_topic(note["s"]))
    if note.get("b"):
        topics.append(bulk_topic(note["b"]))
    return topics


class Waiter:
    """What one held call waits on: set by the listener when one of its topics is announced."""

    def __init__(self, topics: tuple[str, ...]):
        self.topics = topics
        self._flag = threading.Event()

    def wake(self) -> None:
        self._flag.set()

    def sleep(self, timeout: float) -> bool:
        """Wait until woken or ``timeout`` seconds passed; whether it was woken."""
        woken = self._flag.wait(max(0.0, timeout))
        self._flag.clear()
        return woken


class Hub:
    """The process's one listener and the waiters it wakes."""

    def __init__(self):
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()

    def subscribe(self, *topics: str) -> Waiter:
        waiter = Waiter(topics)
        with self._lock:
            for topic in topics:
                self._waiters[topic].add(waiter)
        self._start()
        return waiter

    def unsubscribe(self, waiter: Waiter) -> None:
        with self._lock:
            for topic in waiter.topics:
                waiters = self._waiters.get(topic)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[topic]

    def deliver(self, payload: str) -> None:
        with self._lock:
            woken = {w for topic in topics_of(payload) for w in self._waiters.get(topic, ())}
        for waiter in woken:
            waiter.wake()

    def _wake_all(self) -> None:
        with self._lock:
            woken = {w for waiters in self._waiters.values() for w in waiters}
        for waiter in woken:
            waiter.wake()

    def _start(self) -> None:
        """Start the listener on first use, and give it a moment to LISTEN so the first waiter
        is woken by the signal, not the re-read."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._listen, name="event-listener", daemon=True)
        self._thread.start()  # outside the lock: under gevent, start() yields to the new greenlet
        self.listening.wait(2.0)

    def _listen(self) -> None:
        failing = False
        while True:
            session = None
            try:
                session = signals.Listening(runtime.config.get("DATABASE_DIRECT_URL")
                                            or runtime.config["DATABASE_URL"])
                self.listening.set()
                if failing:
                    log.info("event listener connected again")
                failing = False
                self._wake_all()  # what was announced while it was away: the waiters read again
                while True:
                    session.receive(REREAD_SECONDS, self.deliver)
            except Exception as exc:  # a lost session: waiters fall back on their re-reads meanwhile
                if not failing:
                    log.warning("event listener lost its database session (%s); reconnecting",
                                exc.__class__.__name__)
                failing = True
                self.listening.clear()
                self._wake_all()
                time.sleep(LISTEN_RETRY_SECONDS)
            finally:
                if session is not None:
                    session.close()


_hub: Hub | None = None
_hub_lock = threading.Lock()  # held only while a hub is made: never across a greenlet switch


def hub() -> Hub:
    """This process's hub, made on first use in it (a forked worker makes its own)."""
    global _hub
    current = _hub
    if current is None or current.pid != os.getpid():
        with _hub_lock:
            if _hub is None or _hub.pid != os.getpid():
                _hub = Hub()
            current = _hub
    return current


def subscribe(*topics: str) -> Waiter:
    return hub().subscribe(*topics)


def unsubscribe(waiter: Waiter) -> None:
    hub().unsubscribe(waiter)


def wait_until(waiter: Waiter, seconds: float, read: Callable[[], T], done: Callable[[T], bool], first: T,
               allowed: Callable[[], bool] = lambda: True) -> T:
    """``first`` if ``done`` already, else what ``read`` gives once it is ``done`` or ``seconds``
    have passed (read again when woken, at the end, and as ``reread_due`` says). ``waiter``
    must have been subscribed before ``first`` was read, so no change falls between them.

    ``allowed``: whether the call's key may still read (``pipeline.still_allowed``), asked every
    ``KEY_CHECK_SECONDS`` and after each read again, before its body is kept: once it says no,
    the wait ends with the last body read while it said yes, so nothing that changed after a
    key was revoked, expired or narrowed reaches the call."""
    deadline = time.monotonic() + seconds
    body, read_at = first, time.monotonic()
    checked_at = read_at
    while not done(body):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        release_connection()  # none held while asleep: a pool serves many waiters
        woken = waiter.sleep(min(left, REREAD_SECONDS, max(0.0, checked_at + KEY_CHECK_SECONDS - time.monotonic())))
        if time.monotonic() - checked_at >= KEY_CHECK_SECONDS:
            if not allowed():
                break
            checked_at = time.monotonic()
        if woken or time.monotonic() >= deadline or reread_due(read_at):  # at the end: the state then
            fresh, read_at = read(), time.monotonic()
            if not allowed():  # asked after the read: the key could still see what it read
                break
            body, checked_at = fresh, time.monotonic()
    return body


def reread_due(read_at: float) -> bool:
    """Whether a waiter not woken since it read (at monotonic ``read_at``) should read again: at
    once while the listener is away, after ``QUIET_REREAD_SECONDS`` while it listens."""
    return not hub().listening.is_set() or time.monotonic() - read_at >= QUIET_REREAD_SECONDS


# --- held connections per key ----------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    name: str   # the key's Redis set of holds
    token: str  # this hold's member


def _holds_name(key_id: str) -> str:
    return f"scan-api:held:{key_id}"


def hold(key_id: str, seconds: float) -> Held:
    """Count one more held connection of the key for ``seconds``; ``RateLimited`` (429) when it
    holds ``MAX_HELD`` already (nothing is counted then)."""
    redis = runtime.redis()
    name, token, now = _holds_name(key_id), secrets.token_hex(8), time.time()
    pipe = redis.pipeline()
    pipe.zremrangebyscore(name, "-inf", now)
    pipe.zadd(name, {token: now + seconds + HOLD_MARGIN})
    pipe.zcard(name)
    pipe.expire(name, _SET_LIFE)  # the longest a hold lasts unextended: a dead process's set goes
    _, _, count, _ = pipe.execute()
    if count > MAX_HELD:
        redis.zrem(name, token)
        soonest = redis.zrange(name, 0, 0, withscores=True)
        ends = soonest[0][1] - HOLD_MARGIN if soonest else now + 1
        raise RateLimited("rate_limited", f"this key already holds {MAX_HELD} waiting calls or streams; close one "
                                          "or wait without holding", retry_after=max(1, math.ceil(ends - now)))
    return Held(name, token)


def extend(held: Held, seconds: float) -> None:
    """A stream's hold goes on for ``seconds`` more (one round trip: every stream does it at each
    heartbeat)."""
    pipe = runtime.redis().pipeline(transaction=False)
    pipe.zadd(held.name, {held.token: time.time() + seconds + HOLD_MARGIN}, xx=True)
    pipe.expire(held.name, max(_SET_LIFE, math.ceil(seconds + HOLD_MARGIN) + 1))
    pipe.execute()


def release(held: Held) -> None:
    try:
        runtime.redis().zrem(held.name, held.token)
    except Exception as exc:  # it lapses by itself (HOLD_MARGIN after its end)
        log.warning("could not release a held connection's count: %s", exc.__class__.__name__)


def parse_wait(text: str) -> int:
    """The seconds a call asked to wait (``?wait=`` on reads and creations alike): a whole number
    of ``WAIT_RANGE`` in ASCII digits only (no sign, space or other script's digits, which
    ``int`` would take); ``InvalidRequest`` otherwise."""
    low, high = WAIT_RANGE
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= len(str(high))
            and low <= int(text) <= high):
        raise InvalidRequest(f"wait must be a whole number of seconds from {low} to {high}",
                             details={"wait": [f"must be a whole number from {low} to {high}"]})
    return int(text)
