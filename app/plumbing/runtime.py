"""The process's bound settings and Redis connection, for code that runs without Flask.

``create_app`` fills this once per process (the API, each worker, the CLI); services
and jobs read it instead of ``flask.current_app`` so they run the same way in a
request, in an RQ job and in a CLI command.
"""
from __future__ import annotations

config: dict = {}


def bind(settings: dict) -> None:
    config.clear()
    config.update(settings)


def redis():
    """The Redis client, connected (or the embedded server started) on first use."""
    from app.plumbing.redis_conn import connect_redis
    if not config:
        raise RuntimeError("no app bound: call app.create_app() first")
    return connect_redis(config["REDIS_URL"], config["INSTANCE_PATH"])
