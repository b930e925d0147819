"""Admission: limits, balance, the scans and their charge in one transaction (D3, D7, D8, D13).
An admitted call changes the books together; a refused one changes nothing at all."""
import pytest

from app.models import Customer
from app.services import accounts, quotas, scans
from app.services.errors import EngineUnavailable, ServiceError
from tests.api.helpers import assert_counters_match, engine_mode
from tests.services.conftest import books_of


def _customer(tier="business", credits=10, **limits):
    cust = accounts.create_customer("Admission", tier, credits)
    if limits:
        cust = accounts.set_limits(cust.id, **limits)
    key, _ = accounts.issue_key(cust.id, "k")
    return Customer.get_by_id(cust.id), key


def _create(cust, key, target="jane@example.com"):
    return scans.create_scan(cust, key.id, target, None, request_id="req_t")


def test_an_admitted_scan_moves_balance_ledger_scans_and_counters_together(conn):
    cust, key = _customer(credits=10)
    outcome = _create(cust, key)
    assert outcome.balance == 9 and outcome.body["kind"] == "email"
    assert "poll_url" not in outcome.body  # the HTTP layer adds the URLs
    books = books_of(cust.id)
    assert (books.balance, books.ledger_sum, books.scans, books.in_flight, books.quota_minutes) == (9, 9, 1, 1, 1)
    assert (outcome.limits.hour, outcome.usage.hour) == (100, 1)  # the usage already counts the new scan
    assert quotas.resets(outcome.usage)[0] == 3600
    assert_counters_match(cust.id)


@pytest.mark.parametrize("credits, limits, error", [
    (1, {}, "insufficient_balance"),
    (10, {"inflight": 1}, "rate_limit_inflight"),
    (10, {"hour": 1}, "rate_limit_hour"),
    (10, {"day": 1}, "rate_limit_day"),
], ids=["balance", "inflight", "hour", "day"])
def test_a_refused_admission_changes_nothing(conn, credits, limits, error):
    cust, key = _customer(credits=credits, **limits)
    _create(cust, key)  # spends the only credit, or takes the one slot the limit under test allows
    before = books_of(cust.id)
    with pytest.raises(ServiceError) as refused:
        _create(cust, key, "john@example.com")
    assert refused.value.code == error
    assert books_of(cust.id) == before
    assert_counters_match(cust.id)


def test_a_bulk_call_is_admitted_whole_or_refused_whole(conn):
    cust, key = _customer(credits=3)
    targets = [{"target": f"user{i}@example.com"} for i in range(4)] + [{"target": "no"}]
    before = books_of(cust.id)
    with pytest.raises(ServiceError) as refused:  # 4 valid targets, 3 credits
        scans.create_bulk(cust, key.id, targets, request_id="req_b")
    assert refused.value.code == "insufficient_balance"
    assert books_of(cust.id) == before
    cust2, key2 = _customer(credits=10, inflight=3)
    before = books_of(cust2.id)
    with pytest.raises(ServiceError) as refused:
        scans.create_bulk(cust2, key2.id, targets, request_id="req_b")
    assert refused.value.code == "rate_limit_inflight"
    assert books_of(cust2.id) == before
    outcome = scans.create_bulk(cust2, key2.id, targets[2:], request_id="req_b")
    assert (outcome.body["queued"], len(outcome.body["rejected"]), outcome.balance) == (2, 1, 8)
    books = books_of(cust2.id)
    assert (books.scans, books.batches, books.in_flight, books.quota_minutes, books.ledger_sum) == (2, 1, 2, 2, 8)


def test_an_engine_that_cannot_take_the_scan_leaves_no_scan_and_no_net_charge(conn, simulator):
    cust, key = _customer(credits=5)
    engine_mode(simulator, "down")
    try:
        with pytest.raises(ServiceError) as refused:
            _create(cust, key)
    finally:
        engine_mode(simulator, "up")
    assert isinstance(refused.value, EngineUnavailable) and refused.value.code == "engine_submit_failed"
    assert refused.value.retry_after == 30
    books = books_of(cust.id)
    # The reservation's charge and its refund are both in the ledger; nothing else remains.
    assert (books.balance, books.ledger_sum, books.scans, books.in_flight, books.quota_minutes) == (5, 5, 0, 0, 0)
    assert books.ledger_rows == 3  # grant, charge, refund
    assert_counters_match(cust.id)
