"""The statements of the engine's callbacks (E7): a final callback taken makes its scan due at once,
a progress callback records the progress it carries, and the callback ids taken are remembered
until a replay of them would be refused anyway (stale).

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

from app.plumbing.db import columns, execute, in_list, instance, sqlstate, table
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
# This statement never moves a scan: a callback that would move a queued scan to running
# (``starting``; once a scan, its first) changes nothing here and says so, and the caller runs
# ``START`` in a transaction of its own, which writes the ``scan.running`` event with the move.
# Any other (seven of a scan's nine) is this one round trip. ``NOT (running AND queued)`` holds
# after the row lock too (a scan never goes back to queued). Same row-lock wait and replay memory
# as ``TAKE``.
PROGRESS = f"""
SET LOCAL lock_timeout = %d; SET LOCAL synchronous_commit = off;
WITH starting AS (
    SELECT 1 FROM {table(Scan)}
    WHERE ? AND engine_id = ? AND engine_id IS NOT NULL AND status = ? AND next_look_at IS NOT NULL
), seen AS (
    INSERT INTO {table(EngineCallback)} (id, until) SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM starting)
    ON CONFLICT (id) DO NOTHING RETURNING 1
), recorded AS (
    UPDATE {table(Scan)} SET recipes_total = COALESCE(?, recipes_total),
           recipes_done = GREATEST(recipes_done, COALESCE(?, recipes_done))
    WHERE engine_id = ? AND engine_id IS NOT NULL AND status IN %s AND next_look_at IS NOT NULL
      AND NOT (? AND status = ?) AND EXISTS (SELECT 1 FROM seen)
)
SELECT (SELECT count(*) FROM seen), EXISTS (SELECT 1 FROM starting)"""


# A progress callback that moves its queued scan to running (``PROGRESS`` said it would):
# records its progress as ``PROGRESS`` does, and a queued scan the engine runs becomes ``running``
# here, and says so (``was`` is the row as the statement found it) so that its ``scan.running``
# event is written in the same transaction. Same row-lock wait and replay memory as ``TAKE``, but
# its transaction commits durably (the session's default): the move's event is to be delivered, and
# a crash may not forget it. (It was turned off here and on again by a round trip of its own.)
START = f"""
SET LOCAL lock_timeout = %d;
WITH seen AS (
    INSERT INTO {table(EngineCallback)} (id, until) VALUES (?, ?) ON CONFLICT (id) DO NOTHING RETURNING 1
), moved AS (
    UPDATE {table(Scan)} AS s SET recipes_total = COALESCE(?, s.recipes_total),
           recipes_done = GREATEST(s.recipes_done, COALESCE(?, s.recipes_done)),
           status = CASE WHEN ? AND s.status = ? THEN ? ELSE s.status END,
           started_at = CASE WHEN ? AND s.status = ? THEN ? ELSE s.started_at END
    FROM {table(Scan)} AS was
    WHERE was.id = s.id AND s.engine_id = ? AND s.engine_id IS NOT NULL AND s.status IN %s
      AND s.next_look_at IS NOT NULL AND EXISTS (SELECT 1 FROM seen)
    RETURNING (? AND was.status = ?) AS now_running, {columns(Scan, "s")}
)
SELECT (SELECT count(*) FROM seen), moved.* FROM (SELECT 1) AS one LEFT JOIN moved ON true"""


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
             recipes_total: int | None, recipes_done: int | None, queued: str,
             lock_timeout_ms: int) -> tuple[bool, bool]:
    """Remember ``callback_id`` and record the progress on the scan in one of ``statuses`` with
    ``engine_id``, unless (``running``) the scan is ``queued``: then nothing changes and ``start``
    is the one to run. Returns ``(new id, start it is)``. One round trip, committed when it
    returns if called outside a transaction (see the module)."""
    sql = PROGRESS % (max(1, lock_timeout_ms), in_list(statuses))
    params = (running, engine_id, queued, callback_id, until, recipes_total, recipes_done, engine_id, *statuses,
              running, queued)
    row = _run(sql, params).fetchone()
    return bool(row[0]), bool(row[1])


def start(callback_id: str, *, until: datetime, engine_id: str, statuses: Sequence[str], running: bool,
          recipes_total: int | None, recipes_done: int | None, queued: str, running_status: str, now: datetime,
          lock_timeout_ms: int) -> tuple[bool, Scan | None]:
    """``progress``, which also moves a ``queued`` scan to ``running_status`` (with ``running``),
    started ``now``. Returns ``(new id, the scan as written if it moved to running now, else
    None)``. Run it in a transaction of its own (its settings are ``SET LOCAL``), in which the
    caller writes the move's event; it commits durably."""
    sql = START % (max(1, lock_timeout_ms), in_list(statuses))
    params = (callback_id, until, recipes_total, recipes_done, running, queued, running_status,
              running, queued, now, engine_id, *statuses, running, queued)
    row = _run(sql, params).fetchone()
    return bool(row[0]), instance(Scan, row[2:]) if row[1] else None


def forget_expired(now: datetime) -> int:
    """Remove the ids kept until before ``now``: the rows removed."""
    return execute(f"DELETE FROM {table(EngineCallback)} WHERE until < ?", (now,)).rowcount
