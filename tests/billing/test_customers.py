"""billing: a customer's money and limits as the operator sees and moves them: a new customer
with its initial credits in one transaction, credits added and taken back through the ledger with
the reason, the overview, the quota counters rebuilt from the scans; every input checked before
anything changes (AccountError)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import CreditLedger, Customer
from app.billing import charges, customers, quotas
from app.billing.customers import BIGINT_MAX
from app.billing.models import QuotaMinute
from app.plumbing.errors import AccountError
from app.plumbing.models import new_id
from app.scans.models import Scan
from tests.domain_fixtures import books_of

NOW = datetime(2026, 11, 22, 12, 0, 0)


def test_a_new_customer_gets_its_initial_credits_as_one_grant(conn):
    cust = customers.create_customer("  Acme  ", "pro", 25)
    assert (cust.name, cust.tier, cust.balance, cust.in_flight) == ("Acme", "pro", 25, 0)
    [row] = CreditLedger.select().where(CreditLedger.customer == cust.id)
    assert (row.delta, row.balance_after, row.reason, row.note) == (25, 25, "grant", "initial credits")
    assert cust.id.startswith("cus_")


def test_no_credits_no_ledger_row(conn):
    cust = customers.create_customer("Zero", "business")
    assert cust.balance == 0
    assert CreditLedger.select().where(CreditLedger.customer == cust.id).count() == 0


@pytest.mark.parametrize("name, tier, credits, message", [
    ("Acme", "gold", 0, "tier must be one of"),
    ("   ", "pro", 0, "name must not be empty"),
    ("x" * 201, "pro", 0, "at most 200 characters"),
    ("Ac\x07me", "pro", 0, "control characters"),
    ("Acme", "pro", -1, "credits must be a whole number"),
    ("Acme", "pro", BIGINT_MAX + 1, "credits must be a whole number"),
])
def test_a_refused_customer_leaves_nothing(conn, name, tier, credits, message):
    with pytest.raises(AccountError, match=message):
        customers.create_customer(name, tier, credits)
    assert Customer.select().count() == 0


def test_credits_are_added_and_taken_back_with_the_reason_in_the_ledger(conn):
    cust = customers.create_customer("Credits", "business", 10)
    assert customers.add_credits(cust.id, 5, "  goodwill  ") == 15
    assert customers.add_credits(cust.id, -12) == 3
    rows = list(CreditLedger.select().where(CreditLedger.customer == cust.id).order_by(CreditLedger.id))
    assert [(r.delta, r.reason, r.note) for r in rows] == [
        (10, "grant", "initial credits"), (5, "grant", "goodwill"), (-12, "debit", None)]
    assert books_of(cust.id).ledger_sum == charges.balance_of(cust.id) == 3


@pytest.mark.parametrize("amount, reason, message", [
    (0, None, "must not be zero"),
    (-4, None, "smaller than the debit"),
    (BIGINT_MAX, None, "would exceed"),
    (1, "r" * 501, "at most 500 characters"),
    (-(BIGINT_MAX + 1), None, "amount must be a whole number"),
])
def test_a_refused_credit_change_leaves_the_books_alone(conn, amount, reason, message):
    cust = customers.create_customer("Refused", "business", 3)
    before = books_of(cust.id)
    with pytest.raises(AccountError, match=message):
        customers.add_credits(cust.id, amount, reason)
    assert books_of(cust.id) == before


def test_the_overview_shows_limits_usage_keys_and_latest_ledger_rows(conn):
    cust = customers.create_customer("Overview", "pro", 5)
    admin.set_limits(cust.id, hour=7)
    key, _ = admin.issue_key(cust.id, "k")
    customers.add_credits(cust.id, 2, "promo")
    quotas.count_created(cust.id, NOW - timedelta(minutes=5), 2)
    overview = customers.customer_overview(cust.id, now=NOW, ledger_rows=1)
    assert overview["limits"] == {"inflight": 3, "hour": 7, "day": 100, "watches": 100}
    assert overview["overrides"] == {"inflight": None, "hour": 7, "day": None, "watches": None}
    assert overview["usage"] == {"in_flight": 0, "hour": 2, "day": 2}
    assert [k["key_id"] for k in overview["keys"]] == [key.id]
    assert overview["keys"][0]["status"] == "active" and overview["keys"][0]["mode"] == "live"
    assert [(r["delta"], r["kind"], r["note"]) for r in overview["ledger"]] == [(2, "grant", "promo")]
    assert overview["balance"] == 7


def test_recount_rebuilds_the_counters_from_the_scans(conn):
    with freeze_time(NOW):
        cust = customers.create_customer("Recount", "business")
        key, _ = admin.issue_key(cust.id)
        for status in ("queued", "running", "completed"):
            Scan.create(id=new_id("scn"), customer=cust.id, api_key=key.id, kind="email", target="a@example.com",
                        status=status, created_at=NOW - timedelta(minutes=3))
        Customer.update(in_flight=9).where(Customer.id == cust.id).execute()  # counters gone wrong
        QuotaMinute.delete().execute()
        report = customers.recount(cust.id)
        assert report == {"customer_id": cust.id, "in_flight": {"was": 9, "now": 2}, "day": 3}
        assert Customer.get_by_id(cust.id).in_flight == 2
        assert quotas.window_usage(cust.id, NOW).hour == 3
