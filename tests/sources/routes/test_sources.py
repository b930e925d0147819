"""Source health through the API (D30): the sources list (any key, 1 credit), the public status page,
and a quarantined source left out of a live scan, listed as skipped, asked again by a re-run."""
from __future__ import annotations

import json
from datetime import datetime

import pytest
import requests
from freezegun import freeze_time

from app.accounts import admin
from app.extensions import db
from app.scans.models import Scan
from app.sources import health
from tests.api.helpers import balance

SCAN = "/api/v1/scan"
START = "2026-11-21 12:00:00"


@pytest.fixture(autouse=True)
def fresh_cache(app):
    health.forget_cache()
    yield
    health.forget_cache()


def seed(answers):
    with db.connection_context(), db.atomic():
        health.record_answers(answers, datetime(2026, 11, 21, 11, 50))


def status_of(scan_id):
    with db.connection_context():
        return Scan.get_by_id(scan_id).status


def test_any_key_lists_the_sources_for_a_credit(client, account):
    seed([("github", "GitHub", "found", 300)] * 19 + [("github", "GitHub", "timeout", 9000)])
    with db.connection_context():
        _, narrow = admin.issue_key(account.id, "narrow", scopes="activity:read")
    before = balance(account)
    with freeze_time(START):
        answer = client.get("/api/v1/sources", headers={"Authorization": f"Bearer {narrow}"})
    assert answer.status_code == 200, answer.json
    assert answer.json == {"ok": True, "data": [
        {"id": "github", "name": "GitHub", "kinds": [], "status": "healthy", "since": answer.json["data"][0]["since"],
         "answered_ratio": 0.95, "p95_latency_ms": 500, "last_probe_at": None, "last_probe_ok": None,
         "quarantined": False}]}
    assert balance(account) == before - 1
    assert client.get("/api/v1/sources").status_code == 401


def test_the_status_page_needs_no_key_and_shows_each_source_over_24_hours(client, account):
    seed([("gravatar", "Gravatar", "error", 100)] * 20)
    with db.connection_context():
        health.evaluate(datetime(2026, 11, 21, 11, 55))
    with freeze_time(START):
        page = client.get("/status.json")
        html = client.get("/status")
    assert page.status_code == 200 and html.status_code == 200
    body = page.json
    assert body["status"] == "degraded" and [p["name"] for p in body["parts"]] == ["api", "workers", "engine"]
    (source,) = body["sources"]
    assert (source["id"], source["status"], source["quarantined"], len(source["hours"])) == ("gravatar", "down",
                                                                                            True, 24)
    assert source["hours"][-2] == {"hour": "2026-11-21T11:00:00Z", "answers": 20, "answered_ratio": 0.0,
                                   "status": "down"}
    assert "Gravatar" in html.get_data(as_text=True) and "script-src 'none'" in html.headers["Content-Security-Policy"]
    assert account.customer.name not in html.get_data(as_text=True)  # nothing of a customer


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_quarantined_source_is_left_out_listed_as_skipped_and_rerun_once_back(client, account, jobs, simulator):
    requests.post(f"{simulator.url}/_sim/engine/sources/gravatar", json={"mode": "ok"}, timeout=5)
    seed([("gravatar", "Gravatar", "found", 100), ("github", "github", "found", 100)])  # the sources known
    with db.connection_context():
        health.quarantine("github", "checks failing")
    with freeze_time(START) as frozen:
        scan_id = client.post(SCAN, json={"target": "jane.doe@example.com"}, headers=account.headers).json["scan_id"]
        assert jobs.run(frozen, until=lambda: status_of(scan_id) == "completed")
        result = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]
        skipped = [s for s in result["sources"] if s.get("reason") == "quarantined"]
        assert skipped == [{"id": "github", "name": "github", "status": "skipped", "checked_at": None,
                            "latency_ms": None, "reason": "quarantined"}]
        asked = [s for s in result["sources"] if s.get("reason") is None]
        assert {s["id"] for s in asked} == {"gravatar"}  # the submission named the sources asked
        assert result["coverage"]["checked"] == len(asked)
        # While it is quarantined there is nothing to re-run; once released, the re-run asks it.
        held = client.post(f"{SCAN}/{scan_id}/rerun", headers=account.headers)
        assert held.status_code == 409 and "quarantined" in held.json["message"]
        with db.connection_context():
            health.release("github")
        health.forget_cache()
        rerun = client.post(f"{SCAN}/{scan_id}/rerun", headers=account.headers)
        assert rerun.status_code == 202, rerun.json
        assert jobs.run(frozen, until=lambda: status_of(rerun.json["scan_id"]) == "completed")
        merged = client.get(f"{SCAN}/{rerun.json['scan_id']}", headers=account.headers).json["result"]
    github = next(s for s in merged["sources"] if s["id"] == "github")
    assert github["status"] != "skipped" and "reason" not in github
    with db.connection_context():
        # The completed scans' answers were counted for the sources' health.
        counted = health.store.counts_since(datetime(2026, 11, 21))
    assert "gravatar" in counted and json.dumps(counted)


def test_source_events_are_listed_only_when_asked_for(client, account):
    seed([("gravatar", "Gravatar", "error", 100)] * 20)
    with db.connection_context():
        health.evaluate(datetime(2026, 11, 21, 11, 55))
    plain = client.get("/api/v1/events", headers=account.headers)
    assert plain.status_code == 200 and plain.json["data"] == []  # never by default
    asked = client.get("/api/v1/events?events=source.degraded,scan.completed", headers=account.headers)
    (event,) = asked.json["data"]
    assert event["event"] == "source.degraded" and event["livemode"] is True
    assert event["body"] == {"event": "source.degraded", "source_id": "gravatar", "name": "Gravatar",
                             "status": "down", "previous_status": "healthy", "at": "2026-11-21T11:55:00Z"}
