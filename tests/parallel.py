"""The suite runs in several pytest-xdist workers (``make test``: ``-n``); each worker gets a
PostgreSQL database and a Redis database of its own, so that one worker's emptied tables and
flushed Redis never reach another's test.

With ``TEST_DATABASE_URL`` / ``TEST_REDIS_URL`` set (CI: the machine's servers), worker ``gwN``
rewrites them before anything reads them: the database name gains ``_gwN`` (created on first
use, from the same server; ``TEST_DATABASE_DIRECT_URL``, the same server past a pooler, alike) and the Redis database number becomes one of ``REDIS_DBS``. Without
them every worker starts its own embedded servers (tests/conftest.py), which are apart already.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

# Redis database numbers for the workers, the first for gw0 (and a run without xdist). 13 is the
# QA scenarios' own (simulator/scenarios/stack.py) and 11 the bench's: both left out.
REDIS_DBS = (15, 14, 12, 10, 9, 8, 7, 6)


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    index = int(worker.removeprefix("gw"))
    if os.environ.get("TEST_DATABASE_URL"):
        os.environ["TEST_DATABASE_URL"] = worker_database(os.environ["TEST_DATABASE_URL"], worker)
    if os.environ.get("TEST_DATABASE_DIRECT_URL"):  # the same database past a pooler (LISTEN, D19)
        os.environ["TEST_DATABASE_DIRECT_URL"] = worker_database(os.environ["TEST_DATABASE_DIRECT_URL"], worker)
    if os.environ.get("TEST_REDIS_URL"):
        os.environ["TEST_REDIS_URL"] = worker_redis(os.environ["TEST_REDIS_URL"], index)


def worker_database(url: str, worker: str) -> str:
    """``url`` naming the worker's database, which is created when the server has none of that name."""
    parts = urlsplit(url)
    name = f"{parts.path.strip('/') or 'test'}_{worker}"
    _create_database(urlunsplit(parts._replace(path="/postgres")), name)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _create_database(maintenance_url: str, name: str) -> None:
    import psycopg2
    from psycopg2 import sql

    conn = psycopg2.connect(maintenance_url)
    try:
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cursor.fetchone() is None:
                try:
                    cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except psycopg2.errors.DuplicateDatabase:
                    pass  # another run created it meanwhile
    finally:
        conn.close()


def worker_redis(url: str, index: int) -> str:
    """``url`` with the Redis database number of worker ``index``: ``REDIS_DBS`` taken from the
    number ``url`` names on (15, the default, is its start), so that two runs on one Redis given
    different numbers (two checkouts tested at once) do not flush each other's queues."""
    parts = urlsplit(url)
    start = _db_number(parts)
    order = REDIS_DBS[REDIS_DBS.index(start):] + REDIS_DBS[:REDIS_DBS.index(start)] if start in REDIS_DBS else REDIS_DBS
    number = order[index % len(order)]
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
        return urlunsplit(parts._replace(query=(query + "&" if query else "") + f"db={number}"))
    return urlunsplit(parts._replace(path=f"/{number}"))


def _db_number(parts) -> int | None:
    """The database number a Redis URL names (its path, or ``db=`` of a socket's query), if any."""
    if parts.scheme == "unix":
        found = [p.removeprefix("db=") for p in parts.query.split("&") if p.startswith("db=")]
        value = found[0] if found else ""
    else:
        value = parts.path.strip("/")
    return int(value) if value.isdigit() else None
