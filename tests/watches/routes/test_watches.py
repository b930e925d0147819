"""Watches (D28): create with a baseline scan (charged and limited as a creation, within the watch
limit), list, read, pause, resume, end and run; scope ``watches``; test keys on the sandbox."""
from __future__ import annotations

import re

from freezegun import freeze_time

from app.accounts import access, admin
from app.activity.models import ActivityEntry
from app.extensions import db
from app.scans.models import Scan
from app.watches import scopes as watch_scopes
from app.watches.models import Watch
from tests import factories
from tests.api.helpers import assert_books_balance, balance

WATCHES = "/api/v1/watches"
START = "2026-11-21 12:00:00"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def create(client, account, **body):
    return client.post(WATCHES, headers=account.headers,
                       json={"target": "jane.doe@example.com", "interval": "weekly", **body})


def scans_of_watch(watch_id):
    with db.connection_context():
        return list(Scan.select().where(Scan.watch_id == watch_id).order_by(Scan.created_at))


def test_a_watch_is_created_with_its_baseline_scan_paid_by_the_call(client, account):
    before = balance(account)
    with freeze_time(START):
        r = create(client, account, purpose="fraud_prevention", case_ref="CASE-1")
    assert r.status_code == 201, r.json
    body = r.json
    assert body["watch_id"].startswith("wch_") and body["status"] == "active"
    assert (body["target"], body["kind"], body["interval"], body["livemode"]) == (
        "jane.doe@example.com", "email", "weekly", True)
    assert (body["purpose"], body["case_ref"], body["created_at"]) == ("fraud_prevention", "CASE-1",
                                                                       "2026-11-21T12:00:00Z")
    # One to two weeks after its creation: at its slot's place in the interval (app.watches.watch_times).
    assert ISO.match(body["next_scan_at"]) and "2026-11-28T12:00:00Z" <= body["next_scan_at"] < "2026-12-05T12:00:00Z"
    [scan] = scans_of_watch(body["watch_id"])
    assert body["last_scan_id"] == scan.id and body["last_change_at"] is None
    assert (scan.purpose, scan.case_ref, scan.status) == ("fraud_prevention", "CASE-1", "queued")
    assert balance(account) == before - 1  # one credit: the call, which pays for the baseline scan
    assert_books_balance(account)
    with db.connection_context():
        entry = ActivityEntry.select().where(ActivityEntry.customer_id == account.id).get()
    assert (entry.action, entry.status, entry.credits) == ("watch.create", 201, 1)


def test_list_read_pause_resume_and_end_each_cost_a_credit(client, account):
    with freeze_time(START):
        first = create(client, account).json["watch_id"]
    with freeze_time("2026-11-21 12:00:01"):
        second = create(client, account, target="+447700900123", interval="daily").json["watch_id"]
    before = balance(account)
    page = client.get(f"{WATCHES}?limit=1", headers=account.headers).json
    assert [w["watch_id"] for w in page["data"]] == [second] and page["has_more"]
    rest = client.get(f"{WATCHES}?limit=1&starting_after={second}", headers=account.headers).json
    assert [w["watch_id"] for w in rest["data"]] == [first] and not rest["has_more"]
    phones = client.get(f"{WATCHES}?kind=phone", headers=account.headers).json["data"]
    assert [w["watch_id"] for w in phones] == [second]

    paused = client.patch(f"{WATCHES}/{first}", headers=account.headers, json={"status": "paused"})
    assert paused.status_code == 200 and (paused.json["status"], paused.json["next_scan_at"]) == ("paused", None)
    assert [w["watch_id"] for w in client.get(f"{WATCHES}?status=paused", headers=account.headers).json["data"]] \
        == [first]
    with freeze_time("2026-12-20 08:00:00"):
        resumed = client.patch(f"{WATCHES}/{first}", headers=account.headers,
                               json={"status": "active", "interval": "monthly", "case_ref": "CASE-9"})
    assert resumed.json["status"] == "active" and resumed.json["case_ref"] == "CASE-9"
    # The next due time after now at its slot's place: at least 30 days after creation.
    assert "2026-12-20T08:00:00Z" < resumed.json["next_scan_at"] < "2027-01-20T12:00:00Z"

    ended = client.delete(f"{WATCHES}/{first}", headers=account.headers)
    assert ended.status_code == 200 and (ended.json["status"], ended.json["next_scan_at"]) == ("ended", None)
    again = client.patch(f"{WATCHES}/{first}", headers=account.headers, json={"status": "active"})
    assert again.status_code == 409 and again.json["error"] == "watch_ended"
    read = client.get(f"{WATCHES}/{first}", headers=account.headers)
    assert read.status_code == 200 and read.json["status"] == "ended"
    # 8 calls served (3 lists, 1 filter, 2 patches, 1 delete, 1 read), the 409 free
    assert balance(account) == before - 8
    assert_books_balance(account)


def test_run_queues_a_scan_now_charged_as_a_creation(client, account):
    watch_id = create(client, account).json["watch_id"]
    before = balance(account)
    r = client.post(f"{WATCHES}/{watch_id}/run", headers=account.headers)
    assert r.status_code == 202, r.json
    assert r.json["watch_id"] == watch_id and r.json["poll_url"].endswith(r.json["scan_id"])
    assert [s.id for s in scans_of_watch(watch_id)][-1] == r.json["scan_id"]
    assert balance(account) == before - 1
    assert client.get(f"{WATCHES}/{watch_id}", headers=account.headers).json["last_scan_id"] == r.json["scan_id"]
    # A watch's scan says whose it is, read alone or in the list; another scan does not.
    assert client.get(f"/api/v1/scan/{r.json['scan_id']}", headers=account.headers).json["watch_id"] == watch_id
    other = client.post("/api/v1/scan", json={"target": "someone.else@example.com"}, headers=account.headers).json
    listed = {e["scan_id"]: e.get("watch_id") for e in client.get("/api/v1/scans", headers=account.headers).json["data"]}
    assert (listed[r.json["scan_id"]], listed[other["scan_id"]]) == (watch_id, None)
    client.delete(f"{WATCHES}/{watch_id}", headers=account.headers)
    refused = client.post(f"{WATCHES}/{watch_id}/run", headers=account.headers)
    assert refused.status_code == 409 and refused.json["error"] == "watch_ended"


def test_the_watch_limit_is_429_and_free_and_ended_watches_do_not_count(client, make_customer):
    account = make_customer(tier="pro")
    with db.connection_context():
        admin.set_limits(account.id, watches=1)
    first = create(client, account).json["watch_id"]
    before = balance(account)
    refused = create(client, account, target="someone@example.com")
    assert refused.status_code == 429 and refused.json["error"] == "watch_limit_reached"
    assert balance(account) == before and len(scans_of_watch(first)) == 1
    with db.connection_context():
        assert Watch.select().where(Watch.customer == account.id).count() == 1
    client.delete(f"{WATCHES}/{first}", headers=account.headers)
    assert create(client, account, target="someone@example.com").status_code == 201


def test_another_customers_watch_is_not_found_and_bad_input_changes_nothing(client, account, make_customer):
    watch_id = create(client, account).json["watch_id"]
    other = make_customer()
    assert client.get(f"{WATCHES}/{watch_id}", headers=other.headers).status_code == 404
    assert client.delete(f"{WATCHES}/{watch_id}", headers=other.headers).status_code == 404
    bad = create(client, account, interval="hourly")
    assert bad.status_code == 400 and bad.json["error"] == "invalid_request"
    assert create(client, account, target="x").json["error"] == "target_too_short"
    with db.connection_context():
        assert Watch.select().count() == 1


def test_a_key_without_the_watches_scope_is_refused_free(client, account):
    with db.connection_context():
        key, plaintext = admin.issue_key(account.id, "narrow",
                                            scopes=[s for s in access.SCOPES if s != watch_scopes.WATCHES])
    narrow = factories.Account(account.customer, key, plaintext)
    before = balance(account)
    r = create(client, narrow)
    assert r.status_code == 403 and r.json["error"] == "insufficient_scope" and "watches" in r.json["message"]
    assert balance(account) == before


def test_a_suppressed_target_cannot_be_watched(client, account):
    from app.privacy import suppressions
    with db.connection_context():
        suppressions.add("email", "jane.doe@example.com")
    r = create(client, account)
    assert r.status_code == 403 and r.json["error"] == "target_suppressed"
    with db.connection_context():
        assert Watch.select().count() == 0


def test_a_test_keys_watch_runs_on_the_sandbox_free(client, account):
    with db.connection_context():
        test = factories.sandbox_key(account)
    before = balance(account)
    r = create(client, test)
    assert r.status_code == 201 and r.json["livemode"] is False
    [scan] = scans_of_watch(r.json["watch_id"])
    assert scan.livemode is False and scan.engine_id.startswith("sbx_")
    assert balance(account) == before
    assert client.get(f"{WATCHES}/{r.json['watch_id']}", headers=account.headers).status_code == 404


def test_engine_down_leaves_no_watch_and_no_net_charge(client, account, simulator):
    from tests.api.helpers import engine_mode
    engine_mode(simulator, "down")
    r = create(client, account)
    assert r.status_code == 502 and r.json["error"] == "engine_submit_failed"
    assert balance(account) == 100
    with db.connection_context():
        assert Watch.select().count() == 0 and Scan.select().count() == 0
    assert_books_balance(account)


def test_a_repeated_creation_with_its_idempotency_key_replays_without_a_second_watch(client, account):
    headers = {**account.headers, "Idempotency-Key": "watch-1"}
    first = client.post(WATCHES, headers=headers, json={"target": "jane.doe@example.com", "interval": "daily"})
    again = client.post(WATCHES, headers=headers, json={"target": "jane.doe@example.com", "interval": "daily"})
    assert (first.status_code, again.status_code) == (201, 201) and again.json == first.json
    assert again.headers["Idempotent-Replayed"] == "true" and balance(account) == 99
    with db.connection_context():
        assert Watch.select().count() == 1
