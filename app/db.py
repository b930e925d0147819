"""Database binding: one ``DatabaseProxy`` for SQLite (default) or PostgreSQL.

SQLite gets WAL (readers never block the single writer), foreign keys and a busy
timeout, so concurrent gunicorn threads queue for the write lock instead of failing.
PostgreSQL gets a connection pool so a request or job does not pay for a new
connection each time.
"""
from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import urlparse

from peewee import PostgresqlDatabase, SqliteDatabase
from playhouse.db_url import connect

from app.extensions import db

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "busy_timeout": 30_000,
    "synchronous": "normal",  # safe with WAL: a crash loses no committed transaction's integrity
}


def make_database(url: str):
    scheme = urlparse(url).scheme
    if scheme.startswith("sqlite"):
        return connect(url, pragmas=SQLITE_PRAGMAS, check_same_thread=False)
    if scheme in ("postgres", "postgresql"):
        # Pooled: connections are returned to the pool on close() and reused.
        url = url.replace(f"{scheme}://", "postgres+pool://", 1)
        return connect(url, max_connections=32, stale_timeout=300, timeout=10, connect_timeout=5)
    return connect(url)


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


def is_sqlite() -> bool:
    return isinstance(db.obj, SqliteDatabase)


def is_postgres() -> bool:
    return isinstance(db.obj, PostgresqlDatabase)


@contextmanager
def write_transaction():
    """A transaction that serialises writers for one customer's admission.

    SQLite: ``BEGIN IMMEDIATE`` takes the write lock up front, so two admissions never
    read the same counts. PostgreSQL: a plain transaction; the caller locks the
    customer's row with ``SELECT ... FOR UPDATE`` (see ``services.accounts.lock_customer``).
    """
    if is_sqlite():
        with db.atomic("IMMEDIATE") as txn:
            yield txn
    else:
        with db.atomic() as txn:
            yield txn
