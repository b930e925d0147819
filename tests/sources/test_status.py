"""The status page's data (D30): the parts (API, workers, engine as the health job last saw it) and
each source with its 24 hourly cells; overall degraded when a part is down or a source unhealthy."""
from __future__ import annotations

from datetime import datetime

from app.extensions import db
from app.sources import health, status

NOW = datetime(2026, 3, 2, 12, 30)


def test_the_engine_is_unknown_until_the_health_job_saw_it(conn):
    parts = {p["name"]: p for p in status.page(NOW)["parts"]}
    assert parts["api"]["status"] == "operational" and parts["engine"]["status"] == "unknown"
    assert parts["workers"]["status"] == "down" and parts["workers"]["count"] == 0  # none registered here
    status.note_engine(False, NOW)
    engine = {p["name"]: p for p in status.page(NOW)["parts"]}["engine"]
    assert engine == {"name": "engine", "status": "down", "checked_at": "2026-03-02T12:30:00Z"}
    status.note_engine(True, NOW)
    assert {p["name"]: p for p in status.page(NOW)["parts"]}["engine"]["status"] == "operational"


def test_each_source_now_and_hour_by_hour(conn):
    with db.atomic():
        health.record_answers([("github", "GitHub", "found", 100)] * 5, datetime(2026, 3, 2, 10, 15))
    page = status.page(NOW)
    (github,) = page["sources"]
    assert github["status"] == "healthy" and len(github["hours"]) == 24 and len(page["hours"]) == 24
    assert page["hours"][-1] == "2026-03-02T12:00:00Z"
    assert github["hours"][-3] == {"hour": "2026-03-02T10:00:00Z", "answers": 5, "answered_ratio": 1.0,
                                   "status": "healthy"}
    assert set(github) == {"id", "name", "status", "since", "answered_ratio", "p95_latency_ms", "quarantined",
                           "hours"}
