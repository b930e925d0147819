"""The activity log's statements (D20): one INSERT per entry, the lists, and the day
partitions (made ahead, dropped whole when they expire: no DELETE walks the log).

The table and its DEFAULT partition are ``app.activity.models``'s. A day's partition is
``activity_entry_pYYYYMMDD`` and holds ``[day, day + 1)``.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime, timedelta

from app.activity.models import DEFAULT_PARTITION, TABLE, ActivityEntry
from app.plumbing.cursor_pages import newest_first_where
from app.plumbing.db import db, execute, table

# The columns an entry is written with and read back in, in this order.
COLUMNS = ("id", "created_at", "customer_id", "livemode", "key_id", "user_id", "user_email", "action",
           "resource_id", "status", "credits", "client_address", "request_id", "purpose", "case_ref",
           "target_hashes")
READ_COLUMNS = COLUMNS[:-1]  # the hashes are for matching, never shown
INSERT = (f"INSERT INTO {table(ActivityEntry)} ({', '.join(COLUMNS)}) "
          f"VALUES ({', '.join('?' * len(COLUMNS))})")
CURSOR = f"SELECT created_at FROM {table(ActivityEntry)} WHERE id = ? AND customer_id = ? AND livemode = ? LIMIT 1"
CURSOR_ANY_MODE = f"SELECT created_at FROM {table(ActivityEntry)} WHERE id = ? AND customer_id = ? LIMIT 1"
PARTITION_NAME = re.compile(rf"^{TABLE}_p(\d{{8}})$")
# Serialises the partition changes of concurrent sweeps (two workers, an operator's command).
PARTITION_LOCK = 0x61637476  # "actv"


# Each value's type, for an INSERT ... SELECT of parameters (a literal there would be text).
CASTS = {"created_at": "timestamp", "livemode": "boolean", "status": "smallint", "credits": "integer",
         "target_hashes": "varchar[]"}
_CAST_VALUES = ", ".join(f"?::{CASTS.get(column, 'text')}" for column in COLUMNS)
INSERT_FROM = f"INSERT INTO {table(ActivityEntry)} ({', '.join(COLUMNS)}) SELECT {_CAST_VALUES} FROM %s"


def values(row: dict) -> tuple:
    return tuple(row.get(column) for column in COLUMNS)


def insert(row: dict) -> None:
    """One entry (``row`` keyed by ``COLUMNS``): one INSERT, one round trip."""
    execute(INSERT, values(row))


def insert_statement(row: dict) -> tuple[str, tuple]:
    """``insert``'s statement, to run with others (an admission's)."""
    return INSERT, values(row)


def insert_from(source: str) -> str:
    """The INSERT of one entry, its values the parameters (``values``), for each row of
    ``source`` (a CTE: one row when the call was charged, none when not)."""
    return INSERT_FROM % source


def insert_select(select_sql: str) -> str:
    """The INSERT of entries whose values (``COLUMNS``, in order) ``select_sql`` selects: a
    CTE of a statement that finds the entry's customer itself (a served read's)."""
    return f"INSERT INTO {table(ActivityEntry)} ({', '.join(COLUMNS)}) {select_sql}"


def set_status(entry_id: str, created_at: datetime, status: int) -> None:
    """Correct the status of one entry (``created_at`` finds its partition)."""
    execute(f"UPDATE {table(ActivityEntry)} SET status = ? WHERE id = ? AND created_at = ?",
            (status, entry_id, created_at))


def set_credits(entry_id: str, created_at: datetime, credits: int) -> None:
    """Correct what one entry says the call cost (a refund)."""
    execute(f"UPDATE {table(ActivityEntry)} SET credits = ? WHERE id = ? AND created_at = ?",
            (credits, entry_id, created_at))


def created_at_of(entry_id: str, *, customer_id: str, livemode: bool | None) -> datetime | None:
    """The ``created_at`` of the customer's entry (of this mode; None: of either), a list's cursor."""
    if livemode is None:
        row = execute(CURSOR_ANY_MODE, (entry_id, customer_id)).fetchone()
    else:
        row = execute(CURSOR, (entry_id, customer_id, livemode)).fetchone()
    return None if row is None else row[0]


def list_rows(customer_id: str, *, livemode: bool | None, action: str | None = None, key_id: str | None = None,
              resource_id: str | None = None, created_after=None, created_before=None,
              target_hashes: list[str] | None = None, before: tuple | None = None, limit: int) -> list[tuple]:
    """Up to ``limit`` rows (``READ_COLUMNS``) of the customer's entries, of one mode (None:
    both), newest first by ``(created_at, id)``; ``target_hashes``: entries whose targets
    include any of them; ``before``: ``(created_at, id)`` of the entry the page starts after.
    Both time bounds are exclusive."""
    where, params = newest_first_where({"customer_id": customer_id, "livemode": livemode, "action": action,
                                        "key_id": key_id, "resource_id": resource_id},
                                       created_after=created_after, created_before=created_before, before=before)
    if target_hashes is not None:
        where.append("target_hashes && ?::varchar(64)[]")
        params.append(list(target_hashes))
    return execute(f"SELECT {', '.join(READ_COLUMNS)} FROM {table(ActivityEntry)} WHERE {' AND '.join(where)} "
                   f"ORDER BY created_at DESC, id DESC LIMIT ?", params + [limit]).fetchall()


def all_rows(customer_id: str, *, batch: int = 1000, **filters) -> Iterator[tuple]:
    """Every row ``list_rows`` would page through, newest first, read ``batch`` at a time (an export)."""
    before = None
    while True:
        rows = list_rows(customer_id, before=before, limit=batch, **filters)
        yield from rows
        if len(rows) < batch:
            return
        before = (rows[-1][1], rows[-1][0])


def export_watermark() -> int:
    """The xid8 below which every transaction that wrote to this database has ended: the oldest
    transaction id still running here, else the next one to be assigned. Read before the page's
    own statement, whose later snapshot then sees every entry below it (an entry's transaction
    that was running at this read is above the watermark; one given its id after the read is at
    or above the snapshot's xmax, read first). This database only: PostgreSQL's own snapshot xmin
    counts the transactions of every database on the server, so a long one in another database
    (another service, another test worker) held the export back for nothing."""
    xmax, running = execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text, "
        "array_agg(backend_xid::text) FILTER (WHERE backend_xid IS NOT NULL) "
        "FROM pg_stat_activity WHERE datname = current_database()").fetchone()
    return min([int(xmax), *(_full_xid(int(xid), int(xmax)) for xid in running or [])])


def _full_xid(xid: int, xmax: int) -> int:
    """The 64-bit id (xid8) of a running transaction's 32-bit ``xid``: the epoch of ``xmax``, or
    the one before when the counter wrapped between them."""
    full = (xmax & ~0xFFFFFFFF) | xid
    return full - (1 << 32) if full >= xmax else full


def export_rows(customer_id: str, *, livemode: bool | None, after: tuple[str, datetime, str] | None,
                limit: int) -> list[tuple]:
    """Up to ``limit`` rows (``READ_COLUMNS`` then ``xact`` as text) of the customer's entries of
    one mode (None: both) in the order they were written, ``(xact, created_at, id)``, after the cursor
    ``after`` and written by a transaction below ``export_watermark``: each of those has ended, so
    no entry will ever appear before the last row returned (an entry's time and id are chosen
    before its transaction commits, in no order)."""
    where = ["customer_id = ?", "xact < ?::xid8"]
    params: list = [customer_id, str(export_watermark())]
    if livemode is not None:  # None: both modes (an audit sink's)
        where.append("livemode = ?")
        params.append(livemode)
    if after is not None:
        where.append("(xact, created_at, id) > (?::xid8, ?, ?)")
        params.extend(after)
    return execute(f"SELECT {', '.join(READ_COLUMNS)}, xact::text FROM {table(ActivityEntry)} "
                   f"WHERE {' AND '.join(where)} ORDER BY xact, created_at, id LIMIT ?", params + [limit]).fetchall()


def last_export_position(customer_id: str) -> tuple[str, datetime, str] | None:
    """``(xact, created_at, id)`` of the last entry of the customer (both modes) ``export_rows``
    would give now, or None."""
    row = execute(f"SELECT xact::text, created_at, id FROM {table(ActivityEntry)} WHERE customer_id = ? "
                  f"AND xact < ?::xid8 ORDER BY xact DESC, created_at DESC, id DESC "
                  f"LIMIT 1", (customer_id, str(export_watermark()))).fetchone()
    return None if row is None else (row[0], row[1], row[2])


# --- day partitions -------------------------------------------------------------------------

def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def day_partitions() -> list[date]:
    """The days that have a partition, oldest first (the DEFAULT one is not a day's)."""
    rows = execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "JOIN pg_class p ON p.oid = i.inhparent "
                   "WHERE p.relname = ? AND p.relnamespace = to_regnamespace(current_schema())::oid",
                   (TABLE,)).fetchall()
    days = []
    for (name,) in rows:
        match = PARTITION_NAME.match(name)
        if match:
            days.append(datetime.strptime(match.group(1), "%Y%m%d").date())
    return sorted(days)


def lock_partitions(lock_timeout_ms: int) -> None:
    """Inside a transaction: wait for any other partition change to finish, and give up on a
    table lock not granted within ``lock_timeout_ms`` (a DROP waiting behind a long export would
    hold every insert queued behind it)."""
    execute("SELECT pg_advisory_xact_lock(?)", (PARTITION_LOCK,))
    execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")


def create_day_partition(day: date) -> bool:
    """Make ``day``'s partition (in the caller's transaction, under ``lock_partitions``);
    False when it exists. Entries of that day already in the DEFAULT partition move into it.

    Made as a plain table, then attached: ATTACH PARTITION takes a lock on the parent that
    lets inserts go on (CREATE TABLE ... PARTITION OF would block them), and it creates the
    partition's indexes from the parent's."""
    name = partition_name(day)
    if execute("SELECT to_regclass(?)", (f'"{name}"',)).fetchone()[0] is not None:
        return False
    start, end = datetime.combine(day, datetime.min.time()), datetime.combine(day + timedelta(days=1),
                                                                              datetime.min.time())
    execute(f'CREATE TABLE "{name}" (LIKE {table(ActivityEntry)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)')
    # No entry may reach the DEFAULT partition between the move and the ATTACH (which would then
    # refuse): inserts routed there wait for this transaction. Only days without a partition are
    # routed there, and they are made a week ahead, so nothing waits in practice.
    execute(f'LOCK TABLE "{DEFAULT_PARTITION}" IN SHARE ROW EXCLUSIVE MODE')
    # The DEFAULT partition holds only the entries of days that had no partition: small.
    # Moved with their writing transaction's id (``xact``): the audit export's cursor has passed
    # them already, a new id would export them twice.
    moved = ", ".join((*COLUMNS, "xact"))
    execute(f'WITH moved AS (DELETE FROM "{DEFAULT_PARTITION}" WHERE created_at >= ? AND created_at < ? '
            f'RETURNING {moved}) INSERT INTO "{name}" ({moved}) '
            f'SELECT {moved} FROM moved', (start, end))
    db.execute_sql(f"ALTER TABLE {table(ActivityEntry)} ATTACH PARTITION \"{name}\" "
                   f"FOR VALUES FROM ('{start:%Y-%m-%d}') TO ('{end:%Y-%m-%d}')")
    return True


def drop_day_partition(day: date) -> None:
    """Drop ``day``'s partition with its entries: a DDL drop, whatever their number."""
    execute(f'DROP TABLE IF EXISTS "{partition_name(day)}"')


def delete_default_before(moment: datetime) -> int:
    """Remove entries older than ``moment`` from the DEFAULT partition (only days that had no
    partition land there, so it stays small); how many went."""
    return execute(f'DELETE FROM "{DEFAULT_PARTITION}" WHERE created_at < ?', (moment,)).rowcount


def default_partition_count() -> int:
    return execute(f'SELECT count(*) FROM "{DEFAULT_PARTITION}"').fetchone()[0]


def partition_of(entry_id: str) -> str | None:
    """Which partition holds the entry (tests, the operator's checks)."""
    row = execute(f"SELECT tableoid::regclass::text FROM {table(ActivityEntry)} WHERE id = ?", (entry_id,)).fetchone()
    return None if row is None else row[0].strip('"')


def exists(entry_id: str) -> bool:
    return execute(f"SELECT 1 FROM {table(ActivityEntry)} WHERE id = ?", (entry_id,)).fetchone() is not None
