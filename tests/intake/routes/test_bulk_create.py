"""Bulk creation (§4.3, D7): mixed targets, the size and body checks, the tier, balance and limits of a
bulk call, an engine that is down."""

import pytest

from app.extensions import db
from app.scans.models import BulkBatch
from tests.api.helpers import assert_books_balance, balance, engine_mode, ledger, scans_of
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"


def bulk(client, account, targets, **headers):
    return client.post(BULK, json={"targets": targets}, headers={**account.headers, **headers})


def test_bulk_with_mixed_targets(client, account):
    targets = [{"target": "jane@example.com", "kind": "email"}, {"target": "ab"}, {"target": "+44 7700 900123"},
               {"target": "abc", "kind": "fax"}, "not an object", {"target": "@jd", "kind": "username"},
               {"target": 5}]
    response = bulk(client, account, targets)
    assert response.status_code == 202
    body = response.json
    assert set(body) == {"ok", "bulk_id", "livemode", "total", "queued", "rejected", "scans", "aggregate_poll_url"}
    assert body["total"] == 7 and body["queued"] == 2
    assert [(r["index"], r["error"]) for r in body["rejected"]] == [
        (1, "target_too_short"), (3, "invalid_kind"), (4, "invalid_request"), (5, "invalid_target"),
        (6, "invalid_request")]
    for entry in body["rejected"]:
        assert set(entry) == {"index", "target", "kind", "error", "message"}
    assert body["rejected"][3]["kind"] == "username" and body["rejected"][3]["target"] == "@jd"
    assert [(s["target"], s["kind"]) for s in body["scans"]] == [("jane@example.com", "email"),
                                                                 ("+447700900123", "phone")]
    assert body["scans"][0]["poll_url"].endswith(f"/api/v1/scan/{body['scans'][0]['scan_id']}")
    assert body["aggregate_poll_url"] == f"http://localhost/api/v1/scan/bulk/{body['bulk_id']}"
    assert response.headers["X-Credits-Remaining"] == "98"
    assert ledger(account)[-1] == (-2, "bulk")
    read = client.get(f"{SCAN}/{body['scans'][0]['scan_id']}", headers=account.headers).json
    assert read["bulk_id"] == body["bulk_id"]


def test_bulk_all_rejected_costs_one_credit(client, account, simulator):
    body = bulk(client, account, [{"target": "ab"}, {"target": "x"}]).json
    assert body["queued"] == 0 and body["scans"] == [] and len(body["rejected"]) == 2
    assert balance(account) == 99
    aggregate = client.get(f"{BULK}/{body['bulk_id']}", headers=account.headers).json
    assert aggregate["all_done"] is True and aggregate["total"] == 2 and aggregate["scans"] == []
    assert aggregate["rejected_count"] == 2


@pytest.mark.parametrize("targets,code", [([], "no_targets"), ([{"target": "jane@example.com"}] * 101,
                                                               "too_many_targets")])
def test_bulk_size_errors(client, account, targets, code):
    assert_error(bulk(client, account, targets), 400, code)
    assert balance(account) == 99 and scans_of(account) == []


@pytest.mark.parametrize("payload", [{}, {"targets": "x"}, {"targets": {"a": 1}}, [1]])
def test_bulk_body_shape_errors(client, account, payload):
    assert_error(client.post(BULK, json=payload, headers=account.headers), 400, "invalid_request")


def test_bulk_on_pro_is_403_and_charged(client, make_customer):
    pro = make_customer(tier="pro")
    assert_error(bulk(client, pro, [{"target": "jane@example.com"}]), 403, "bulk_not_allowed")
    assert balance(pro) == 99 and scans_of(pro) == []


def test_bulk_balance_must_cover_every_valid_target(client, make_customer):
    acct = make_customer(credits=3)
    targets = [{"target": f"user{i}@example.com"} for i in range(4)] + [{"target": "ab"}]
    response = bulk(client, acct, targets)
    body = assert_error(response, 402, "insufficient_balance")
    assert "4" in body["message"]
    assert balance(acct) == 3 and scans_of(acct) == []
    assert bulk(client, acct, targets[:3]).status_code == 202
    assert balance(acct) == 0
    assert_books_balance(acct)


def test_bulk_inflight_rule_is_whole(client, make_customer):
    acct = make_customer(tier="business", credits=100)  # in flight 10
    assert client.post(SCAN, json={"target": "jane@example.com"}, headers=acct.headers).status_code == 202
    targets = [{"target": f"user{i}@example.com"} for i in range(10)]
    response = bulk(client, acct, targets)
    body = assert_error(response, 429, "rate_limit_inflight")
    assert "9 targets would fit now" in body["message"]
    assert len(scans_of(acct)) == 1 and balance(acct) == 99
    assert bulk(client, acct, targets[:9]).status_code == 202


def test_bulk_counts_against_hour_quota(client, make_customer):
    acct = make_customer(tier="business", credits=100, hour=5, inflight=50)
    assert bulk(client, acct, [{"target": f"u{i}@example.com"} for i in range(4)]).status_code == 202
    assert_error(bulk(client, acct, [{"target": f"v{i}@example.com"} for i in range(2)]), 429, "rate_limit_hour")
    assert client.post(SCAN, json={"target": "w@example.com"}, headers=acct.headers).status_code == 202


def test_bulk_engine_down_creates_nothing(client, account, simulator):
    engine_mode(simulator, "down")
    response = bulk(client, account, [{"target": "jane@example.com"}, {"target": "john@example.com"}])
    assert_error(response, 502, "engine_submit_failed")
    assert response.headers["Retry-After"] == "30"
    assert scans_of(account) == [] and balance(account) == 100
    with db.connection_context():
        assert BulkBatch.select().count() == 0
    assert_books_balance(account)
