"""scans (admission): limits, balance, the scans and their charge in one transaction (D3, D7, D8, D13).
An admitted call changes the books together; a refused one changes nothing at all."""
import re

import pytest

from app.accounts import admin
from app.accounts.models import Customer
from app.billing import customers, quotas
from app.intake import creation
from app.plumbing import engine
from app.plumbing.errors import EngineUnavailable, Forbidden, InvalidRequest, ServiceError
from app.scans.models import Scan
from app.tracking import sandbox_engine
from tests.api.helpers import assert_counters_match, engine_mode, engine_stats
from tests.domain_fixtures import books_of


def _customer(tier="business", credits=10, **limits):
    cust = customers.create_customer("Admission", tier, credits)
    if limits:
        cust = admin.set_limits(cust.id, **limits)
    key, _ = admin.issue_key(cust.id, "k")
    return Customer.get_by_id(cust.id), key


def _create(cust, key, target="jane@example.com"):
    return creation.create_scan(cust, key.id, target, None, request_id="req_t")


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
        creation.create_bulk(cust, key.id, targets, request_id="req_b")
    assert refused.value.code == "insufficient_balance"
    assert books_of(cust.id) == before
    cust2, key2 = _customer(credits=10, inflight=3)
    before = books_of(cust2.id)
    with pytest.raises(ServiceError) as refused:
        creation.create_bulk(cust2, key2.id, targets, request_id="req_b")
    assert refused.value.code == "rate_limit_inflight"
    assert books_of(cust2.id) == before
    outcome = creation.create_bulk(cust2, key2.id, targets[2:], request_id="req_b")
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


def test_an_invalid_target_is_refused_before_anything_is_charged(conn):
    cust, key = _customer(credits=5)
    before = books_of(cust.id)
    with pytest.raises(InvalidRequest) as refused:
        _create(cust, key, "ab")
    assert refused.value.code == "target_too_short"
    assert books_of(cust.id) == before


def test_a_bulk_call_on_a_tier_without_bulk_is_forbidden_and_free(conn):
    cust, key = _customer(tier="pro", credits=5)
    before = books_of(cust.id)
    with pytest.raises(Forbidden) as refused:
        creation.create_bulk(cust, key.id, [{"target": "a@example.com"}], request_id="req_b")
    assert refused.value.code == "bulk_not_allowed"
    assert books_of(cust.id) == before


def test_a_bulk_call_with_every_target_rejected_costs_one_credit(conn):
    cust, key = _customer(credits=5)
    outcome = creation.create_bulk(cust, key.id, [{"target": "x"}, {"target": 3}], request_id="req_b")
    assert (outcome.body["queued"], len(outcome.body["rejected"]), outcome.body["scans"]) == (0, 2, [])
    books = books_of(cust.id)
    assert (books.balance, books.batches, books.scans, books.in_flight) == (4, 1, 0, 0)


def test_a_test_scan_runs_on_the_sandbox_free_and_counts_apart(conn, simulator):
    cust, _ = _customer(credits=0)  # a test key needs no credit
    key, _ = admin.issue_key(cust.id, "sandbox", livemode=False)
    assert creation.engine_for(False) is sandbox_engine and creation.engine_for(True) is engine
    stats = engine_stats(simulator)["submit"]
    outcome = creation.create_scan(cust, key.id, "jane@example.com", None, request_id="req_t", livemode=False)
    assert (outcome.body["livemode"], outcome.balance) == (False, 0)
    scan = Scan.get_by_id(outcome.body["scan_id"])
    assert sandbox_engine.is_sandbox_id(scan.engine_id) and scan.livemode is False
    assert engine_stats(simulator)["submit"] == stats  # the engine never saw it
    row = Customer.get_by_id(cust.id)
    assert (row.in_flight, row.test_in_flight, books_of(cust.id).ledger_rows) == (0, 1, 0)
    assert_counters_match(cust.id)


def test_reverse_reservation_undoes_only_an_unsubmitted_scan(conn):
    cust, key = _customer(credits=5)
    outcome = creation.create_bulk(cust, key.id, [{"target": "a@example.com"}], request_id="req_b")
    scan = Scan.get_by_id(outcome.body["scans"][0]["scan_id"])
    assert creation.reverse_reservation(scan) is False  # submitted: the engine has it
    Scan.update(engine_id=None).where(Scan.id == scan.id).execute()
    assert creation.reverse_reservation(Scan.get_by_id(scan.id)) is True
    books = books_of(cust.id)
    assert (books.scans, books.batches, books.balance, books.ledger_sum, books.in_flight) == (0, 0, 5, 5, 0)
    assert creation.reverse_reservation(scan) is False  # once
    assert_counters_match(cust.id)


# --- re-runs (D23) ---------------------------------------------------------------------------

def _completed(cust, key, target, sources, *, livemode=True):
    """A completed scan of ``target`` whose result names ``sources`` (id: status)."""
    import json

    from app.plumbing.models import new_id, utcnow
    from app.scans.results import normalize_result
    scan_id = new_id("scn")
    result = normalize_result({"sources": [{"id": s, "status": st} for s, st in sources.items()]}, "email",
                              scan_id=scan_id)
    Scan.create(id=scan_id, customer=cust.id, api_key=key.id, kind="email", target=target, status="completed",
                created_at=utcnow(), completed_at=utcnow(), result_json=json.dumps(result), livemode=livemode,
                purpose="kyc_aml", case_ref="CASE-1")
    return scan_id


def test_a_rerun_asks_the_failed_sources_only_and_is_admitted_as_a_creation(conn, simulator):
    cust, key = _customer(credits=10)
    first = _completed(cust, key, "partial.jane@example.com",
                       {"github": "found", "breach_index": "timeout", "gravatar": "rate_limited", "x": "error",
                        "carrier_lookup": "skipped"})
    outcome = creation.create_rerun(cust, key.id, first, request_id="req_r")
    assert outcome.body["rerun_of"] == first and outcome.balance == 9
    rerun = Scan.get_by_id(outcome.body["scan_id"])
    assert (rerun.rerun_of, rerun.target, rerun.kind, rerun.purpose, rerun.case_ref) == \
        (first, "partial.jane@example.com", "email", "kyc_aml", "CASE-1")
    from simulator.investigations import decode_id
    assert decode_id(rerun.engine_id).sources == ("breach_index", "gravatar", "x")
    books = books_of(cust.id)
    assert (books.balance, books.ledger_sum, books.in_flight) == (9, 9, 1)
    assert outcome.usage.hour == 1  # counted in the windows as a creation (the first scan was made by hand)


def test_nothing_to_rerun_changes_nothing(conn):
    from app.plumbing.errors import NothingToRerun
    cust, key = _customer(credits=10)
    whole = _completed(cust, key, "jane@example.com", {"github": "found", "x": "not_found", "y": "skipped"})
    bare = _completed(cust, key, "john@example.com", {})
    running = _completed(cust, key, "partial.jim@example.com", {"github": "timeout"})
    Scan.update(status="running", completed_at=None, result_json=None).where(Scan.id == running).execute()
    before = books_of(cust.id)
    # Each refusal says which of its reasons applies: wait for the scan, or nothing is left to do.
    for scan_id, reason in ((whole, "every source answered"), (bare, "every source answered"),
                            (running, "it is running, and only a completed scan can be re-run")):
        with pytest.raises(NothingToRerun, match=rf"no source to re-run: {re.escape(reason)}$"):
            creation.create_rerun(cust, key.id, scan_id, request_id="req_r")
    assert books_of(cust.id) == before


def test_a_rerun_of_another_customers_or_another_modes_scan_is_refused(conn):
    from app.plumbing.errors import NotFound
    cust, key = _customer(credits=10)
    other, other_key = _customer(credits=10)
    first = _completed(cust, key, "partial.jane@example.com", {"github": "timeout"})
    with pytest.raises(Forbidden):
        creation.create_rerun(other, other_key.id, first, request_id="req_r")
    with pytest.raises(NotFound):
        creation.create_rerun(cust, key.id, first, request_id="req_r", livemode=False)


def test_a_rerun_in_test_mode_runs_on_the_sandbox_with_its_sources(conn):
    cust, key = _customer(credits=10)
    test_key, _ = admin.issue_key(cust.id, "t", livemode=False)
    first = _completed(cust, test_key, "partial.jane@example.com", {"github": "timeout"}, livemode=False)
    outcome = creation.create_rerun(cust, test_key.id, first, request_id="req_r", livemode=False)
    rerun = Scan.get_by_id(outcome.body["scan_id"])
    assert sandbox_engine.is_sandbox_id(rerun.engine_id) and outcome.balance == 10
    assert sandbox_engine._decode_id(rerun.engine_id)[3] == ["github"]


def test_an_erased_scan_has_nothing_to_rerun(conn):
    from app.plumbing.errors import NothingToRerun
    from app.privacy import erasure
    cust, key = _customer(credits=10)
    first = _completed(cust, key, "partial.jane@example.com", {"github": "timeout"})
    erasure.erase_scan(customer_id=cust.id, scan_id=first, livemode=True)
    with pytest.raises(NothingToRerun, match=r"no source to re-run: its target and result were erased$"):
        creation.create_rerun(cust, key.id, first, request_id="req_r")
