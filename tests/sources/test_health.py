"""Source health (D30): the status rule, counting, quarantine, what submissions leave out, events."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.events.models import Event
from app.extensions import db
from app.plumbing.errors import InvalidRequest, NotFound
from app.scans.results import coverage_of, normalize_result
from app.sources import health
from app.sources.models import Source
from app.webhooks import endpoints
from app.webhooks.models import WebhookDelivery
from tests import factories

NOW = datetime(2026, 3, 2, 12, 0, 0)


def answers(source_id, good, bad, latency=200):
    return [(source_id, source_id.title(), "not_found", latency)] * good + [(source_id, source_id.title(), "error", latency)] * bad


@pytest.mark.parametrize(("good", "bad", "p95", "streak", "status"), [
    (19, 0, None, 0, "healthy"),
    (18, 2, None, 0, "healthy"),      # 0.9 answered: not under it
    (17, 3, None, 0, "degraded"),     # 0.85 over 20
    (0, 19, None, 0, "healthy"),      # under 20 answers: too few to judge
    (10, 10, None, 0, "degraded"),    # 0.5: not under it
    (9, 11, None, 0, "down"),
    (20, 0, 15_000, 0, "degraded"),   # p95 over 10 s
    (20, 0, 10_000, 0, "healthy"),
    (20, 0, None, -1, "healthy"),     # one wrong round is not yet broken
    (20, 0, None, -2, "broken"),
])
def test_the_status_rule(good, bad, p95, streak, status):
    assert health.judge(health.Health(good + bad, good, p95), streak) == status


def test_p95_is_the_upper_bound_of_the_latency_class_that_holds_it():
    classes = {health.latency_class(200): (94, 94), health.latency_class(12_000): (6, 6), health.NO_LATENCY: (50, 50)}
    assert health.health_of(classes).p95_latency_ms == 15_000
    classes[health.latency_class(200)] = (200, 200)  # 6 of 206 slow: under 5 %
    assert health.health_of(classes).p95_latency_ms == 250


def test_a_source_mostly_failing_goes_down_is_quarantined_announced_and_left_out(conn):
    account = factories.customer()
    listening = endpoints.create(account.key, url="https://hooks.example.com/a", events=["source.degraded"])
    factories.customer(name="Another")  # no endpoint listing it: the feed only
    with freeze_time(NOW):
        with db.atomic():
            health.record_answers(answers("gravatar", 5, 15) + answers("github", 20, 0), NOW)
        report = health.evaluate(NOW)
    assert report == {"quarantined": 1, "changed": 1}
    source = Source.get_by_id("gravatar")
    assert (source.status, source.quarantined, source.quarantined_by, source.quarantine_reason) == (
        "down", True, "auto", "down")
    assert Source.get_by_id("github").status == "healthy"
    deliveries = list(WebhookDelivery.select())
    assert [(d.event, d.endpoint_id) for d in deliveries] == [("source.degraded", listening[0]["endpoint_id"])]
    body = json.loads(deliveries[0].body)
    assert body == {"event": "source.degraded", "source_id": "gravatar", "name": "Gravatar", "status": "down",
                    "previous_status": "healthy", "at": "2026-03-02T12:00:00Z"}
    assert Event.select().where(Event.kind == "source.degraded").count() == 2  # one per customer and mode
    # New submissions leave it out; the scan lists it as skipped, coverage counts the sources asked.
    assert "gravatar" not in health.asked_sources("email") and "github" in health.asked_sources("email")
    assert health.asked_sources("email", ["gravatar", "github"]) == ["github"]
    result = {"sources": [{"id": "github", "name": "GitHub", "status": "found", "checked_at": None, "latency_ms": 5}]}
    marked = health.mark_left_out(result, "email")
    assert marked["sources"][-1] == {"id": "gravatar", "name": "Gravatar", "status": "skipped", "checked_at": None,
                                     "latency_ms": None, "reason": "quarantined"}
    assert coverage_of(marked["sources"]) == {"checked": 1, "found": 1, "failed": 0, "ratio": 1.0}
    # The reason survives the result's normalisation (every read normalises the stored result).
    read = normalize_result({**_result(), "sources": marked["sources"]}, "email")
    assert read["sources"][-1]["reason"] == "quarantined"
    # A re-run asks the sources that were quarantined once they are not.
    assert health.rerun_sources(read) == []
    health.release("gravatar")
    assert health.rerun_sources(read) == ["gravatar"]
    assert health.asked_sources("email") is None  # nothing quarantined: the engine's own choice


def _result():
    return {"risk": {"score": 10}, "counts": {}, "profiles": {"verified": [], "weak": []},
            "contacts": {"emails": [], "phones": []}, "breaches": []}


def test_an_endpoint_with_the_default_events_hears_nothing_of_sources(conn):
    account = factories.customer()
    endpoints.create(account.key, url="https://hooks.example.com/a")
    with db.atomic():
        health.record_answers(answers("gravatar", 0, 25), NOW)
    health.evaluate(NOW)
    assert WebhookDelivery.select().count() == 0


def test_a_released_source_starts_afresh_and_recovers(conn):
    with db.atomic():
        health.record_answers(answers("gravatar", 0, 25), NOW)
    health.evaluate(NOW)
    assert Source.get_by_id("gravatar").quarantined
    # Without probes, an automatic quarantine ends once the hour no longer judges it down.
    later = NOW + timedelta(minutes=61)
    report = health.evaluate(later)
    source = Source.get_by_id("gravatar")
    assert report == {"released": 1, "changed": 1}
    assert (source.quarantined, source.status, source.counted_since) == (False, "healthy", later)
    assert Event.select().where(Event.kind == "source.recovered").count() == 0  # no customer: nowhere to store


def test_an_operator_quarantine_stands_until_an_operator_releases_it(conn):
    with db.atomic():
        health.record_answers(answers("github", 20, 0), NOW)
    with pytest.raises(InvalidRequest):
        health.quarantine("github", "  ")
    shown = health.quarantine("github", "the platform changed its pages", now=NOW)
    assert shown["quarantined"] is True and shown["status"] == "healthy"
    health.evaluate(NOW + timedelta(hours=2))
    assert Source.get_by_id("github").quarantined  # not released by itself
    assert health.release("github", now=NOW)["quarantined"] is False
    with pytest.raises(NotFound):
        health.quarantine("nope", "x")


def test_the_listing_and_the_day_by_hour(conn):
    with db.atomic():
        health.record_answers(answers("github", 18, 2, latency=300), NOW - timedelta(minutes=30))
        health.record_answers(answers("github", 1, 0), NOW - timedelta(hours=3))
        health.record_answers(answers("github", 1, 0), NOW - timedelta(hours=30))  # older than the day
    listed = health.list_sources(NOW)
    assert listed == [{"id": "github", "name": "Github", "kinds": [], "status": "healthy",
                       "since": listed[0]["since"], "answered_ratio": 0.9, "p95_latency_ms": 500,
                       "last_probe_at": None, "last_probe_ok": None, "quarantined": False}]
    day = health.day_by_hour(NOW)
    cells = day["sources"][0]["hours"]
    assert len(cells) == 24 and len(day["hours"]) == 24
    assert cells[-2]["answers"] == 20 and cells[-2]["answered_ratio"] == 0.9 and cells[-2]["status"] == "healthy"
    assert cells[-1]["answers"] == 0 and cells[-1]["status"] is None
    assert cells[-4]["answers"] == 1 and sum(c["answers"] for c in cells) == 21
    assert cells[0]["status"] is None
    assert health.remove_old(NOW) == 1


def test_completed_live_scans_count_their_source_answers_test_scans_do_not(conn):
    account = factories.customer()
    admin.issue_key(account.id, "sandbox", livemode=False)

    class Row:
        def __init__(self, livemode):
            self.livemode = livemode
            self.result_json = json.dumps({"sources": [
                {"id": "github", "name": "GitHub", "status": "timeout", "latency_ms": 9000},
                {"id": "x", "name": "X", "status": "skipped", "latency_ms": None}]})
    with db.atomic():
        health.record_scans([Row(True), Row(False)])
    counts = health.store.counts_since(NOW - timedelta(days=3650))
    assert counts == {"github": {health.latency_class(9000): (1, 0)}}
