"""``required`` (D29): the match rule parsed by a small parser (never evaluated as code), decided on a
completed scan at its ``min_confidence``, and a scan that does not match withheld and refunded in the
transaction that completes it: once, however often completion runs."""
import json
import threading
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.accounts.models import CreditLedger, Customer
from app.activity.models import ActivityEntry
from app.billing import charges
from app.extensions import db
from app.intake import creation
from app.plumbing.errors import InvalidRequired
from app.scans import required
from app.scans.models import Scan
from app.scans.results import normalize_result
from app.tracking import states
from simulator.results import result_for
from tests.domain_fixtures import new_customer

NOW = datetime(2026, 11, 22, 12, 0, 0)


@pytest.mark.parametrize("text, tree", [
    ("breaches", ("word", "breaches")),
    ("  profiles.verified OR breaches ", ("or", [("word", "profiles.verified"), ("word", "breaches")])),
    ("emails AND phones OR breaches",  # AND binds tighter
     ("or", [("and", [("word", "emails"), ("word", "phones")]), ("word", "breaches")])),
    ("emails and (phones or phone_profile)",
     ("and", [("word", "emails"), ("or", [("word", "phones"), ("word", "phone_profile")])])),
    ("((profiles))", ("word", "profiles")),
])
def test_rules_parse_into_a_tree(text, tree):
    assert required.parse(text) == tree


@pytest.mark.parametrize("text, position, words", [
    ("profile", 1, "unknown word 'profile'"),
    ("breaches OR", 12, "a word or '(' is missing"),
    ("breaches AND AND emails", 14, "not 'AND'"),
    ("(breaches", 10, "')' is missing"),
    ("breaches)", 9, "')' was not expected"),
    ("breaches emails", 10, "'emails' was not expected"),
    ("__import__('os')", 1, "unknown word"),
    ("breaches; emails", 9, "unexpected character ';'"),
    ("   ", 1, "the rule is empty"),
    ("(" * 21 + "breaches" + ")" * 21, 21, "more than 20 parentheses"),
])
def test_a_rule_that_does_not_parse_names_the_position(text, position, words):
    with pytest.raises(InvalidRequired) as refused:
        required.parse(text)
    assert refused.value.code == "invalid_required"
    assert f"at position {position}" in refused.value.message and words in refused.value.message
    assert refused.value.details == {"required": [refused.value.message]}


def test_not_a_string_or_too_long_is_refused():
    with pytest.raises(InvalidRequired):
        required.parse(["breaches"])
    with pytest.raises(InvalidRequired, match="longer than 500"):
        required.parse("breaches OR " * 50)
    assert required.check(None) is None and required.check(" breaches ") == "breaches"


def _result(**evidence_confidence):
    raw = {"risk": {"score": 30, "reasons": [{"code": "breaches", "points": 20, "paths": ["breaches[0]"]},
                                             {"code": "weak", "points": 10, "paths": ["profiles.weak[0]"]}]},
           "profiles": {"weak": [{"platform": "x", "handle": "jd"}]},
           "breaches": [{"name": "ShopHub", "date": "2019-03"}],
           "sources": [{"id": "s1", "status": "found"}],
           "evidence": [{"path": path.replace("_", ".", 1).replace("0", "[0]"), "source_ids": ["s1"],
                         "confidence": value} for path, value in evidence_confidence.items()]}
    return normalize_result(raw, "email")


def test_a_rule_is_decided_at_the_scans_min_confidence():
    result = _result(profiles_weak0=0.3, breaches0=0.96)
    assert required.matches("breaches AND profiles", result, None)
    assert not required.matches("breaches AND profiles", result, 0.5)  # the weak profile is under it
    assert required.matches("breaches OR profiles.verified", result, 0.5)
    assert not required.matches("emails OR phones OR phone_profile", result, None)
    assert required.matches(None, result, 0.99)


def test_a_scan_that_does_not_match_keeps_only_sources_coverage_and_reason_codes():
    result = _result(profiles_weak0=0.3, breaches0=0.96)
    kept = required.unmatched(result)
    assert kept["match"] is False and kept["findings"] == [] and kept["breaches"] == []
    assert kept["profiles"] == {"verified": [], "weak": []} and kept["sources"] == result["sources"]
    assert kept["coverage"] == result["coverage"]
    assert [r["code"] for r in kept["risk"]["reasons"]] == ["breaches", "weak"]
    assert kept["risk"]["score"] == sum(r["points"] for r in kept["risk"]["reasons"]) == 0
    assert list(kept) == list(result)  # every field of a result, in its order


def _completed(scan: Scan) -> states.Final:
    raw = result_for(scan.kind, scan.target, "http://127.0.0.1:1/_sim/artifacts/inv_x")
    owner_result = normalize_result(raw, scan.kind, scan_id=scan.id)
    return states.completed(scan.id, owner_result)


def _refunds(scan_id: str) -> int:
    return CreditLedger.select().where((CreditLedger.scan_id == scan_id) & (CreditLedger.reason == "refund")).count()


def _create(cust, key, rule, target="jane@example.com", minimum=None) -> Scan:
    outcome = creation.create_scan(cust, key.id, target, None, request_id="req_svc", livemode=key.livemode,
                                match=creation.MatchRules(minimum, rule))
    return Scan.get_by_id(outcome.body["scan_id"])


def test_a_scan_that_does_not_match_is_refunded_with_a_ledger_row_and_an_entry(conn):
    with freeze_time(NOW):
        cust, key = new_customer(credits=10)
        missed = _create(cust, key, "phone_profile")  # an e-mail's result has no phone profile
        matched = _create(cust, key, "breaches OR profiles", target="john@example.com")
        assert charges.balance_of(cust.id) == 8
        assert states.finish([_completed(missed), _completed(matched)]) == 2
    assert charges.balance_of(cust.id) == 9 == charges.ledger_sum(cust.id)
    assert _refunds(missed.id) == 1 and _refunds(matched.id) == 0
    stored = json.loads(Scan.get_by_id(missed.id).result_json)
    assert stored["match"] is False and stored["findings"] == [] and stored["sources"]
    assert json.loads(Scan.get_by_id(matched.id).result_json)["match"] is True
    entry = ActivityEntry.get(ActivityEntry.action == required.REFUND_ACTION)
    assert (entry.resource_id, entry.credits, entry.customer_id) == (missed.id, -1, cust.id)
    assert Customer.get_by_id(cust.id).in_flight == 0


def test_completion_twice_at_once_refunds_once(app):
    """A callback's look and a due look completing the same scan at once (or a worker killed after
    the commit and its job run again): the refund is in the transaction of the final state, whose
    compare-and-set lets one of them through."""
    with db.connection_context():
        cust, key = new_customer(credits=10)
        scan = _create(cust, key, "phone_profile")
        final = _completed(scan)
    start, took = threading.Barrier(3), []

    def complete():
        with db.connection_context():
            start.wait(10)
            took.append(states.finish([final]))

    threads = [threading.Thread(target=complete) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    with db.connection_context():
        assert sorted(took) == [0, 0, 1]
        assert states.finish([final]) == 0  # and once more, afterwards
        assert _refunds(scan.id) == 1
        assert charges.balance_of(cust.id) == 10 == charges.ledger_sum(cust.id)


def test_a_test_key_is_never_refunded_what_it_did_not_pay(conn):
    with freeze_time(NOW):
        cust, key = new_customer(credits=10, livemode=False)
        scan = _create(cust, key, "phone_profile")
        assert states.finish([_completed(scan)]) == 1
    assert json.loads(Scan.get_by_id(scan.id).result_json)["match"] is False
    assert charges.balance_of(cust.id) == 10 == charges.ledger_sum(cust.id)
    assert _refunds(scan.id) == 0
    assert not ActivityEntry.select().where(ActivityEntry.action == required.REFUND_ACTION).exists()


def test_a_bad_rule_is_refused_before_anything_is_charged(conn):
    cust, key = new_customer(credits=10)
    with pytest.raises(InvalidRequired):
        _create(cust, key, "breaches OR")
    assert charges.balance_of(cust.id) == 10 and not Scan.select().exists()
