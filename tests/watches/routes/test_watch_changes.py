"""A watch's changes (D28): each completed scan compared with the watch's previous completed one by
finding ids and risk band; a change is a ``watch.changed`` event and the watch's ``last_changes``;
nothing changed, no event. An opt-out ends the target's watches with ``watch.ended``."""
from __future__ import annotations

import json

import pytest
from freezegun import freeze_time

from app.events.models import Event
from app.extensions import db
from app.plumbing import crypto
from app.privacy import suppressions
from app.scans.models import Scan
from app.watches.models import Watch
from app.webhooks.models import WebhookDelivery

WATCHES = "/api/v1/watches"
START = "2026-11-21 12:00:00"
CHANGING = "+447700904444"  # the simulator finds one more breach at each new investigation


def status_of(scan_id):
    with db.connection_context():
        return Scan.get_by_id(scan_id).status


def deliveries(event):
    with db.connection_context():
        return [json.loads(d.body) for d in WebhookDelivery.select().where(WebhookDelivery.event == event)
                .order_by(WebhookDelivery.created_at)]


def listen(client, account, payload="full"):
    r = client.post("/api/v1/endpoints", headers=account.headers,
                    json={"url": "https://hooks.example.com/w", "payload": payload,
                          "events": ["watch.changed", "watch.ended"]})
    assert r.status_code == 201, r.json


def watch_and_rescan(client, account, jobs, target):
    """Create a watch of ``target``, let its baseline complete, run it again and let that complete."""
    with freeze_time(START) as frozen:
        created = client.post(WATCHES, headers=account.headers, json={"target": target, "interval": "weekly"}).json
        assert jobs.run(frozen, until=lambda: status_of(created["last_scan_id"]) == "completed")
        rerun = client.post(f"{WATCHES}/{created['watch_id']}/run", headers=account.headers).json
        assert jobs.run(frozen, until=lambda: status_of(rerun["scan_id"]) == "completed")
    return created, rerun


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_finding_added_is_announced_and_shown_on_the_watch(client, account, jobs):
    listen(client, account)
    created, rerun = watch_and_rescan(client, account, jobs, CHANGING)
    [event] = deliveries("watch.changed")
    assert (event["watch_id"], event["scan_id"], event["previous_scan_id"]) == (
        created["watch_id"], rerun["scan_id"], created["last_scan_id"])
    changes = event["changes"]
    assert len(changes["added"]) >= 1 and changes["removed"] == []
    assert set(changes["risk"]) == {"from", "to"} and {"score", "band"} <= set(changes["risk"]["to"])
    assert event["target"] == CHANGING and set(event["added_items"]) == set(changes["added"])
    scan = client.get(f"/api/v1/scan/{rerun['scan_id']}", headers=account.headers).json
    breach_ids = {f["id"] for f in scan["result"]["findings"] if f["path"].startswith("breaches")}
    assert set(changes["added"]) & breach_ids  # the new breach, under its stable id
    read = client.get(f"{WATCHES}/{created['watch_id']}", headers=account.headers).json
    assert read["last_changes"] == changes and read["last_change_at"] is not None


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_thin_endpoint_gets_no_target_and_no_items(client, account, jobs):
    listen(client, account, payload="thin")
    watch_and_rescan(client, account, jobs, CHANGING)
    [event] = deliveries("watch.changed")
    assert "target" not in event and "added_items" not in event and event["changes"]["added"]


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_nothing_changed_sends_nothing(client, account, jobs):
    listen(client, account)
    created, _ = watch_and_rescan(client, account, jobs, "jane.doe@example.com")
    assert deliveries("watch.changed") == []
    read = client.get(f"{WATCHES}/{created['watch_id']}", headers=account.headers).json
    assert (read["last_changes"], read["last_change_at"]) == (None, None)


def test_an_opt_out_ends_the_targets_watches(client, account, make_customer):
    listen(client, account)
    watch_id = client.post(WATCHES, headers=account.headers,
                           json={"target": "Jane.Doe@example.com", "interval": "daily"}).json["watch_id"]
    other = client.post(WATCHES, headers=account.headers,
                        json={"target": "john@example.com", "interval": "daily"}).json["watch_id"]
    with db.connection_context():
        suppressions.add("email", "jane.doe@EXAMPLE.com")
    ended = client.get(f"{WATCHES}/{watch_id}", headers=account.headers).json
    assert (ended["status"], ended["next_scan_at"]) == ("ended", None)
    assert client.get(f"{WATCHES}/{other}", headers=account.headers).json["status"] == "active"
    [event] = deliveries("watch.ended")
    assert (event["watch_id"], event["reason"]) == (watch_id, "target_suppressed")


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_watch_ended_by_an_opt_out_keeps_no_identifier(client, account, jobs):
    """Its read, the list and its ``watch.ended`` (delivered and listed) name nobody, and the row
    itself has forgotten the target: not hidden, gone, even once its scans are erased."""
    listen(client, account)
    created, rerun = watch_and_rescan(client, account, jobs, "jane.doe@example.com")
    with db.connection_context():
        suppressions.add("email", "Jane.Doe@example.com")
    for scan_id in (created["last_scan_id"], rerun["scan_id"]):
        assert client.delete(f"/api/v1/scan/{scan_id}", headers=account.headers).status_code == 200
    read = client.get(f"{WATCHES}/{created['watch_id']}", headers=account.headers)
    assert read.status_code == 200 and (read.json["status"], read.json["target"]) == ("ended", None)
    [listed] = client.get(WATCHES, headers=account.headers).json["data"]
    assert listed["target"] is None
    [event] = deliveries("watch.ended")
    assert "target" not in event and event["reason"] == "target_suppressed"
    [feed] = client.get("/api/v1/events", headers=account.headers,
                        query_string={"events": "watch.ended"}).json["data"]
    assert feed["body"] == event
    with db.connection_context():
        row = Watch.get_by_id(created["watch_id"])
        assert (row.target, row.optout_hash) == (None, None)
        bodies = [e.body for e in Event.select()] + [d.body or "" for d in WebhookDelivery.select()]
    assert not [body for body in bodies if "jane.doe" in body.lower() and "watch.ended" in body]


def test_an_opt_out_ends_a_watch_kept_under_the_earlier_canonical_rule(client, account):
    """A watch made before NFC and IDNA forms keeps the opt-out hash of its domain as written: an
    opt-out written in the domain's ASCII form ends it all the same."""
    watch_id = client.post(WATCHES, headers=account.headers,
                           json={"target": "pat@bücher.example", "interval": "daily"}).json["watch_id"]
    with db.connection_context():
        Watch.update(optout_hash=crypto.target_hash("email", "pat@bücher.example")).where(
            Watch.id == watch_id).execute()
        suppressions.add("email", "pat@xn--bcher-kva.example")
    assert client.get(f"{WATCHES}/{watch_id}", headers=account.headers).json["status"] == "ended"


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_change_is_in_the_events_list_as_its_endpoints_hear_it(client, account, jobs):
    """D27: every event, a watch's too, is stored once: the list (and so the stream) shows the
    body the endpoint got, filtered by the watch, and its thin form has no personal data."""
    listen(client, account)
    created, _ = watch_and_rescan(client, account, jobs, CHANGING)
    [delivered] = deliveries("watch.changed")
    query = {"watch_id": created["watch_id"], "events": "watch.changed"}
    [listed] = client.get("/api/v1/events", headers=account.headers, query_string=query).json["data"]
    assert (listed["event"], listed["body"]) == ("watch.changed", delivered)
    [thin] = client.get("/api/v1/events", headers=account.headers,
                        query_string={**query, "payload": "thin"}).json["data"]
    assert thin["body"] == {k: v for k, v in delivered.items() if k not in ("target", "kind", "added_items")}


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_erasure_and_retention_apply_to_a_watchs_scans_and_its_change_events(client, account, jobs):
    """A watch's scans are scans: erased on request (the change event they caused keeps its thin
    body only, in the feed and in the delivery) and by retention, while the watch goes on."""
    from datetime import timedelta

    from app.plumbing.models import utcnow
    from app.privacy import erasure

    listen(client, account)
    created, rerun = watch_and_rescan(client, account, jobs, CHANGING)
    assert client.delete(f"/api/v1/scan/{rerun['scan_id']}", headers=account.headers).status_code == 200
    query = {"watch_id": created["watch_id"], "events": "watch.changed"}
    [listed] = client.get("/api/v1/events", headers=account.headers, query_string=query).json["data"]
    assert not {"target", "kind", "added_items"} & set(listed["body"])
    assert listed["body"]["changes"]["added"]  # the finding ids, which name no one, stay
    with db.connection_context():
        [delivery] = WebhookDelivery.select().where(WebhookDelivery.event == "watch.changed")
        assert delivery.body is None or CHANGING not in delivery.body
        assert erasure.erase_past_retention(utcnow() + timedelta(days=400)) >= 1
        baseline = Scan.get_by_id(created["last_scan_id"])
    assert baseline.erased_at is not None and baseline.target is None
    assert client.get(f"{WATCHES}/{created['watch_id']}", headers=account.headers).json["status"] == "active"
