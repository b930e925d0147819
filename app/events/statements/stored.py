"""Stored events (D27): written in the transaction of the state change that produces them,
each announced on ``CHANNEL`` (PostgreSQL NOTIFY, sent at that transaction's commit, never
before); read by the events list and stream, thinned by erasure, removed by retention.

A customer's event ids increase in commit order: the insert takes the customer's transaction
lock (an advisory lock held until the commit) before its ids are drawn, so an event committed
later never has a smaller id than one a stream already passed. Callers take it after every row
lock of their transaction (a customer's row, a scan's), so two transactions never wait on each
other in a circle, and as late as they can (``app.events.feed.stored_last``): held from this
statement to the commit, it is where one customer's transactions queue.

The order of a customer's locks, everywhere (``lock_customers``): its row (an admission's
``FOR NO KEY UPDATE``, or the ``KEY SHARE`` an event row's foreign key takes), then its event
lock. The insert's foreign key check locks the customer's row too, after the event lock had it
been left to the insert: a callback holding the event lock then waited for an admission's row
lock while the admission waited for the event lock (a deadlock, one callback answered 503).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.accounts.models import Customer
from app.events.models import Event
from app.plumbing.db import execute, table

CHANNEL = "scan_api_events"
_E = table(Event)
# The advisory lock's namespace (its first key), so no other advisory lock of the service meets it.
_LOCK_SPACE = 27


@dataclass(frozen=True)
class NewEvent:
    customer_id: str
    livemode: bool
    kind: str
    body: str  # JSON text
    scan_id: str | None = None
    bulk_id: str | None = None
    watch_id: str | None = None


def add(new: Sequence[NewEvent], now: datetime | Sequence[datetime]) -> list[int]:
    """Store ``new`` in the caller's transaction, in that order, each created at ``now`` (or at its
    own time of ``now``), and announce each on ``CHANNEL`` (its customer, mode, id, kind, scan and
    batch; delivered to listeners at the commit); their ids."""
    if not new:
        return []
    created = [now] * len(new) if isinstance(now, datetime) else list(now)
    lock_customers({e.customer_id for e in new})
    rows = execute(
        f"WITH added AS (INSERT INTO {_E} (customer_id, livemode, kind, scan_id, bulk_id, watch_id, created_at, body) "
        "SELECT * FROM unnest(?::varchar[], ?::boolean[], ?::varchar[], ?::varchar[], ?::varchar[], ?::varchar[], "
        "?::timestamp[], ?::text[]) RETURNING id, customer_id, livemode, kind, scan_id, bulk_id) "
        "SELECT id, pg_notify(?, json_build_object('c', customer_id, 'm', livemode, 'e', id, 'k', kind, "
        "'s', scan_id, 'b', bulk_id)::text) FROM added ORDER BY id",
        ([e.customer_id for e in new], [e.livemode for e in new], [e.kind for e in new], [e.scan_id for e in new],
         [e.bulk_id for e in new], [e.watch_id for e in new], created, [e.body for e in new],
         CHANNEL)).fetchall()
    return [row[0] for row in rows]


def lock_customers(customer_ids: set[str]) -> None:
    """Take the customers' locks an event insert needs, in the one order (module docstring):
    their rows' ``KEY SHARE`` (what the insert's foreign key check would take later), then their
    event locks; customers in id order, so two writers never wait in a circle."""
    ordered = sorted(customer_ids)
    execute(f"SELECT id FROM {table(Customer)} WHERE id = ANY(?::varchar[]) ORDER BY id FOR KEY SHARE", (ordered,))
    # One statement for all of them (a batch look's events name up to a hundred customers), taken
    # in the order of the sorted subquery: it is not flattened (ORDER BY, OFFSET), so its rows reach
    # the outer call one by one in that order.
    execute("SELECT pg_advisory_xact_lock(?, hashtext(c)) FROM "
            "(SELECT c FROM unnest(?::varchar[]) AS c ORDER BY c OFFSET 0) AS ordered", (_LOCK_SPACE, ordered))


@dataclass(frozen=True)
class Filters:
    kinds: tuple[str, ...] | None = None
    scan_id: str | None = None
    bulk_id: str | None = None
    watch_id: str | None = None
    nothing: bool = False  # an id no event can have (too long, a NUL): no event matches


COLUMNS = "id, kind, created_at, livemode, body"


def _where(customer_id: str, livemode: bool, filters: Filters) -> tuple[list[str], list]:
    where, params = ["customer_id = ?", "livemode = ?"], [customer_id, livemode]
    if filters.nothing:
        return [*where, "FALSE"], params
    if filters.kinds:
        where.append("kind = ANY(?::varchar[])")
        params.append(list(filters.kinds))
    for column in ("scan_id", "bulk_id", "watch_id"):
        value = getattr(filters, column)
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    return where, params


def newest_first(customer_id: str, livemode: bool, filters: Filters, *, before: int | None,
                 limit: int) -> list[tuple]:
    """Up to ``limit`` of the customer's events of that mode, newest first, older than the event
    ``before`` when given (``COLUMNS``)."""
    where, params = _where(customer_id, livemode, filters)
    if before is not None:
        where.append("id < ?")
        params.append(before)
    return execute(f"SELECT {COLUMNS} FROM {_E} WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
                   (*params, limit)).fetchall()


def oldest_first(customer_id: str, livemode: bool, filters: Filters, *, after: int, limit: int) -> list[tuple]:
    """Up to ``limit`` of the customer's events of that mode later than the event ``after``,
    oldest first (``COLUMNS``): what a stream sends next."""
    where, params = _where(customer_id, livemode, filters)
    return execute(f"SELECT {COLUMNS} FROM {_E} WHERE {' AND '.join(where)} AND id > ? ORDER BY id LIMIT ?",
                   (*params, after, limit)).fetchall()


def last_id(customer_id: str, livemode: bool) -> int:
    """The id of the customer's newest event of that mode (0: none): where a new stream starts."""
    row = execute(f"SELECT max(id) FROM {_E} WHERE customer_id = ? AND livemode = ?",
                  (customer_id, livemode)).fetchone()
    return int(row[0] or 0)


def of_scans(scan_ids: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(id, kind, body)`` of every event of these scans."""
    return execute(f"SELECT id, kind, body FROM {_E} WHERE scan_id = ANY(?::varchar[])",
                   (list(scan_ids),)).fetchall()


def replace_bodies(ids: Sequence[int], bodies: Sequence[str]) -> None:
    if ids:
        execute(f"UPDATE {_E} SET body = b.body FROM unnest(?::bigint[], ?::text[]) AS b(id, body) "
                f"WHERE {_E}.id = b.id", (list(ids), list(bodies)))


def delete_created_before(cutoff: datetime, *, batch: int) -> int:
    """Delete up to ``batch`` events created before ``cutoff``; how many were deleted."""
    cursor = execute(f"DELETE FROM {_E} WHERE id IN (SELECT id FROM {_E} WHERE created_at < ? LIMIT ?)",
                     (cutoff, batch))
    return cursor.rowcount
