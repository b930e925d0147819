"""A completed scan that does not meet its ``required`` rule (D29) gives back what its creation cost:
a ledger row and an activity entry, in the transaction that completes it, so once however often
completion runs; a test key's scan paid nothing and gets nothing; a rule that does not parse is
refused before anything is charged."""
import json
import threading
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.accounts.models import CreditLedger, Customer
from app.activity.models import ActivityEntry
from app.billing import charges, refunds
from app.extensions import db
from app.intake import creation
from app.plumbing.errors import InvalidRequired
from app.scans.models import Scan
from app.scans.results import normalize_result
from app.tracking import states
from simulator.results import result_for
from tests.domain_fixtures import new_customer

NOW = datetime(2026, 11, 22, 12, 0, 0)


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
    entry = ActivityEntry.get(ActivityEntry.action == refunds.REFUND_ACTION)
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
    assert not ActivityEntry.select().where(ActivityEntry.action == refunds.REFUND_ACTION).exists()


def test_a_bad_rule_is_refused_before_anything_is_charged(conn):
    cust, key = new_customer(credits=10)
    with pytest.raises(InvalidRequired):
        _create(cust, key, "breaches OR")
    assert charges.balance_of(cust.id) == 10 and not Scan.select().exists()
