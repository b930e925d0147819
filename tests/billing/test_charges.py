"""billing: every change of a balance is a conditional UPDATE plus its ledger row (D3)."""
import random
from datetime import datetime

import pytest

from app.accounts.models import CreditLedger
from app.billing import charges, customers
from tests.domain_fixtures import books_of, call_entry


def test_charges_and_credits_keep_the_ledger_equal_to_the_balance_and_never_below_zero(conn):
    customer = customers.create_customer("Books", "business", 5)
    rng = random.Random(15)
    expected = 5
    for step in range(200):
        amount = rng.randint(1, 4)
        if rng.random() < 0.6:
            answer = charges.charge(customer.id, amount, "scan", note=f"step {step}")
            if amount <= expected:
                expected -= amount
                assert answer == expected
            else:
                assert answer is None  # short: refused whole, nothing taken
        else:
            expected += amount
            assert charges.credit(customer.id, amount, "refund", note=f"step {step}") == expected
        books = books_of(customer.id)
        assert books.balance == books.ledger_sum == expected >= 0, step


def test_a_refused_charge_writes_no_ledger_row(conn):
    customer = customers.create_customer("Short", "pro", 2)
    before = books_of(customer.id)
    assert charges.charge(customer.id, 3, "bulk") is None
    assert books_of(customer.id) == before
    assert charges.charge(customer.id, 2, "bulk") == 0  # exactly the balance is allowed
    assert charges.charge(customer.id, 1, "call") is None
    rows = [(r.delta, r.balance_after, r.reason) for r in
            CreditLedger.select().where(CreditLedger.customer == customer.id).order_by(CreditLedger.id)]
    assert rows == [(2, 2, "grant"), (-2, 0, "bulk")]


def test_each_ledger_row_records_the_balance_after_it(conn):
    customer = customers.create_customer("After", "business", 10)
    charges.charge(customer.id, 3, "scan", scan_id="scn_x")
    charges.credit(customer.id, 3, "refund", scan_id="scn_x", note="engine submission failed")
    charges.charge(customer.id, 1, "call", request_id="req_1")
    running = 0
    for row in CreditLedger.select().where(CreditLedger.customer == customer.id).order_by(CreditLedger.id):
        running += row.delta
        assert row.balance_after == running
    assert running == charges.balance_of(customer.id) == 9


def test_charge_call_charges_one_credit_and_reports_the_windows(conn):
    customer = customers.create_customer("Reads", "business", 1)
    now = datetime(2026, 11, 22, 12, 0, 0)
    balance, usage = charges.charge_call(customer.id, "req_read", now, entry=call_entry(customer.id))
    assert balance == 0 and (usage.hour, usage.day) == (0, 0)
    balance, usage = charges.charge_call(customer.id, "req_read2", now, entry=call_entry(customer.id))
    assert balance is None  # nothing left: no charge and no ledger row
    books = books_of(customer.id)
    assert (books.balance, books.ledger_rows, books.ledger_sum) == (0, 2, 0)


def test_credit_to_an_unknown_customer_is_refused(conn):
    with pytest.raises(LookupError):
        charges.credit("cus_missing", 5, "grant")
    assert CreditLedger.select().count() == 0


def test_what_a_creation_costs_is_the_price_rules():
    assert charges.admission_cost(1) == charges.SCAN_PRICE
    assert charges.admission_cost(7, bulk=True) == 7 * charges.SCAN_PRICE
    assert charges.admission_cost(0, bulk=True) == charges.CALL_PRICE  # a bulk call that queued nothing
    assert charges.admission_cost(7, bulk=True, livemode=False) == 0  # test mode is free
    assert charges.unsubmitted_scan_refund(bulk=True, livemode=True) == charges.SCAN_PRICE
    assert charges.unsubmitted_scan_refund(bulk=False, livemode=False) == 0


def test_the_price_words_say_the_prices():
    assert charges.credits(1) == "1 credit"
    assert charges.credits(3) == "3 credits"
    assert charges.PRICE_WORDS["bulk"] == (f"{charges.credits(charges.SCAN_PRICE)} per queued scan, "
                                           f"{charges.credits(charges.CALL_PRICE)} if none")


def _read_rows(customer_id: str) -> list[tuple]:
    return [(r.reason, r.note, r.livemode, r.minute, r.reads, r.delta, r.balance_after, r.request_id)
            for r in CreditLedger.select().where((CreditLedger.customer == customer_id)
                                                 & (CreditLedger.reason == charges.READS_REASON))
            .order_by(CreditLedger.id)]


def test_reads_of_one_endpoint_and_minute_are_one_row_that_grows(conn):
    customer = customers.create_customer("Summed", "business", 10)
    minute = datetime(2026, 11, 22, 12, 0)
    scan_read = "GET /api/v1/scan/{scan_id}"
    for second in (0, 20, 59):
        balance, _ = charges.charge_call(customer.id, f"req_{second}", minute.replace(second=second), scan_read,
                                         read_of=True, entry=call_entry(customer.id))
    assert balance == 7
    assert _read_rows(customer.id) == [("reads", scan_read, True, minute, 3, -3, 7, None)]
    # Another endpoint, the next minute and the other mode are rows of their own.
    charges.charge_call(customer.id, "req_a", minute, "GET /api/v1/account", read_of=True,
                        entry=call_entry(customer.id))
    charges.charge_call(customer.id, "req_n", minute.replace(minute=1), scan_read, read_of=True,
                        entry=call_entry(customer.id))
    charges.charge_call(customer.id, "req_t", minute, scan_read, read_of=False, entry=call_entry(customer.id))
    assert [(note, mode, at.minute, reads, delta) for _, note, mode, at, reads, delta, _, _ in
            _read_rows(customer.id)] == [(scan_read, True, 0, 3, -3), ("GET /api/v1/account", True, 0, 1, -1),
                                         (scan_read, True, 1, 1, -1), (scan_read, False, 0, 1, -1)]
    # The row's balance is the one after its latest read; the ledger sums to the balance.
    charges.charge_call(customer.id, "req_61", minute.replace(second=30), scan_read, read_of=True,
                        entry=call_entry(customer.id))
    assert _read_rows(customer.id)[0][4:7] == (4, -4, 3)
    books = books_of(customer.id)
    assert books.balance == books.ledger_sum == 3 and books.ledger_rows == 5


def test_a_read_the_balance_cannot_pay_changes_nothing(conn):
    customer = customers.create_customer("Short reads", "pro", 1)
    minute = datetime(2026, 11, 22, 12, 0)
    assert charges.charge_call(customer.id, "req_1", minute, "GET /api/v1/scans", read_of=True,
                               entry=call_entry(customer.id))[0] == 0
    assert charges.charge_call(customer.id, "req_2", minute, "GET /api/v1/scans", read_of=True,
                               entry=call_entry(customer.id))[0] is None
    assert _read_rows(customer.id) == [("reads", "GET /api/v1/scans", True, minute, 1, -1, 0, None)]
    books = books_of(customer.id)
    assert books.balance == books.ledger_sum == 0


def test_only_reads_are_summed_and_other_calls_keep_a_row_each(conn):
    assert charges.is_read("GET") and not charges.is_read("POST") and not charges.is_read("DELETE")
    customer = customers.create_customer("Calls", "business", 10)
    now = datetime(2026, 11, 22, 12, 0)
    for n in range(2):
        charges.charge_call(customer.id, f"req_{n}", now, "POST /api/v1/scan (400)", entry=call_entry(customer.id))
    rows = [(r.reason, r.reads, r.request_id) for r in
            CreditLedger.select().where((CreditLedger.customer == customer.id) & (CreditLedger.reason != "grant"))
            .order_by(CreditLedger.id)]
    assert rows == [("call", None, "req_0"), ("call", None, "req_1")]
    assert (charges.reads_words(1), charges.reads_words(12)) == ("1 read", "12 reads")
