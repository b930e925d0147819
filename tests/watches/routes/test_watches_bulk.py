"""Watches in bulk (D28): ``POST /api/v1/watches/bulk`` takes its targets as a bulk scan does (at most
100, Business and Enterprise, invalid or opted-out entries rejected and free), makes a watch with its
baseline scan of each valid one, paid per watch created, within the watch limit or not at all."""
from __future__ import annotations

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.activity.models import ActivityEntry
from app.extensions import db
from app.privacy import suppressions
from app.scans.models import BulkBatch, Scan
from app.watches.models import Watch
from app.watches.scopes import WATCHES
from tests import factories
from tests.api.helpers import assert_books_balance, balance, engine_mode
from tests.unit.test_response_bodies import assert_same_as_schema

BULK = "/api/v1/watches/bulk"
START = "2026-11-21 12:00:00"
TARGETS = [{"target": "jane.doe@example.com"}, {"target": "ab"}, {"target": "+447700900123", "kind": "phone"},
           {"target": "x@y", "kind": "fax"}, 42, {"target": "@janedoe"}]


def bulk(client, account, targets=None, headers=None, **body):
    return client.post(BULK, headers={**account.headers, **(headers or {})},
                       json={"targets": TARGETS if targets is None else targets, "interval": "weekly", **body})


def watches_of(account) -> list[Watch]:
    with db.connection_context():
        return list(Watch.select().where(Watch.customer == account.id).order_by(Watch.created_at, Watch.id))


def test_each_valid_target_becomes_a_watch_with_its_baseline_scan_and_the_others_are_rejected(client, account):
    from app.watches.schemas import WatchBulkCreatedSchema
    before = balance(account)
    with freeze_time(START):
        r = bulk(client, account, purpose="fraud_prevention", case_ref="CASE-7")
    assert r.status_code == 201, r.json
    assert_same_as_schema(r, WatchBulkCreatedSchema())
    body = r.json
    assert (body["total"], body["created"], body["livemode"]) == (6, 3, True)
    assert [(e["index"], e["error"]) for e in body["rejected"]] == [
        (1, "target_too_short"), (3, "invalid_kind"), (4, "invalid_request")]
    assert [(w["index"], w["target"], w["kind"]) for w in body["watches"]] == [
        (0, "jane.doe@example.com", "email"), (2, "+447700900123", "phone"), (5, "janedoe", "username")]
    for made in body["watches"]:
        assert made["status"] == "active" and made["interval"] == "weekly"
        assert (made["purpose"], made["case_ref"]) == ("fraud_prevention", "CASE-7")
        assert "2026-11-28T12:00:00Z" <= made["next_scan_at"] < "2026-12-05T12:00:00Z"
        with db.connection_context():
            [scan] = Scan.select().where(Scan.watch_id == made["watch_id"])
        assert scan.id == made["last_scan_id"] and scan.bulk_id == body["bulk_id"] and scan.status == "queued"
    assert balance(account) == before - 3  # a credit per watch created; the rejected ones are free
    assert_books_balance(account)
    with db.connection_context():
        [entry] = ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
    assert (entry.action, entry.status, entry.credits, entry.resource_id) == ("watches.create", 201, 3,
                                                                               body["bulk_id"])
    # The batch of first scans reads as any batch.
    batch = client.get(f"/api/v1/scan/bulk/{body['bulk_id']}", headers=account.headers).json
    assert (batch["total"], batch["queued"]) == (6, 3)


def test_all_rejected_costs_one_credit_and_creates_nothing(client, account):
    before = balance(account)
    r = bulk(client, account, targets=[{"target": "ab"}, {"target": "not an address", "kind": "email"}])
    assert r.status_code == 201 and r.json["created"] == 0 and len(r.json["rejected"]) == 2
    assert balance(account) == before - 1 and watches_of(account) == []
    assert_books_balance(account)


def test_an_opted_out_target_is_rejected_free_and_the_others_are_watched(client, account):
    with db.connection_context():
        suppressions.add("email", "jane.doe@example.com")
    before = balance(account)
    r = bulk(client, account, targets=[{"target": "Jane.Doe@example.com"}, {"target": "john@example.com"}])
    assert r.status_code == 201
    assert [(e["index"], e["error"]) for e in r.json["rejected"]] == [(0, "target_suppressed")]
    assert [w["target"] for w in r.json["watches"]] == ["john@example.com"]
    assert balance(account) == before - 1


@pytest.mark.parametrize(("tier", "targets", "status", "code"), [
    ("pro", [{"target": "jane@example.com"}], 403, "bulk_not_allowed"),
    ("business", [{"target": f"user{n}@example.com"} for n in range(101)], 400, "too_many_targets"),
    ("business", [], 400, "no_targets"),
])
def test_a_call_a_bulk_scan_would_refuse_is_refused_the_same_and_changes_nothing(client, make_customer, tier,
                                                                                  targets, status, code):
    account = make_customer(tier=tier)
    r = bulk(client, account, targets=targets)
    assert (r.status_code, r.json["error"]) == (status, code)
    scan_refusal = client.post("/api/v1/scan/bulk", headers=account.headers, json={"targets": targets})
    assert (scan_refusal.status_code, scan_refusal.json["error"]) == (status, code)
    assert watches_of(account) == []
    with db.connection_context():
        assert Scan.select().where(Scan.customer == account.id).count() == 0


def test_bad_interval_or_body_is_a_400_that_changes_nothing(client, account):
    for body in ({"targets": TARGETS, "interval": "hourly"}, {"targets": TARGETS}, {"targets": "jane@example.com",
                                                                                  "interval": "daily"}):
        r = client.post(BULK, headers=account.headers, json=body)
        assert (r.status_code, r.json["error"]) == (400, "invalid_request")
    assert watches_of(account) == []


def test_watches_past_the_limit_refuse_the_whole_call_free_and_say_how_many_fit(client, make_customer):
    account = make_customer(tier="business")
    with db.connection_context():
        admin.set_limits(account.id, watches=3)
    assert bulk(client, account, targets=[{"target": "one@example.com"}]).status_code == 201
    before = balance(account)
    r = bulk(client, account, targets=[{"target": f"user{n}@example.com"} for n in range(3)])
    assert r.status_code == 429 and r.json["error"] == "watch_limit_reached" and "2 more fit now" in r.json["message"]
    assert balance(account) == before and len(watches_of(account)) == 1
    assert bulk(client, account, targets=[{"target": f"user{n}@example.com"} for n in range(2)]).status_code == 201
    assert len(watches_of(account)) == 3


def test_a_balance_short_of_the_valid_targets_is_402_and_free(client, make_customer):
    account = make_customer(credits=2)
    r = bulk(client, account, targets=[{"target": f"user{n}@example.com"} for n in range(3)] + [{"target": "ab"}])
    assert r.status_code == 402 and r.json["error"] == "insufficient_balance"
    assert balance(account) == 2 and watches_of(account) == []


def test_an_idempotency_key_replays_the_answer_without_second_watches(client, account):
    first = bulk(client, account, headers={"Idempotency-Key": "bulk-watch-1"})
    again = bulk(client, account, headers={"Idempotency-Key": "bulk-watch-1"})
    assert (first.status_code, again.status_code) == (201, 201) and again.json == first.json
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(watches_of(account)) == 3 and balance(account) == 97
    other = bulk(client, account, targets=[{"target": "someone@example.com"}], headers={
        "Idempotency-Key": "bulk-watch-1"})
    assert other.status_code == 409 and other.json["error"] == "idempotency_conflict"


def test_engine_down_leaves_no_watch_no_batch_and_no_net_charge(client, account, simulator):
    engine_mode(simulator, "down")
    r = bulk(client, account)
    assert r.status_code == 502 and r.json["error"] == "engine_submit_failed"
    assert balance(account) == 100 and watches_of(account) == []
    with db.connection_context():
        assert Scan.select().count() == 0 and BulkBatch.select().count() == 0
    assert_books_balance(account)


def test_a_test_key_makes_test_watches_free_that_live_keys_never_see(client, account):
    with db.connection_context():
        test = factories.sandbox_key(account)
    before = balance(account)
    r = bulk(client, test)
    assert r.status_code == 201 and r.json["livemode"] is False and r.json["created"] == 3
    assert balance(account) == before
    assert client.get("/api/v1/watches", headers=account.headers).json["data"] == []
    assert len(client.get("/api/v1/watches", headers=test.headers).json["data"]) == 3


def test_a_key_without_the_watches_scope_is_refused_free(client, account):
    from app.accounts import access
    with db.connection_context():
        key, plaintext = admin.issue_key(account.id, "narrow",
                                            scopes=[s for s in access.SCOPES if s != WATCHES])
    r = bulk(client, factories.Account(account.customer, key, plaintext))
    assert r.status_code == 403 and r.json["error"] == "insufficient_scope"
    assert balance(account) == 100


def test_get_on_the_bulk_path_is_a_405_and_the_document_has_the_call(client, account):
    r = client.get(BULK, headers=account.headers)
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed"
    spec = client.get("/api/v1/openapi.json").json
    operation = spec["paths"]["/api/v1/watches/bulk"]["post"]
    assert operation["operationId"] == "createWatches" and "Needs the key scope `watches`" in operation["description"]
    assert operation["requestBody"]["content"]["application/json"]["example"]["interval"] == "weekly"
    assert operation["responses"]["201"]["content"]["application/json"]["example"]["created"] == 2
    assert {"too_many_targets", "bulk_not_allowed"} <= set(
        operation["responses"]["400"]["content"]["application/json"]["examples"]) | set(
        operation["responses"]["403"]["content"]["application/json"]["examples"])
    assert "watch_limit_reached" in operation["responses"]["429"]["content"]["application/json"]["examples"]
    targets = spec["components"]["schemas"]["WatchBulkCreate"]["properties"]["targets"]
    assert targets["items"] == {"$ref": "#/components/schemas/BulkTarget"}
