"""Database binding: one ``DatabaseProxy`` bound to PostgreSQL, the only database.

PostgreSQL gets a connection pool so a request or job does not pay for a new
connection each time. With ``DATABASE_URL`` unset (development, tests) the URL is
that of the embedded server in the instance folder (``app.embedded``).
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from urllib.parse import parse_qs, urlparse

from peewee import DatabaseError, DatabaseProxy, InterfaceError, OperationalError
from playhouse.db_url import connect, parse
from playhouse.pool import PooledPostgresqlDatabase

# Bound to PostgreSQL at start-up by ``init_db``. Defined here, not in ``app.extensions``
# (which holds Flask extensions), so that models and services reach the database without
# importing Flask.
db = DatabaseProxy()


UNKNOWN_PREPARED_STATEMENT = "26000"  # SQLSTATE invalid_sql_statement_name
DUPLICATE_PREPARED_STATEMENT = "42P05"  # SQLSTATE duplicate_prepared_statement


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
        self._prepared: dict[int, set[str]] = {}  # statement names prepared on each connection
        super().__init__(*args, **kwargs)

    def _close_raw(self, conn):
        self._prepared.pop(self.conn_key(conn), None)
        return super()._close_raw(conn)

    def _sqlstate_when_idle(self, exc, conn) -> str | None:
        """The SQLSTATE of ``exc`` when the connection is outside a transaction (so that the
        statement can be tried again on it), else None."""
        original = getattr(exc, "orig", None) or exc.__context__  # peewee wraps the driver's error
        if self._adapter.txn_status(conn) != self._adapter.txn_idle:
            return None
        return getattr(original, "pgcode", None)

    def _prepare(self, conn, names: set[str], texts) -> None:
        """PREPARE the statements of ``texts`` the connection has not prepared yet, in one round trip.

        The server may have one already although ``names`` does not say so: a PREPARE it ran whose
        answer was lost (a connection cut at that moment, then restored). The name is the hash of
        the text, so the statement it holds is this one: taken as prepared, one by one."""
        missing = [(name, prepare) for name, prepare, _ in texts if name not in names]
        if not missing:
            return
        try:
            self.execute_sql("; ".join(prepare for _, prepare in missing))
        except DatabaseError as exc:
            if self._sqlstate_when_idle(exc, conn) != DUPLICATE_PREPARED_STATEMENT:
                raise
            for name, prepare in missing:
                try:
                    self.execute_sql(prepare)
                except DatabaseError as again:
                    if self._sqlstate_when_idle(again, conn) != DUPLICATE_PREPARED_STATEMENT:
                        raise
                names.add(name)
        names.update(name for name, _ in missing)

    def execute_prepared_batch(self, statements):
        conn = self.connection()
        names = self._prepared.setdefault(self.conn_key(conn), set())
        texts = [_prepared_texts(sql) for sql, _ in statements]
        self._prepare(conn, names, texts)
        params = [value for _, values in statements for value in values]
        return self.execute_sql("; ".join(run for _, _, run in texts), params)

    def execute_prepared(self, sql: str, params):
        """``sql`` (``?`` placeholders) as a statement prepared once per connection.

        A hot statement's parse and plan cost the server more than running it (a read's one
        statement: 0.45 ms of 0.58). If the server no longer knows the name (a connection
        reset by a pooler, an id reused by a new connection), it is prepared again, once.
        """
        name, prepare, run = _prepared_texts(sql)
        conn = self.connection()
        names = self._prepared.setdefault(self.conn_key(conn), set())
        self._prepare(conn, names, [(name, prepare, run)])
        try:
            return self.execute_sql(run, params)
        except DatabaseError as exc:
            if self._sqlstate_when_idle(exc, conn) != UNKNOWN_PREPARED_STATEMENT:
                raise
        names.clear()  # a server that forgot one forgot them all (DEALLOCATE ALL, a reset session)
        self.execute_sql(prepare)
        names.add(name)
        return self.execute_sql(run, params)

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


def describe_url(url: str) -> str:
    """``scheme://host:port/name`` of a database URL, without its user or password."""
    parsed = urlparse(url)
    host = parsed.hostname or parse_qs(parsed.query).get("host", ["localhost"])[0]  # a socket's folder
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}"


def check_reachable(url: str, timeout: int = 5) -> None:
    """Open one connection to ``url`` and run ``SELECT 1``, outside the shared proxy (so a
    forking server holds no connection), or raise DatabaseUnreachable."""
    database = None
    try:
        database = connect(url, connect_timeout=timeout)
        database.connect()
        database.execute_sql("SELECT 1")
    except Exception as exc:  # any driver's failure: one line, never its traceback
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise DatabaseUnreachable(f"the database at {describe_url(url)} is unreachable: {first}") from None
    finally:
        if database is not None and not database.is_closed():
            database.close()


def make_database(url: str):
    # Pooled: connections are returned to the pool on close() and reused.
    return PostgresPool(**parse(url), max_connections=32, stale_timeout=300, timeout=10, connect_timeout=5)


def database_url(settings: dict) -> str:
    """``DATABASE_URL``, or when it is unset that of the embedded PostgreSQL of the instance
    folder, started now if it is not running."""
    if settings.get("DATABASE_URL"):
        return settings["DATABASE_URL"]
    from app import embedded
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
    the customer's row with ``SELECT ... FOR UPDATE`` (``services.accounts.lock_customer``)."""
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


log = logging.getLogger(__name__)
CONNECTION_ERRORS = (OperationalError, InterfaceError)


@contextmanager
def transaction_with_known_outcome(committed: Callable[[], bool]):
    """``write_transaction``, whose COMMIT may be answered by a broken connection.

    When the connection breaks during COMMIT, the server may have committed (its answer was
    lost on the way back) or not (the COMMIT never reached it). Answering 503 either way
    charged a live key for a scan it was told had failed, and a retry made a duplicate. So
    after a connection error at COMMIT, ``committed()`` looks on a fresh connection (for a
    row the transaction wrote, by an id chosen before it) and the transaction ends as it
    really did: normally if it committed, with the connection error if it did not.
    """
    body_done = False
    try:
        with write_transaction() as txn:
            yield txn
            body_done = True
    except CONNECTION_ERRORS:
        if not body_done:
            raise
        _reconnect()
        if not committed():
            raise
        log.warning("the database connection broke during COMMIT; the transaction had committed")


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

_placeholder_sql: dict[tuple[str, str], str] = {}


def execute(sql: str, params=()):
    """Run ``sql`` (``?`` placeholders) on the bound database; returns the cursor."""
    param = db.obj.param
    key = (param, sql)
    text = _placeholder_sql.get(key)
    if text is None:
        text = _placeholder_sql[key] = sql.replace("?", param)
    return db.execute_sql(text, params)


def execute_prepared(sql: str, params=()):
    """``execute``, as a server-side prepared statement (``PostgresPool.execute_prepared``)."""
    return db.obj.execute_prepared(sql, params)


def execute_prepared_batch(statements: list[tuple[str, object]]):
    """Run ``statements`` (``(sql, params)``, in order) and return the last one's cursor: one
    round trip of prepared statements (each still its own statement: under READ COMMITTED
    each sees what the previous ones committed or locked)."""
    return db.obj.execute_prepared_batch(statements)


_prepared_texts_cache: dict[str, tuple[str, str, str]] = {}


def _prepared_texts(sql: str) -> tuple[str, str, str]:
    """The name, ``PREPARE`` and ``EXECUTE`` texts of ``sql`` (``?`` placeholders become ``$n``)."""
    texts = _prepared_texts_cache.get(sql)
    if texts is None:
        name = "hot_" + hashlib.sha1(sql.encode(), usedforsecurity=False).hexdigest()[:16]  # a name, not a secret
        parts = sql.split("?")
        numbered = "".join(part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, 1))
        run = f"EXECUTE {name}" + (f" ({', '.join(['%s'] * (len(parts) - 1))})" if len(parts) > 1 else "")
        texts = _prepared_texts_cache[sql] = (name, f"PREPARE {name} AS {numbered}", run)
    return texts


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
    placeholders = "(" + ", ".join("?" * len(fields)) + ")"
    return (f"INSERT INTO {table(model)} ({', '.join(repr_column(f) for f in fields)}) VALUES "
            + ", ".join([placeholders] * len(rows)), params)


def repr_column(field) -> str:
    return f'"{field.column_name}"'
