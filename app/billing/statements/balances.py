"""A customer's balance and credit ledger, quota windows and scans in flight: billing's statements
on the customer's row (its other columns are accounts', ``app.accounts.statements.customers``).

The statements every API call runs are written once as SQL (``app.plumbing.db.execute``);
the rest are peewee queries. The rules (the price, which modes are billed,
which statuses are in flight, how long a window is) are the services' and come in as
parameters. A "statement" here is ``(sql, params)``, built by one function and run by
another, so that several of them go to the server in one round trip.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import cast

from peewee import fn

from app.accounts.models import CreditLedger, Customer
from app.accounts.statements.customers import LOCK_CUSTOMER
from app.activity.statements import entries as activity_store
from app.billing.models import QuotaMinute
from app.plumbing.db import Statement, columns, execute, execute_batch, in_list, instance, repr_column, table
from app.scans.models import Scan


def set_in_flight(customer_id: str, *, in_flight: int, test_in_flight: int) -> None:
    execute(f"UPDATE {table(Customer)} SET in_flight = ?, test_in_flight = ? WHERE id = ?",
            (in_flight, test_in_flight, customer_id))


def move_in_flight_statement(customer_id: str, *, livemode: bool, n: int) -> Statement:
    """Move the customer's count of scans in flight of one mode (counted apart, D15) by ``n``."""
    column = repr_column(Customer.in_flight if livemode else Customer.test_in_flight)
    return f"UPDATE {table(Customer)} SET {column} = {column} + ? WHERE id = ?", (n, customer_id)


# A batch look's finals take their scans out of flight for many customers at once: one statement,
# not one per customer (with 100 customers, 100 of a batch's statements). ``locked`` takes the rows
# in id order first, as the one-by-one UPDATEs in id order did, so two lookers never wait on each
# other in a circle.
MOVE_IN_FLIGHT_MANY = f"""
WITH locked AS MATERIALIZED (
    SELECT id FROM {table(Customer)} WHERE id = ANY(?::varchar[]) ORDER BY id FOR NO KEY UPDATE)
UPDATE {table(Customer)} AS c SET in_flight = c.in_flight + v.live, test_in_flight = c.test_in_flight + v.test
FROM (VALUES %s) AS v(id, live, test) JOIN locked ON locked.id = v.id
WHERE c.id = v.id"""


def move_in_flight_many(moves: dict[tuple[str, bool], int]) -> None:
    """Move each customer's count of scans in flight of a mode by ``moves[(customer_id, livemode)]``."""
    by_customer: dict[str, list[int]] = {}
    for (customer_id, livemode), n in moves.items():
        by_customer.setdefault(customer_id, [0, 0])[0 if livemode else 1] += n
    if not by_customer:
        return
    rows = ", ".join(["(?, ?::integer, ?::integer)"] * len(by_customer))
    params = [sorted(by_customer), *(v for customer_id, (live, test) in sorted(by_customer.items())
                                     for v in (customer_id, live, test))]
    execute(MOVE_IN_FLIGHT_MANY % rows, params)


def run(statement: Statement) -> None:
    """Run one statement of this module."""
    execute(*statement)


# --- the balance and its ledger (D3) -------------------------------------------------------

APPLY = f"""
WITH changed AS (
    UPDATE {table(Customer)} SET balance = balance + ?, in_flight = in_flight + ?
    WHERE id = ? AND (? OR balance >= ?) RETURNING balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, scan_id, bulk_id, request_id, note,
                                       created_at)
    SELECT ?, ?, balance, ?, ?, ?, ?, ?, ? FROM changed RETURNING balance_after)
SELECT balance_after FROM ledger"""


def apply_statement(*, customer_id: str, delta: int, reason: str, in_flight: int, scan_id: str | None,
                    bulk_id: str | None, request_id: str | None, note: str | None, now: datetime) -> Statement:
    """The conditional UPDATE of the balance (a debit never overdraws it) and its ledger row,
    one statement that returns the new balance, or no row when nothing was written."""
    return APPLY, (delta, in_flight, customer_id, delta >= 0, -delta, customer_id, delta, reason, scan_id, bulk_id,
                   request_id, note, now)


def apply(statement: Statement) -> int | None:
    """Run an ``apply_statement``: the new balance, or None."""
    row = execute(*statement).fetchone()
    return row[0] if row else None


def apply_after(statements: list[Statement], statement: Statement) -> int | None:
    """Run ``statements``, then the ``apply_statement``, in one round trip: the new balance, or None."""
    row = execute_batch(statements + [statement]).fetchone()
    return row[0] if row else None


def balance_of(customer_id: str) -> int:
    return Customer.select(Customer.balance).where(Customer.id == customer_id).scalar()


def ledger_sum(customer_id: str) -> int:
    return CreditLedger.select(fn.COALESCE(fn.SUM(CreditLedger.delta), 0)).where(
        CreditLedger.customer == customer_id).scalar()


def latest_ledger(customer_id: str, limit: int) -> list[CreditLedger]:
    """The customer's latest ``limit`` ledger rows, newest first (by time: a row of summed reads
    is dated at its last read, after rows written since its first)."""
    return list(CreditLedger.select().where(CreditLedger.customer == customer_id)
                .order_by(CreditLedger.created_at.desc(), CreditLedger.id.desc()).limit(limit))


def ledger_count(customer_id: str) -> int:
    return CreditLedger.select().where(CreditLedger.customer == customer_id).count()


def ledger_page(customer_id: str, *, page: int, per_page: int) -> list[CreditLedger]:
    """Page ``page`` (from 1) of the customer's ledger, newest first (by time, as ``latest_ledger``)."""
    return list(CreditLedger.select().where(CreditLedger.customer == customer_id)
                .order_by(CreditLedger.created_at.desc(), CreditLedger.id.desc()).paginate(page, per_page))


def ledger_chunk(*, customer_id: str, since: datetime, until: datetime, after: tuple | None,
                 limit: int) -> list[CreditLedger]:
    """The first ``limit`` movements of ``[since, until)`` after ``after`` (``(created_at, id)``
    of the last one read, or None), oldest first: a keyset on (created_at, id)."""
    query = CreditLedger.select().where((CreditLedger.customer == customer_id)
                                        & (CreditLedger.created_at >= since) & (CreditLedger.created_at < until))
    if after is not None:
        query = query.where((CreditLedger.created_at > after[0])
                            | ((CreditLedger.created_at == after[0]) & (CreditLedger.id > after[1])))
    return list(query.order_by(CreditLedger.created_at, CreditLedger.id).limit(limit))


# Bucket labels computed by the database.
_BUCKETS = {
    "day": "to_char({col}, 'YYYY-MM-DD')",
    "hour": "to_char({col}, 'YYYY-MM-DD HH24')",
}


def _grouped(model, value_sql: str, customer_id: str, since: datetime, unit: str, extra: str,
             extra_params: tuple) -> dict:
    created = repr_column(model.created_at)
    sql = (f"SELECT {_BUCKETS[unit].format(col=created)}, {value_sql} FROM {table(model)} "
           f"WHERE {repr_column(model.customer)} = ? AND {created} >= ?{extra} GROUP BY 1")
    return {label: int(value or 0) for label, value in execute(sql, (customer_id, since) + extra_params)}


def scans_by_bucket(customer_id: str, *, since: datetime, unit: str, livemode: bool) -> dict[str, int]:
    """The customer's scans of one mode created since ``since``, counted per ``unit`` ("day" or
    "hour"), keyed by the bucket's label (``YYYY-MM-DD`` or ``YYYY-MM-DD HH``)."""
    return _grouped(Scan, "COUNT(*)", customer_id, since, unit, f" AND {repr_column(Scan.livemode)} = ?",
                    (livemode,))


def spent_by_bucket(customer_id: str, *, since: datetime, unit: str, except_reasons: Sequence[str]) -> dict[str, int]:
    """The credits the customer's ledger took since ``since`` (net of what it gave back), per
    ``unit``, leaving out the rows of ``except_reasons`` (a non-empty list)."""
    return _grouped(CreditLedger, f"SUM(-{repr_column(CreditLedger.delta)})", customer_id, since, unit,
                    f" AND {repr_column(CreditLedger.reason)} NOT IN {in_list(except_reasons)}", tuple(except_reasons))


# --- quota windows and the scans in flight (D8) ------------------------------------------

def minute_of(moment: datetime) -> datetime:
    """The minute of ``moment``: a window counter's key."""
    return moment.replace(second=0, microsecond=0)


def positional(_name: str) -> str:
    """A parameter written ``?`` (``app.plumbing.db.execute``'s placeholders, bound in order)."""
    return "?"


def named(name: str) -> str:
    """A parameter written by its name (psycopg2's ``%(name)s``, bound from a dict)."""
    return f"%({name})s"


def window_columns(*, customer: str, livemode: str, param=positional) -> str:
    """The six window columns of one customer and mode (day minutes, hour minutes, day edge,
    hour edge, oldest in the day, oldest in the hour), ``customer`` and ``livemode`` given as SQL
    (a placeholder, or a sub-select of a statement that finds the key itself); the windows'
    times are ``param(name)`` for ``day_start``, ``day_inside``, ``hour_start``, ``hour_inside``
    (``window_times``), in the order ``window_params`` binds them when positional."""
    who = f"customer_id = {customer} AND livemode = {livemode}"

    def minutes(window: str) -> str:
        return (f"(SELECT coalesce(sum(scans), 0) FROM {table(QuotaMinute)} "
                f"WHERE {who} AND minute >= {param(window + '_inside')})")

    def edge(window: str) -> str:
        return (f"(SELECT count(*) FROM {table(Scan)} WHERE {who} AND created_at > {param(window + '_start')} "
                f"AND created_at < {param(window + '_inside')})")

    def oldest(window: str) -> str:
        return (f"(SELECT created_at FROM {table(Scan)} WHERE {who} AND created_at > {param(window + '_start')} "
                f"ORDER BY created_at LIMIT 1)")
    return ", ".join([minutes("day"), minutes("hour"), edge("day"), edge("hour"), oldest("day"), oldest("hour")])


WINDOW_COLUMNS = window_columns(customer="?", livemode="?")
WINDOW_USAGE = f"SELECT {WINDOW_COLUMNS}"
WINDOW_WIDTH = 6


def window_params(customer_id: str | None, starts: tuple[datetime, datetime], *, livemode: bool | None) -> tuple:
    """The parameters of ``WINDOW_COLUMNS`` for the windows starting at ``starts`` (the day's,
    then the hour's), of one mode (D15)."""
    # Each window's start, and the first minute wholly inside it (the one after the cut minute).
    cuts = [(start, minute_of(start) + timedelta(minutes=1)) for start in starts]
    who = (customer_id, livemode)
    return (tuple(v for _, inside in cuts for v in (*who, inside))  # whole minutes
            + tuple(v for start, inside in cuts for v in (*who, start, inside))  # the cut minute
            + tuple(v for start, _ in cuts for v in (*who, start)))  # the oldest scan


def window_times(starts: tuple[datetime, datetime]) -> dict[str, datetime]:
    """The named parameters of ``window_columns(param=named)``: each window's start and the first
    minute wholly inside it (the one after the cut minute)."""
    day, hour = starts
    return {"day_start": day, "day_inside": minute_of(day) + timedelta(minutes=1),
            "hour_start": hour, "hour_inside": minute_of(hour) + timedelta(minutes=1)}


def windows(customer_id: str, starts: tuple[datetime, datetime], *, livemode: bool) -> tuple:
    """The six values of ``WINDOW_COLUMNS`` for the customer's windows starting at ``starts``."""
    return tuple(execute(WINDOW_USAGE, window_params(customer_id, starts, livemode=livemode)).fetchone())


# The customer's row and its windows on one row (the admission reads them under its lock).
CUSTOMER_AND_WINDOWS = f"SELECT {columns(Customer)}, {WINDOW_COLUMNS} FROM {table(Customer)} WHERE id = ?"


def lock_with_windows(customer_id: str, starts: tuple[datetime, datetime], *,
                      livemode: bool) -> tuple[Customer, tuple] | None:
    """The customer's row, locked until the transaction ends, and its windows counted under
    that lock (the six values of ``WINDOW_COLUMNS``), or None: one round trip of two
    statements (each statement takes its own snapshot under READ COMMITTED, so the counts
    see every admission committed before the lock was granted)."""
    row = execute_batch([
        (LOCK_CUSTOMER, (customer_id,)),
        (CUSTOMER_AND_WINDOWS, window_params(customer_id, starts, livemode=livemode) + (customer_id,)),
    ]).fetchone()
    if row is None:
        return None
    n = len(Customer._meta.sorted_fields)
    return instance(Customer, row[:n]), tuple(row[n:])


CHARGE_AND_USAGE = f"""
WITH charged AS (
    UPDATE {table(Customer)} SET balance = balance - ? WHERE id = ? AND balance >= ? RETURNING balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, request_id, note, created_at)
    SELECT ?, ?, balance, ?, ?, ?, ? FROM charged RETURNING balance_after),
entry AS ({activity_store.insert_from("charged")})
SELECT (SELECT balance_after FROM ledger), {WINDOW_COLUMNS}"""


def add_read(*, source: str, note_sql: str, livemode_sql: str, param=positional) -> str:
    """The INSERT that adds one read's charge to its minute's row of summed reads (D24): the
    row of the customer, mode, endpoint (the note) and minute is created by its first read and
    grown by the next ones (``delta`` their sum, ``reads`` their count, ``balance_after`` the
    balance after the latest, ``created_at`` its time: the row is dated when its balance was),
    so a read adds no row. ``source`` is the CTE of the charged
    customer (``id``, ``balance``); its parameters (``param``: positional, in this order, or
    named): ``delta``, ``reason``, those of ``note_sql``, ``now``, those of ``livemode_sql``,
    ``minute``. Returns ``balance_after``.

    Run in the statement that took the credit: the customer's row is locked first by that
    UPDATE, so two reads of one minute queue there, never on this row (no deadlock)."""
    return f"""
    INSERT INTO {table(CreditLedger)} AS l (customer_id, delta, balance_after, reason, note, created_at, livemode,
                                            minute, reads)
    SELECT id, {param("delta")}, balance, {param("reason")}, {note_sql}, {param("now")}, {livemode_sql},
           {param("minute")}, 1 FROM {source}
    ON CONFLICT (customer_id, livemode, note, minute) WHERE minute IS NOT NULL
    DO UPDATE SET delta = l.delta + excluded.delta, balance_after = excluded.balance_after, reads = l.reads + 1,
                  created_at = GREATEST(l.created_at, excluded.created_at)
    RETURNING balance_after"""


SUM_READ_AND_USAGE = f"""
WITH charged AS (
    UPDATE {table(Customer)} SET balance = balance - ? WHERE id = ? AND balance >= ? RETURNING id, balance),
ledger AS ({add_read(source="charged", note_sql="?", livemode_sql="?")}),
entry AS ({activity_store.insert_from("charged")})
SELECT (SELECT balance_after FROM ledger), {WINDOW_COLUMNS}"""


def charge_with_windows(*, customer_id: str, price: int, reason: str, request_id: str | None, note: str | None,
                        now: datetime, starts: tuple[datetime, datetime], entry: dict,
                        read_of: bool | None = None) -> tuple[int | None, tuple]:
    """Take ``price`` credits if the balance covers it, with its ledger row and the call's
    activity entry (``entry``, a row of ``app.activity.statements.entries.COLUMNS``), and read the customer's
    live windows starting at ``starts``: one statement. Returns the new balance (None when it
    was short: nothing written) and the six window values.

    ``read_of``: the mode of the key whose read this is (``add_read``: summed into its minute's
    row, ``note`` its endpoint, no request id); None: a row of its own."""
    windows = window_params(customer_id, starts, livemode=True)
    if read_of is None:
        row = execute(CHARGE_AND_USAGE, (price, customer_id, price, customer_id, -price, reason, request_id,
                                         note, now) + activity_store.values(entry) + windows).fetchone()
    else:
        row = execute(SUM_READ_AND_USAGE, (price, customer_id, price, -price, reason, note, now, read_of,
                                           minute_of(now)) + activity_store.values(entry) + windows).fetchone()
    return row[0], tuple(row[1:])


ADD_TO_MINUTE = (f"INSERT INTO {table(QuotaMinute)} (customer_id, livemode, minute, scans) VALUES (?, ?, ?, ?) "
                 f"ON CONFLICT (customer_id, livemode, minute) "
                 f"DO UPDATE SET scans = {table(QuotaMinute)}.scans + excluded.scans")


def count_created_statement(customer_id: str, *, created_at: datetime, n: int, livemode: bool) -> Statement:
    """Add ``n`` scans created at ``created_at`` to their minute's counter (negative: take them back)."""
    return ADD_TO_MINUTE, (customer_id, livemode, minute_of(created_at), n)


def delete_minutes(customer_id: str) -> None:
    """Drop all the customer's minute counters (both modes)."""
    QuotaMinute.delete().where(QuotaMinute.customer == customer_id).execute()


def delete_minutes_before(minute: datetime) -> int:
    """Drop every counter of a minute before ``minute``; how many went."""
    return QuotaMinute.delete().where(QuotaMinute.minute < minute).execute()


def scans_for_counting(*, statuses: Iterable[str], since: datetime, customer_id: str | None,
                       livemode: bool | None) -> Iterable[tuple[str, str, datetime]]:
    """``(customer_id, status, created_at)`` of every scan whose status is one of ``statuses``
    or created after ``since``: of one customer or all, of one mode or (None) both."""
    scans = Scan.select(Scan.customer, Scan.status, Scan.created_at).where(
        Scan.status.in_(list(statuses)) | (Scan.created_at > since))
    if customer_id is not None:
        scans = scans.where(Scan.customer == customer_id)
    if livemode is not None:
        scans = scans.where(Scan.livemode == livemode)
    return cast(Iterable[tuple[str, str, datetime]], scans.tuples())  # peewee types rows as models


def count_scans(customer_id: str, *, livemode: bool, statuses: Iterable[str]) -> int:
    """The customer's scans of one mode whose status is one of ``statuses``, counted one by one."""
    return Scan.select().where((Scan.customer == customer_id) & (Scan.livemode == livemode)
                               & Scan.status.in_(list(statuses))).count()


def nth_created_since(customer_id: str, *, livemode: bool, since: datetime, n: int):
    """``created_at`` of the customer's ``n``-th scan (from 1) of one mode created after ``since``, or None."""
    return (Scan.select(Scan.created_at)
            .where((Scan.customer == customer_id) & (Scan.livemode == livemode) & (Scan.created_at > since))
            .order_by(Scan.created_at).offset(n - 1).limit(1).scalar())


def soonest_eta(customer_id: str, *, livemode: bool, statuses: Iterable[str]):
    """The earliest ``eta_at`` of the customer's scans of one mode whose status is one of ``statuses``, or None."""
    return (Scan.select(fn.MIN(Scan.eta_at))
            .where((Scan.customer == customer_id) & (Scan.livemode == livemode)
                   & Scan.status.in_(list(statuses))).scalar())
