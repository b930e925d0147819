"""The statements of the engine's callbacks (E7): a final callback taken makes its scan due at once,
a progress callback records the progress it carries (and when the engine started a queued scan),
and the callback ids taken are remembered until a replay of them would be refused anyway (stale).

Which statuses are in flight, how long an id is kept and what "now" is are the services' rules
(``app.tracking.callbacks``), passed in here.

``take`` and ``progress`` are one round trip each, called outside a transaction: the statements of
one query string run as one implicit transaction, committed before the answer comes back (so a
callback is still answered only once what it did is committed), and their ``SET LOCAL`` settings
end with it (nothing outlives it, as D19 wants behind a pooler in transaction mode). ``BEGIN``,
the statement and ``COMMIT`` as three round trips were most of a callback's CPU in the API
(each one a send, a wait and a wake-up of its thread). Called inside a transaction, they are
part of it.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from peewee import OperationalError

from app.plumbing.db import execute, in_list, sqlstate, table
from app.scans.models import EngineCallback, Scan

LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE of a lock_timeout


class Busy(Exception):
    """The scan was held (by a look's claim) past the lock timeout; the statement changed nothing."""

# One statement, so that the id is remembered exactly when the callback took effect:
# - ``seen``: the id, unless it was taken before (then nothing else happens: a replay);
# - ``due``: the scan in flight with this engine id, when a batch look tracks it (``next_look_at``
#   set; a chain's scan is left alone): due now, or as early as it was. The partial index by
#   engine id finds it.
# The UPDATE writes a scan due already too: if a look holds it (its claim's row lock), the look
# may have asked the engine before the change this callback announces, and will put the next
# look back to its cadence; waiting for the lock, the UPDATE then sees the look's row and makes
# it due again. (Skipping a scan due already lost exactly that change: the last callback of a
# scan, arriving during the look its previous callback caused.)
# ``lock_timeout``: a look finishes within the engine's status timeout; the callback waits for it
# at most this long, then fails as a whole (the engine's retry finds the id not taken).
# ``synchronous_commit off``: a crash may lose the last moment's ids (a replay of one then makes
# a scan due once more, harmless) and due times (looks are the safety net); a callback need not
# wait for the disk.
TAKE = f"""
SET LOCAL lock_timeout = %d; SET LOCAL synchronous_commit = off;
WITH seen AS (
    INSERT INTO {table(EngineCallback)} (id, until) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING 1
), due AS (
    UPDATE {table(Scan)} SET next_look_at = LEAST(next_look_at, ?)
    WHERE engine_id = ? AND engine_id IS NOT NULL AND status IN %s AND next_look_at IS NOT NULL
      AND EXISTS (SELECT 1 FROM seen)
    RETURNING 1
)
SELECT (SELECT count(*) FROM seen), (SELECT count(*) FROM due)"""


# A progress callback (the investigation pending or running) records what it says, without a look:
# the engine calls back at every change (about nine times a scan), and a look for each made a scan
# cost six looks where one reads its result. Progress only grows (callbacks come in any order).
# A callback that says a queued scan runs does not move it: it records when (``engine_started_at``,
# the first time said), and the lookers move such scans to running with their ``scan.running``
# events, several to a durable transaction (``MOVE_REPORTED_STARTS``). Moved here, each scan's move
# was a durable transaction of its own in the API with its event's body built there: half of the
# API's CPU for callbacks (docs/performance.md, round 13). So every progress callback is this one
# round trip. Same row-lock wait and replay memory as ``TAKE``.
PROGRESS = f"""
SET LOCAL lock_timeout = %d; SET LOCAL synchronous_commit = off;
WITH seen AS (
    INSERT INTO {table(EngineCallback)} (id, until) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING 1
), recorded AS (
    UPDATE {table(Scan)} AS s SET recipes_total = COALESCE(?, s.recipes_total),
           recipes_done = GREATEST(s.recipes_done, COALESCE(?, s.recipes_done)),
           engine_started_at = CASE WHEN ? AND s.status = ? THEN COALESCE(s.engine_started_at, ?)
                                    ELSE s.engine_started_at END
    FROM {table(Scan)} AS was
    WHERE was.id = s.id AND s.engine_id = ? AND s.engine_id IS NOT NULL AND s.status IN %s
      AND s.next_look_at IS NOT NULL AND EXISTS (SELECT 1 FROM seen)
    RETURNING (? AND s.status = ? AND was.engine_started_at IS NULL) AS reported
)
SELECT (SELECT count(*) FROM seen), EXISTS (SELECT 1 FROM recorded WHERE reported)"""


def _run(sql: str, params: tuple):
    """Run a callback's statement; a row lock held past its ``lock_timeout`` is ``Busy``."""
    try:
        return execute(sql, params)
    except OperationalError as exc:
        if sqlstate(exc) == LOCK_NOT_AVAILABLE:
            raise Busy() from None
        raise


def take(callback_id: str, *, until: datetime, engine_id: str, statuses: Sequence[str], now: datetime,
         lock_timeout_ms: int) -> tuple[bool, bool]:
    """Remember ``callback_id`` (kept ``until``) and make the scan in one of ``statuses`` with
    ``engine_id`` due by ``now``, after any look holding it: ``(new id, a scan made due)``. One
    round trip, committed when it returns if called outside a transaction (see the module)."""
    sql = TAKE % (max(1, lock_timeout_ms), in_list(statuses))
    row = _run(sql, (callback_id, until, now, engine_id, *statuses)).fetchone()
    return bool(row[0]), bool(row[1])


def progress(callback_id: str, *, until: datetime, engine_id: str, statuses: Sequence[str], running: bool,
             recipes_total: int | None, recipes_done: int | None, queued: str, now: datetime,
             lock_timeout_ms: int) -> tuple[bool, bool]:
    """Remember ``callback_id`` and record the progress on the scan in one of ``statuses`` with
    ``engine_id``; when ``running`` and the scan is ``queued``, record that the engine runs it
    since ``now`` (unless said before), for the lookers to move it. Returns ``(new id, a queued
    scan reported running for the first time)``. One round trip, committed when it returns if
    called outside a transaction (see the module)."""
    sql = PROGRESS % (max(1, lock_timeout_ms), in_list(statuses))
    params = (callback_id, until, recipes_total, recipes_done, running, queued, now, engine_id, *statuses,
              running, queued)
    row = _run(sql, params).fetchone()
    return bool(row[0]), bool(row[1])


def forget_expired(now: datetime) -> int:
    """Remove the ids kept until before ``now``: the rows removed."""
    return execute(f"DELETE FROM {table(EngineCallback)} WHERE until < ?", (now,)).rowcount
