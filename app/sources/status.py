"""The status page (D30): the service's parts (API, workers, engine) and each source, now and hour by
hour over the last 24 hours. Public (no key): nothing in it is about a customer or a person.

The engine's state is what the ``sources`` periodic job last saw when it asked the engine for its
sources listing (kept in Redis for three of its intervals, then ``unknown``): a page view never calls
the engine.
"""
from __future__ import annotations

import json
from datetime import datetime

from redis.exceptions import RedisError

from app.plumbing import jobs, runtime
from app.plumbing.models import iso, utcnow
from app.sources import health

ENGINE_KEY = "scan-api:status:engine"
OPERATIONAL, DEGRADED_PART, DOWN_PART, UNKNOWN = "operational", "degraded", "down", "unknown"


def note_engine(ok: bool, now: datetime | None = None) -> None:
    """What the health job saw of the engine just now."""
    try:
        runtime.redis().set(ENGINE_KEY, json.dumps({"ok": ok, "at": iso(now or utcnow())}),
                            ex=3 * int(runtime.config["RECOVERY_INTERVAL_SECONDS"]))
    except RedisError:
        pass


def _engine() -> dict:
    try:
        raw = runtime.redis().get(ENGINE_KEY)
    except RedisError:
        raw = None
    if raw is None:
        return {"name": "engine", "status": UNKNOWN, "checked_at": None}
    seen = json.loads(raw)
    return {"name": "engine", "status": OPERATIONAL if seen["ok"] else DOWN_PART, "checked_at": seen["at"]}


def _workers() -> dict:
    alive = jobs.workers_alive()
    status = UNKNOWN if alive is None else OPERATIONAL if alive else DOWN_PART
    return {"name": "workers", "status": status, "count": alive}


def page(now: datetime | None = None) -> dict:
    """``/status.json``: the parts, each source now and its 24 hourly cells, and the overall state."""
    now = now or utcnow()
    parts = [{"name": "api", "status": OPERATIONAL}, _workers(), _engine()]
    day = health.day_by_hour(now)
    sources = [{key: source[key] for key in ("id", "name", "status", "since", "answered_ratio", "p95_latency_ms",
                                             "quarantined", "hours")} for source in day["sources"]]
    troubled = any(p["status"] == DOWN_PART for p in parts) or any(s["status"] != health.HEALTHY for s in sources)
    return {"ok": True, "status": DEGRADED_PART if troubled else OPERATIONAL, "generated_at": iso(now),
            "parts": parts, "sources": sources, "hours": day["hours"]}
