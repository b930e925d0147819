"""The engine's callbacks (E7): a signed call that says an investigation changed, so that its scan
is looked at as soon as it is finished rather than at its next due look.

A callback carries no result. One that says the investigation is finished (or anything but
pending or running) makes the scan due (``next_look_at`` = now, when a batch look tracks it and
its look was later; after the look in progress, if one holds it), and the look reads the
engine's answer as any look does. One that says it is pending or running records the progress
it carries (and, for a queued scan the engine runs, when it started: the lookers move it to
``running`` with its event, ``app.tracking.looks.move_reported_starts``) and causes no look:
the engine calls back at every change, and one look a scan is what reading its result needs.
Looks stay the safety net: a lost callback delays a scan to its next look, never loses it.

Cheap to refuse: everything a forger can send is refused before the database is touched, with
constant, small work (a bounded body, the headers, one HMAC), so a flood of bogus callbacks costs
the database nothing; and the log next to nothing: a refusal before the signature is verified is
counted (``scan_api_engine_callbacks_refused_total``, by reason) and written as one line a minute
per process with the count (``REFUSALS``), never one line each (the view leaves out its request
line); so are the callbacks taken (``TAKEN_LINES``), which come at every change of every scan. A
well signed callback costs one statement (``app.tracking.statements.engine_callbacks.take``, ``progress``:
one round trip, which commits on its own) that remembers its ``webhook-id`` (a replay within the
5 minutes a signature is accepted for is refused) and makes its scan due or records its progress.
An unknown engine id is accepted like a known one: the answer tells no caller which ids exist.
Nothing about the target, nor the engine id (an engine's id may encode its target), is logged.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from app.plumbing import metrics, runtime
from app.plumbing.errors import CallbackRefused, CallbackReplayed, InvalidRequest, PayloadTooLarge, TryAgain
from app.plumbing.log_tally import Tally
from app.plumbing.models import utcnow
from app.plumbing.signatures import (
    ID_HEADER,
    STANDARD_SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    verify_standard,
)
from app.scans.models import IN_FLIGHT, QUEUED
from app.tracking.statements import engine_callbacks

# E7's body is five short fields; an engine id is at most 2,000 characters (as stored).
MAX_BODY_BYTES = 4096
MAX_ENGINE_ID = 2000
MAX_CALLBACK_ID = 200  # a webhook-id longer than this is refused before its signature is checked
# How long a callback waits for a look that holds its scan before asking the engine to retry.
LOCK_TIMEOUT_MS = 1000
RETRY_AFTER_SECONDS = 1

TAKEN, UNCHANGED = "taken", "unchanged"
# Why a callback was refused before its signature was verified: the metric's labels, the line's words.
REFUSAL_REASONS = ("too_large", "unsigned", "not_configured", "malformed", "stale", "bad_signature")
REFUSED = (CallbackRefused, PayloadTooLarge)  # what REFUSALS counts: all a forger can cause
REFUSALS = Tally(logging.getLogger(__name__), "%d engine callbacks refused in the last %.0f s (%s)")
# The engine calls back at every change of every investigation (about nine a scan): a line each was
# the busiest line of the log and a fifth of a callback's CPU. One line a minute per process says
# how many were taken, by what they said; their exact counts are the HTTP metrics'.
TAKEN_LINES = Tally(logging.getLogger(__name__), "%d engine callbacks taken in the last %.0f s (%s)",
                    level=logging.INFO)
UNFINISHED = ("pending", "running")  # the engine's statuses of an investigation still going on


def receive(raw_body: bytes, headers: Mapping[str, str]) -> str:
    """Verify the callback ``raw_body`` with its ``headers`` and make its scan due: ``taken`` (the
    scan is due now, or was already, after any look holding it) or ``unchanged`` (an unknown id,
    or a scan no batch look tracks), both answered alike. Raises ``CallbackRefused`` (unsigned,
    wrongly signed, stale), ``PayloadTooLarge``, ``InvalidRequest`` (not E7's body), ``CallbackReplayed``
    and ``TryAgain``; none changes anything."""
    moment = utcnow()
    now = moment.replace(tzinfo=UTC).timestamp()
    callback_id, timestamp = _verify(raw_body, headers, now)
    body = _body(raw_body)
    until = datetime.fromtimestamp(timestamp + TOLERANCE_SECONDS, UTC).replace(tzinfo=None)
    unfinished = body.get("status") in UNFINISHED
    try:
        # Outside a transaction: each statement is its own, one round trip (store's module).
        if unfinished:
            new, taken = _progress(callback_id, body, until=until, now=moment)
        else:
            new, taken = engine_callbacks.take(callback_id, until=until, engine_id=body["id"],
                                               statuses=IN_FLIGHT, now=moment, lock_timeout_ms=LOCK_TIMEOUT_MS)
    except engine_callbacks.Busy:
        raise TryAgain("the scan is being looked at; send the callback again shortly",
                       retry_after=RETRY_AFTER_SECONDS) from None
    if not new:
        raise CallbackReplayed("this callback was received before (same webhook-id)")
    TAKEN_LINES.add("progress" if unfinished else "final")
    return TAKEN if taken else UNCHANGED


def _progress(callback_id: str, body: dict, *, until: datetime, now: datetime) -> tuple[bool, bool]:
    """Record a progress callback's ``body`` in one statement that commits on its own: ``(new id,
    a queued scan reported running for the first time)``. The lookers move such a scan to
    running, with its event (``looks.move_reported_starts``)."""
    counts = {"recipes_total": _count(body.get("recipes_total")), "recipes_done": _count(body.get("recipes_done"))}
    return engine_callbacks.progress(callback_id, until=until, engine_id=body["id"], statuses=IN_FLIGHT,
                                     running=body["status"] == "running", queued=QUEUED, now=now,
                                     lock_timeout_ms=LOCK_TIMEOUT_MS, **counts)


def _count(value) -> int | None:
    """A recipe count of the body, when it is one (a count the engine got wrong is not recorded)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else None


def check_size(length: int | None) -> None:
    """Refuse a body over ``MAX_BODY_BYTES`` (413) before it is read, when its length is announced."""
    if length is not None and length > MAX_BODY_BYTES:
        raise _refused("too_large", PayloadTooLarge(f"the callback body is larger than {MAX_BODY_BYTES} bytes"))


def _refused(reason: str, error: CallbackRefused | PayloadTooLarge):
    """``error``, counted by ``reason`` and left to the minute's line."""
    metrics.count_callback_refused(reason)
    REFUSALS.add(reason)
    return error


def _verify(raw_body: bytes, headers: Mapping[str, str], now: float) -> tuple[str, int]:
    """The callback's id and timestamp once its signature is verified; no database, no I/O."""
    check_size(len(raw_body))
    secret = runtime.config.get("ENGINE_CALLBACK_SECRET")
    callback_id, timestamp = _header(headers, ID_HEADER), _header(headers, TIMESTAMP_HEADER)
    if not (callback_id and timestamp and _header(headers, STANDARD_SIGNATURE_HEADER)):
        raise _refused("unsigned", CallbackRefused(
            "the callback is not signed: webhook-id, webhook-timestamp and webhook-signature are required"))
    if not secret:
        raise _refused("not_configured", CallbackRefused(
            "this service takes no engine callbacks (no ENGINE_CALLBACK_SECRET is set)"))
    if len(callback_id) > MAX_CALLBACK_ID or not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise _refused("malformed", CallbackRefused("the callback's webhook-id or webhook-timestamp is malformed"))
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise _refused("stale", CallbackRefused(
            f"the callback's webhook-timestamp is more than {TOLERANCE_SECONDS // 60} minutes away from now"))
    if not verify_standard(secret, raw_body, headers, now=now):
        raise _refused("bad_signature", CallbackRefused("the callback's webhook-signature does not match"))
    return callback_id, int(timestamp)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value if isinstance(value, str) else None


def _body(raw_body: bytes) -> dict:
    """E7's body with its engine id checked. Its status decides only whether a look is due (any
    status but pending or running, a missing one included, makes one: the look reads the truth);
    a progress callback's counts are checked where they are used."""
    try:
        body = json.loads(raw_body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("the callback body is not valid JSON") from None
    engine_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(engine_id, str) or not engine_id or len(engine_id) > MAX_ENGINE_ID or "\x00" in engine_id:
        raise InvalidRequest("the callback body must be a JSON object with the investigation's id")
    return body


def forget_expired() -> dict:
    """The periodic job: the callback ids past the time a replay of them would be refused as stale
    anyway are forgotten."""
    return {"callback_ids_forgotten": engine_callbacks.forget_expired(utcnow())}
