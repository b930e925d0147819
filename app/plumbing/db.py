"""Database binding: one ``DatabaseProxy`` bound to PostgreSQL, the only database.

PostgreSQL gets a connection pool so a request or job does not pay for a new
connection each time. With ``DATABASE_URL`` unset (development, tests) the URL is
that of the embedded server in the instance folder (``app.plumbing.embedded``).
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import psycopg2
from peewee import DatabaseProxy, InterfaceError, OperationalError, _savepoint
from playhouse.pool import MaxConnectionsExceeded, PooledPostgresqlDatabase

from app.plumbing.config import ConfigError, database_connect_args


class _Savepoint(_savepoint):
    """A savepoint whose rollback also drops the work ``after_commit`` registered inside it.

    peewee keeps a connection's work after commit in one list (``_state.commit_callbacks``,
    thread-local like the connection), run when the outermost transaction commits and emptied
    when it rolls back; a savepoint left it alone, so work registered in a rolled-back
    savepoint would still have been sent. Each savepoint notes the list's length when it
    begins and cuts it back there when rolled back (what it had registered, and what the
    savepoints inside it had)."""

    def _begin(self):
        self._mark = len(self.db._state.commit_callbacks)
        super()._begin()  # type: ignore[misc]  # peewee's savepoint has it; its stubs do not

    def rollback(self, begin=True):
        del self.db._state.commit_callbacks[self._mark:]
        super().rollback(begin)


class _Proxy(DatabaseProxy):
    """peewee's proxy, whose nested ``atomic()`` blocks are ``_Savepoint``s (peewee's proxy
    builds its own savepoints, not the bound database's)."""

    __slots__ = DatabaseProxy.__slots__  # peewee's proxy sets no other attribute

    def savepoint(self):
        return _Savepoint(self)


# Bound to PostgreSQL at start-up by ``init_db``. Defined here, not in ``app.extensions``
# (which holds Flask extensions), so that models and services reach the database without
# importing Flask.
db = _Proxy()


def after_commit(fn: Callable[..., object], *args, **kwargs) -> None:
    """Run ``fn(*args, **kwargs)`` once, when the outermost transaction of this thread's
    connection commits; never if it rolls back, nor if the savepoint (a nested ``atomic()``)
    it was registered in rolls back. Outside any transaction it runs at once.

    The one way work leaves for Redis after the rows it points at (D13): a service registers
    it inside its transaction, next to the write, and no caller has to remember to send it
    after the commit. The work may fail (Redis down): that is one warning line, never an
    exception into a caller whose transaction has committed, and the recovery sweep finds
    the rows without their job as it always did.
    """
    db.after_commit(functools.partial(_run_after_commit, fn, args, kwargs))


def _run_after_commit(fn: Callable[..., object], args: tuple, kwargs: dict) -> None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # the commit stands; the class only: a message may quote a row's values
        log.warning("%s after a commit failed (%s); the recovery sweep will redo it",
                    getattr(fn, "__qualname__", "work"), exc.__class__.__name__)


log = logging.getLogger(__name__)
# A pool whose every connection stayed taken for its whole timeout is the database not answering
# in time too (thousands of held calls on a starved CPU): 503 with Retry-After, not 500, so clients
# back off instead of asking again at once.
CONNECTION_ERRORS = (OperationalError, InterfaceError, MaxConnectionsExceeded)

class PostgresPool(PooledPostgresqlDatabase):
    """peewee's PostgreSQL pool, without a ``SELECT 1`` for a connection just returned.

    peewee checks each connection it hands out with a ``SELECT 1`` round trip, made
    under the pool's lock, so every request paid one and the threads of a process
    queued for it. A connection given back in good order (open, no transaction) less
    than FRESH_SECONDS ago is handed out without it; an older one is checked as before,
    so a connection broken while it sat idle (a restarted server) is still replaced
    before a request sees it.
    """

    FRESH_SECONDS = 1.0

    def __init__(self, *args, **kwargs):
        self._returned_at: dict[int, float] = {}
        super().__init__(*args, **kwargs)

    def savepoint(self):
        return _Savepoint(self)

    def commit(self):
        """COMMIT; when the connection breaks during it, the work after commit of the transaction
        is kept aside (``take_unconfirmed``): the server may have committed it all the same."""
        self._state.unconfirmed = []
        try:
            return super().commit()
        except CONNECTION_ERRORS:
            self._state.unconfirmed = list(self._state.commit_callbacks)
            raise

    def take_unconfirmed(self) -> list[Callable[[], None]]:
        """The work after commit of the last COMMIT that met a broken connection (then none)."""
        work, self._state.unconfirmed = getattr(self._state, "unconfirmed", []), []
        return work

    def _close(self, conn, close_conn=False):
        if close_conn:
            self._returned_at.pop(self.conn_key(conn), None)
        else:
            self._returned_at[self.conn_key(conn)] = time.monotonic()
        return super()._close(conn, close_conn)

    def _is_closed(self, conn):
        returned = self._returned_at.get(self.conn_key(conn))
        if (returned is not None and time.monotonic() - returned < self.FRESH_SECONDS and not conn.closed
                and self._adapter.txn_status(conn) == self._adapter.txn_idle):
            return False
        return super()._is_closed(conn)


class DatabaseUnreachable(Exception):
    """The database at DATABASE_URL does not answer; the message is one line without secrets."""


def connect_args(url: str) -> dict:
    """psycopg2's keyword arguments for ``url`` as libpq reads it: several hosts and
    ``target_session_attrs`` reach libpq intact (D31), which tries the hosts in order and keeps
    the first that has what the URL asks (``read-write``: the primary). One reading of a URL for
    the pool, the LISTEN session and the start-up check."""
    return {**TCP_DEFAULTS, **database_connect_args(url)}


# A primary that vanishes from the network (a host cut off, not a server stopped) answers nothing,
# not even a reset: without these a query in flight or an idle LISTEN session waited for the
# kernel's retransmissions, a quarter of an hour. Keepalives find an idle connection dead within
# about 11 s, tcp_user_timeout one whose request went unanswered by the peer's kernel within 10 s;
# the pool then drops it and the next one goes to the new primary (D31). A slow query is not cut:
# its bytes were acknowledged. The URL's own values win; libpq ignores them on a unix socket.
TCP_DEFAULTS = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3",
                "tcp_user_timeout": "10000"}


def describe_url(url: str) -> str:
    """``scheme://host:port[,host:port...]/name`` of a database URL, without its user or password."""
    scheme = url.split("://", 1)[0]
    try:
        args = connect_args(url)
    except ConfigError:
        return f"{scheme}://(unreadable URL)"
    hosts = args.get("host", "localhost").split(",")  # a host may be a socket's folder
    ports = args.get("port", "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    where = ",".join(f"{host}:{port}" if port else host for host, port in zip(hosts, ports, strict=False))
    return f"{scheme}://{where}/{args.get('dbname', '')}"


def check_reachable(url: str, timeout: int = 5) -> None:
    """Open one connection to ``url`` and run ``SELECT 1``, outside the shared proxy (so a
    forking server holds no connection), or raise DatabaseUnreachable."""
    conn = None
    try:
        conn = psycopg2.connect(**dict(connect_args(url), connect_timeout=timeout))
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any driver's failure: one line, never its traceback
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise DatabaseUnreachable(f"the database at {describe_url(url)} is unreachable: {first}") from None
    finally:
        if conn is not None:
            conn.close()


def make_database(url: str, **pool_options):
    # Pooled: connections are returned to the pool on close() and reused. A connection that
    # fails (the primary moved: D31) is discarded by the pool; the next one goes through libpq's
    # host list again, to whichever host is the primary now.
    args = dict(connect_args(url))
    args.setdefault("connect_timeout", 5)
    name = args.pop("dbname", None) or args.get("user") or "postgres"  # libpq's own default: the user's name
    options = {"max_connections": 32, "stale_timeout": 300, "timeout": 10, **pool_options}
    return PostgresPool(name, **options, **args)


def database_url(settings: dict) -> str:
    """``DATABASE_URL``, or when it is unset that of the embedded PostgreSQL of the instance
    folder, started now if it is not running."""
    if settings.get("DATABASE_URL"):
        return settings["DATABASE_URL"]
    from app.plumbing import embedded
    return embedded.postgres_url(settings["INSTANCE_PATH"])


def init_db(url: str):
    """Bind the proxy to the database at ``url`` (idempotent for the same url)."""
    current = getattr(db, "obj", None)
    if current is not None and getattr(current, "_bound_url", None) == url:
        return current
    if current is not None and not current.is_closed():
        current.close()
    database = make_database(url)
    database._bound_url = url
    db.initialize(database)
    return database


@contextmanager
def transaction():
    """A transaction (``db.atomic()``: a savepoint inside another), for a service that owns
    one without reaching for the database object (SQL lives in ``app/store``)."""
    with db.atomic() as txn:
        yield txn


def write_transaction():
    """The transaction of a customer's admission: the caller serialises writers by locking
    the customer's row with ``SELECT ... FOR UPDATE`` (``app.accounts.admin.lock_customer``)."""
    return transaction()


@contextmanager
def connection_context():
    """A connection held for the block and returned to the pool after it (a job's, a sweep's)."""
    with db.connection_context():
        yield


def release_connection() -> None:
    """Give this thread's connection back to the pool when no transaction is open: a held call
    (a wait, a stream) holds no connection between its reads; the next statement takes one. A
    caller inside ``connection_context`` (a job, a test) keeps the connection it opened."""
    if not db.is_closed() and not db.in_transaction() and not db._state.ctx:  # a connection_context keeps its own
        db.close()



@contextmanager
def transaction_with_known_outcome(committed: Callable[[], bool]):
    """``write_transaction``, whose COMMIT may be answered by a broken connection.

    When the connection breaks during COMMIT, the server may have committed (its answer was
    lost on the way back) or not (the COMMIT never reached it). Answering 503 either way
    charged a live key for a scan it was told had failed, and a retry made a duplicate. So
    after a connection error at COMMIT, ``committed()`` looks on a fresh connection (for a
    row the transaction wrote, by an id chosen before it) and the transaction ends as it
    really did: normally if it committed, with the connection error if it did not. Its work
    after commit (``after_commit``) runs only in the first case.
    """
    body_done = False
    try:
        with write_transaction() as txn:
            yield txn
            body_done = True
    except CONNECTION_ERRORS:
        if not body_done:
            raise
        work = db.take_unconfirmed()
        _reconnect()
        if not committed():
            raise
        log.warning("the database connection broke during COMMIT; the transaction had committed")
        for fn in work:
            fn()


def _reconnect() -> None:
    """Drop the broken connection (the pool discards it) and take a fresh one."""
    try:
        db.close()
    except CONNECTION_ERRORS:
        pass
    db.connect(reuse_if_open=True)


# --- Hot-path SQL -------------------------------------------------------------------
# Building a peewee query costs 0.3-0.4 ms of Python per statement (more than the
# statement's round trip to PostgreSQL), so the statements every API call runs are
# written once as SQL and run with ``execute``. ``?`` marks a parameter; it becomes
# the bound database's own placeholder. Columns come from the models, so the SQL
# follows a renamed column.
#
# Each statement goes as its text, never as an SQL-level ``PREPARE`` kept on the
# connection: behind a pooler in transaction mode (PgBouncer) the next transaction may
# run on another server connection, which has not prepared it, or has prepared it for
# another client (D19). What the server's parse and plan cost is in docs/performance.md;
# the served read, where planning was two thirds of the server's time, goes through a
# server-side function instead, planned once per server connection (``app.plumbing.planned``).

_placeholder_sql: dict[tuple[str, str], str] = {}


def _text(sql: str) -> str:
    """``sql`` with the bound database's placeholder for each ``?``."""
    param = db.obj.param
    key = (param, sql)
    text = _placeholder_sql.get(key)
    if text is None:
        text = _placeholder_sql[key] = sql.replace("?", param)
    return text


# A statement built by one function and run by another (several of them in one round trip:
# ``execute_batch``): its SQL and its parameters.
Statement = tuple[str, Any]


def execute(sql: str, params=()):
    """Run ``sql`` (``?`` placeholders) on the bound database; returns the cursor."""
    return db.execute_sql(_text(sql), params)


def in_list(values) -> str:
    """``(?, ?, ...)``: one placeholder for each of ``values``, for ``x IN (...)``."""
    return "(" + ", ".join(["?"] * len(values)) + ")"


def sqlstate(exc: Exception) -> str | None:
    """The SQLSTATE of a database error (peewee wraps the driver's, which carries it)."""
    return getattr(getattr(exc, "orig", None) or exc.__context__, "pgcode", None)


def execute_named(sql: str, params: dict):
    """Run ``sql`` whose parameters are named (psycopg2's ``%(name)s``, a literal ``%`` written
    ``%%``), bound from the dict ``params``, on the bound database; returns the cursor. For a
    statement with many parameters, several of them used more than once (the served read)."""
    return db.execute_sql(sql, params)


def execute_batch(statements: list[Statement]):
    """Run ``statements`` (``(sql, params)``, in order) in one round trip and return the last
    one's cursor (each still its own statement: under READ COMMITTED each sees what the
    previous ones committed or locked)."""
    return db.execute_sql("; ".join(_text(sql) for sql, _ in statements),
                          [value for _, values in statements for value in values])


def columns(model, alias: str | None = None) -> str:
    """``alias.col1, alias.col2, ...`` for every field of ``model``, in field order."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + repr_column(f) for f in model._meta.sorted_fields)


def table(model) -> str:
    return f'"{model._meta.table_name}"'


def instance(model, values):
    """A model instance from a row of ``columns(model)``, as peewee would build it."""
    obj = model(__no_default__=True)
    data = obj.__data__
    for field, value in zip(model._meta.sorted_fields, values):
        data[field.name] = field.python_value(value) if value is not None else None
    obj._dirty.clear()
    return obj


def insert_rows_statement(model, rows: list[dict]) -> tuple[str, list]:
    """One multi-row INSERT of ``rows`` (keyed by field name, a non-empty list), defaults
    filled as peewee would: its SQL and parameters, to run with others."""
    fields = [f for f in model._meta.sorted_fields if not (f.primary_key and f.field_type == "AUTO")]
    params = []
    for row in rows:
        for field in fields:
            value = row.get(field.name, field.default)
            if callable(value):
                value = value()
            params.append(field.db_value(value))
    placeholders = in_list(fields)
    return (f"INSERT INTO {table(model)} ({', '.join(repr_column(f) for f in fields)}) VALUES "
            + ", ".join([placeholders] * len(rows)), params)


def repr_column(field) -> str:
    return f'"{field.column_name}"'
