"""POST /api/v1/scan: bodies, validation, the order of checks and charging (D2-D4, D8, D13)."""
import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.activity.models import ActivityEntry
from app.extensions import db
from app.scans.models import IN_FLIGHT, Scan
from app.tracking import states
from tests.api.helpers import (
    assert_books_balance,
    balance,
    engine_mode,
    engine_stats,
    ledger,
    parse_ratelimit,
    scans_of,
)
from tests.api.test_auth_and_errors import assert_error

SCAN = "/api/v1/scan"


def create(client, account, target="jane.doe@example.com", **extra):
    return client.post(SCAN, json={"target": target, **extra}, headers=account.headers)


def test_created_body_headers_and_charge(client, account):
    response = create(client, account, kind="email")
    assert response.status_code == 202
    body = response.get_json()
    assert set(body) == {"ok", "scan_id", "livemode", "kind", "recipes_to_run", "eta_seconds", "poll_url"}
    assert body["ok"] is True and body["kind"] == "email"
    assert body["scan_id"].startswith("scn_") and len(body["scan_id"]) >= 4 + 22
    assert isinstance(body["recipes_to_run"], int) and body["recipes_to_run"] > 0
    assert 0 < body["eta_seconds"] <= 180
    assert body["poll_url"] == f"http://localhost/api/v1/scan/{body['scan_id']}"
    assert response.headers["X-Credits-Remaining"] == "99"
    assert response.headers["RateLimit-Policy"] == '"hour";q=100;w=3600, "day";q=1000;w=86400'
    limits = parse_ratelimit(response.headers["RateLimit"])
    assert limits["hour"]["r"] == 99 and limits["day"]["r"] == 999  # already counts this scan
    assert 0 < limits["hour"]["t"] <= 3600
    assert ledger(account) == [(100, "grant"), (-1, "scan")]
    assert_books_balance(account)


@pytest.mark.config(PUBLIC_BASE_URL="https://api.example.com")
def test_poll_url_uses_public_base_url(client, account):
    body = create(client, account).get_json()
    assert body["poll_url"] == f"https://api.example.com/api/v1/scan/{body['scan_id']}"


@pytest.mark.parametrize("target,kind,stored_kind,stored", [
    ("  Jane@EXAMPLE.com ", None, "email", "Jane@example.com"),
    ("+44 7700 900123", None, "phone", "+447700900123"),
    ("@jane_doe", "username", "username", "jane_doe"),
    ("@alice_smith", None, "username", "alice_smith"),  # a leading "@" marks a handle
])
def test_targets_are_normalised_and_kind_inferred(client, account, target, kind, stored_kind, stored):
    extra = {"kind": kind} if kind else {}
    body = create(client, account, target, **extra).get_json()
    assert body["kind"] == stored_kind
    read = client.get(f"{SCAN}/{body['scan_id']}", headers=account.headers).get_json()
    assert read["target"] == stored and read["kind"] == stored_kind


@pytest.mark.parametrize("payload,code", [
    ({"target": "ab"}, "target_too_short"),
    ({"target": "ab", "kind": "fax"}, "target_too_short"),
    ({"target": "abc", "kind": "fax"}, "invalid_kind"),
    ({"target": "not an email", "kind": "email"}, "invalid_target"),
    ({"target": "+12", "kind": "phone"}, "invalid_target"),
    ({"target": "x" * 300}, "invalid_target"),
    ({"target": "a" * 65 + "@example.com"}, "invalid_target"),  # local part over 64 characters
    ({"target": 7, "kind": "fax"}, "invalid_request"),
])
def test_validation_errors_are_charged_and_create_nothing(client, account, simulator, payload, code):
    before = engine_stats(simulator)["total"]
    response = client.post(SCAN, json=payload, headers=account.headers)
    assert_error(response, 400, code)
    assert response.headers["X-Credits-Remaining"] == "99"
    assert scans_of(account) == []
    assert engine_stats(simulator)["total"] == before
    assert ledger(account)[-1] == (-1, "call")


def test_zero_balance_is_402_before_validation_and_free(client, make_customer):
    poor = make_customer(credits=0)
    response = client.post(SCAN, json={"target": "ab"}, headers=poor.headers)
    assert_error(response, 402, "insufficient_balance")
    assert response.headers["X-Credits-Remaining"] == "0"
    assert_error(client.get(f"{SCAN}/scn_x", headers=poor.headers), 402, "insufficient_balance")
    assert ledger(poor) == []


def test_last_credit_buys_exactly_one_scan(client, make_customer):
    one = make_customer(credits=1)
    assert create(client, one).status_code == 202
    assert_error(create(client, one), 402, "insufficient_balance")
    assert balance(one) == 0
    assert_books_balance(one)


def test_engine_down_is_502_with_retry_after_no_scan_no_net_charge(client, account, simulator):
    engine_mode(simulator, "down")
    response = create(client, account)
    assert_error(response, 502, "engine_submit_failed")
    assert response.headers["Retry-After"] == "30"
    assert response.headers["X-Credits-Remaining"] == "100"
    assert scans_of(account) == []
    assert ledger(account) == [(100, "grant"), (-1, "scan"), (1, "refund")]
    assert_books_balance(account)
    # The call's one entry, written with the charge (D25), says the answer and what it cost once
    # refunded: nothing.
    with db.connection_context():
        entries = [(e.action, e.status, e.credits, e.request_id) for e in
                   ActivityEntry.select().where(ActivityEntry.customer_id == account.id)]
    assert entries == [("scan.create", 502, 0, response.headers["X-Request-Id"])]


@pytest.mark.config(ENGINE_URL="http://127.0.0.1:1")
def test_engine_unreachable_is_502(client, account):
    assert_error(create(client, account), 502, "engine_submit_failed")
    assert balance(account) == 100


# --- limits (§8, D8) -----------------------------------------------------------

@pytest.mark.parametrize("tier,inflight", [("pro", 3), ("business", 10), ("enterprise", 25)])
def test_inflight_limit_per_tier(client, make_customer, tier, inflight):
    acct = make_customer(tier=tier, credits=100)
    for _ in range(inflight):
        assert create(client, acct).status_code == 202
    response = create(client, acct)
    body = assert_error(response, 429, "rate_limit_inflight")
    assert str(inflight) in body["message"]
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["X-Credits-Remaining"] == str(100 - inflight)
    assert len(scans_of(acct)) == inflight


def finish(account, n=None):
    """Complete the account's in-flight scans as a tracking job would, freeing in-flight slots (not quota)."""
    with db.connection_context():
        for scan in Scan.select(Scan.id).where((Scan.customer == account.id) & Scan.status.in_(IN_FLIGHT)):
            assert states.complete(scan.id, {})


def test_hour_window_is_rolling_both_edges(client, make_customer):
    acct = make_customer(tier="pro", credits=100)
    with freeze_time("2026-11-21 10:00:00") as frozen:
        for _ in range(3):
            assert create(client, acct).status_code == 202
        finish(acct)
        for minute in range(1, 18):  # 17 more: 20 in the hour
            frozen.move_to(f"2026-11-21 10:{minute:02d}:00")
            assert create(client, acct).status_code == 202
            finish(acct)
        frozen.move_to("2026-11-21 10:59:59")
        response = create(client, acct)
        assert_error(response, 429, "rate_limit_hour")
        assert response.headers["Retry-After"] == "1"  # the 10:00:00 scans leave at 11:00:00
        assert parse_ratelimit(response.headers["RateLimit"])["hour"] == {"r": 0, "t": 1}
        frozen.move_to("2026-11-21 11:00:00")  # the three 10:00:00 scans are 3600 s old: out
        for _ in range(3):
            assert create(client, acct).status_code == 202
            finish(acct)
        assert_error(create(client, acct), 429, "rate_limit_hour")


def test_hour_window_frees_slots_exactly_after_3600_seconds(client, make_customer):
    acct = make_customer(tier="pro", credits=100, hour=2, inflight=5)
    with freeze_time("2026-11-21 10:00:00") as frozen:
        assert create(client, acct).status_code == 202
        frozen.move_to("2026-11-21 10:30:00")
        assert create(client, acct).status_code == 202
        frozen.move_to("2026-11-21 10:59:59")
        response = create(client, acct)
        assert_error(response, 429, "rate_limit_hour")
        assert response.headers["Retry-After"] == "1"
        frozen.move_to("2026-11-21 11:00:00")
        assert create(client, acct).status_code == 202  # the 10:00 scan is 3600 s old: out
        assert_error(create(client, acct), 429, "rate_limit_hour")


def test_day_window_is_rolling(client, make_customer):
    acct = make_customer(tier="pro", credits=100, day=2, hour=50, inflight=5)
    with freeze_time("2026-11-21 10:00:00") as frozen:
        assert create(client, acct).status_code == 202
        frozen.move_to("2026-11-21 20:00:00")
        assert create(client, acct).status_code == 202
        frozen.move_to("2026-11-22 09:59:59")
        response = create(client, acct)
        assert_error(response, 429, "rate_limit_day")
        assert response.headers["Retry-After"] == "1"
        assert parse_ratelimit(response.headers["RateLimit"])["day"]["r"] == 0
        frozen.move_to("2026-11-22 10:00:00")
        assert create(client, acct).status_code == 202


def test_429_order_is_inflight_then_hour_then_day(client, make_customer):
    acct = make_customer(tier="pro", credits=100, inflight=1, hour=1, day=1)
    assert create(client, acct).status_code == 202
    assert_error(create(client, acct), 429, "rate_limit_inflight")
    finish(acct)
    assert_error(create(client, acct), 429, "rate_limit_hour")
    with db.connection_context():
        admin.set_limits(acct.id, hour=10)
    assert_error(create(client, acct), 429, "rate_limit_day")


def test_429_costs_nothing(client, make_customer):
    acct = make_customer(tier="pro", credits=10, inflight=1)
    create(client, acct)
    for _ in range(3):
        assert create(client, acct).status_code == 429
    assert balance(acct) == 9
    assert_books_balance(acct)


def test_limits_are_per_customer_over_all_keys(client, make_customer):
    acct = make_customer(tier="pro", credits=100)
    with db.connection_context():
        _, second_key = admin.issue_key(acct.id, "second")
    other = {"Authorization": f"Bearer {second_key}"}
    for headers in (acct.headers, other, acct.headers):
        assert client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).status_code == 202
    assert_error(client.post(SCAN, json={"target": "jane@example.com"}, headers=other), 429, "rate_limit_inflight")


def test_reads_count_against_no_quota(client, make_customer):
    acct = make_customer(tier="pro", credits=100, hour=1)
    scan_id = create(client, acct).get_json()["scan_id"]
    for _ in range(5):
        assert client.get(f"{SCAN}/{scan_id}", headers=acct.headers).status_code == 200
    response = client.get(f"{SCAN}/{scan_id}", headers=acct.headers)
    assert parse_ratelimit(response.headers["RateLimit"])["hour"]["r"] == 0
    assert response.headers["X-Credits-Remaining"] == str(100 - 7)
