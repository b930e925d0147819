"""billing: every change of a balance is a conditional UPDATE plus its ledger row (D3)."""
import random
from datetime import datetime

import pytest

from app.models import CreditLedger
from app.services import accounts, billing
from tests.services.conftest import books_of


def test_charges_and_credits_keep_the_ledger_equal_to_the_balance_and_never_below_zero(conn):
    customer = accounts.create_customer("Books", "business", 5)
    rng = random.Random(15)
    expected = 5
    for step in range(200):
        amount = rng.randint(1, 4)
        if rng.random() < 0.6:
            answer = billing.charge(customer.id, amount, "scan", note=f"step {step}")
            if amount <= expected:
                expected -= amount
                assert answer == expected
            else:
                assert answer is None  # short: refused whole, nothing taken
        else:
            expected += amount
            assert billing.credit(customer.id, amount, "refund", note=f"step {step}") == expected
        books = books_of(customer.id)
        assert books.balance == books.ledger_sum == expected >= 0, step


def test_a_refused_charge_writes_no_ledger_row(conn):
    customer = accounts.create_customer("Short", "pro", 2)
    before = books_of(customer.id)
    assert billing.charge(customer.id, 3, "bulk") is None
    assert books_of(customer.id) == before
    assert billing.charge(customer.id, 2, "bulk") == 0  # exactly the balance is allowed
    assert billing.charge(customer.id, 1, "call") is None
    rows = [(r.delta, r.balance_after, r.reason) for r in
            CreditLedger.select().where(CreditLedger.customer == customer.id).order_by(CreditLedger.id)]
    assert rows == [(2, 2, "grant"), (-2, 0, "bulk")]


def test_each_ledger_row_records_the_balance_after_it(conn):
    customer = accounts.create_customer("After", "business", 10)
    billing.charge(customer.id, 3, "scan", scan_id="scn_x")
    billing.credit(customer.id, 3, "refund", scan_id="scn_x", note="engine submission failed")
    billing.charge(customer.id, 1, "call", request_id="req_1")
    running = 0
    for row in CreditLedger.select().where(CreditLedger.customer == customer.id).order_by(CreditLedger.id):
        running += row.delta
        assert row.balance_after == running
    assert running == billing.balance_of(customer.id) == 9


def test_charge_call_charges_one_credit_and_reports_the_windows(conn):
    customer = accounts.create_customer("Reads", "business", 1)
    now = datetime(2026, 11, 22, 12, 0, 0)
    balance, usage = billing.charge_call(customer.id, "req_read", now)
    assert balance == 0 and (usage.hour, usage.day) == (0, 0)
    balance, usage = billing.charge_call(customer.id, "req_read2", now)
    assert balance is None  # nothing left: no charge and no ledger row
    books = books_of(customer.id)
    assert (books.balance, books.ledger_rows, books.ledger_sum) == (0, 2, 0)


def test_credit_to_an_unknown_customer_is_refused(conn):
    with pytest.raises(LookupError):
        billing.credit("cus_missing", 5, "grant")
    assert CreditLedger.select().count() == 0


def test_what_a_creation_costs_is_the_price_rules():
    assert billing.admission_cost(1) == billing.SCAN_PRICE
    assert billing.admission_cost(7, bulk=True) == 7 * billing.SCAN_PRICE
    assert billing.admission_cost(0, bulk=True) == billing.CALL_PRICE  # a bulk call that queued nothing
    assert billing.admission_cost(7, bulk=True, livemode=False) == 0  # test mode is free
    assert billing.unsubmitted_scan_refund(bulk=True, livemode=True) == billing.SCAN_PRICE
    assert billing.unsubmitted_scan_refund(bulk=False, livemode=False) == 0


def test_the_price_words_say_the_prices():
    assert billing.credits(1) == "1 credit"
    assert billing.credits(3) == "3 credits"
    assert billing.PRICE_WORDS["bulk"] == (f"{billing.credits(billing.SCAN_PRICE)} per queued scan, "
                                           f"{billing.credits(billing.CALL_PRICE)} if none")
