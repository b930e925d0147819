"""The statements of the engine's callbacks (E7): a callback taken makes its scan due at once, and
the callback ids taken are remembered until a replay of them would be refused anyway (stale).

Which statuses are in flight, how long an id is kept and what "now" is are the services' rules
(``app.services.callbacks``), passed in here.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from peewee import OperationalError

from app.db import execute, table
from app.models import EngineCallback, Scan

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


def take(callback_id: str, *, until: datetime, engine_id: str, statuses: Sequence[str], now: datetime,
         lock_timeout_ms: int) -> tuple[bool, bool]:
    """Remember ``callback_id`` (kept ``until``) and make the scan in one of ``statuses`` with
    ``engine_id`` due by ``now``, after any look holding it: ``(new id, a scan made due)``. Run it
    in a transaction of its own (its settings are ``SET LOCAL``)."""
    sql = TAKE % (max(1, lock_timeout_ms), "(" + ", ".join(["?"] * len(statuses)) + ")")
    try:
        row = execute(sql, (callback_id, until, now, engine_id, *statuses)).fetchone()
    except OperationalError as exc:
        original = getattr(exc, "orig", None) or exc.__context__  # peewee wraps the driver's error
        if getattr(original, "pgcode", None) == LOCK_NOT_AVAILABLE:
            raise Busy() from None
        raise
    return bool(row[0]), bool(row[1])


def forget_expired(now: datetime) -> int:
    """Remove the ids kept until before ``now``: the rows removed."""
    return execute(f"DELETE FROM {table(EngineCallback)} WHERE until < ?", (now,)).rowcount
