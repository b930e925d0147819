"""usage: the portal's activity buckets (live scans and net spending only), the ledger described
for a person, the export period's rules, and the export in order across chunks."""
from datetime import date, datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import CreditLedger
from app.billing import charges, customers, usage
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import utcnow
from tests.domain_fixtures import call_entry, new_customer, new_scan

NOW = datetime(2026, 11, 22, 12, 30, 0)


def test_daily_activity_counts_live_scans_and_net_spending_over_30_days(conn):
    with freeze_time(NOW - timedelta(days=30)) as frozen:  # a day before the window: left out
        cust, key = new_customer(credits=50)
        new_scan(cust, key)
        frozen.move_to(NOW - timedelta(days=2))
        new_scan(cust, key)
        new_scan(cust, key, "b@example.com")
        charges.credit(cust.id, 1, "refund", note="engine submission failed")
        frozen.move_to(NOW)
        new_scan(cust, key)
        customers.add_credits(cust.id, 100, "goodwill")  # an operator's credit is not spending
        customers.add_credits(cust.id, -3)               # nor is a debit
        test_key, _ = admin.issue_key(cust.id, "sandbox", livemode=False)
        new_scan(cust, test_key)                        # test scans are free and not counted
        days = usage.activity(cust.id, "day")
        assert len(days) == 30
        assert (days[0].label, days[-1].label) == ("2026-10-24", "2026-11-22")
        assert [(d.label, d.scans, d.credits) for d in days if d.scans or d.credits] == [
            ("2026-11-20", 2, 1), ("2026-11-22", 1, 1)]


def test_hourly_activity_covers_48_hours_including_this_one(conn):
    with freeze_time(NOW - timedelta(hours=48)) as frozen:  # the hour before the first bucket
        cust, key = new_customer(credits=10)
        new_scan(cust, key)
        frozen.move_to(NOW - timedelta(hours=47))
        new_scan(cust, key)
        frozen.move_to(NOW)
        new_scan(cust, key)
        hours = usage.activity(cust.id, "hour")
        assert len(hours) == 48
        assert (hours[0].label, hours[-1].label) == ("2026-11-20 13", "2026-11-22 12")
        assert (hours[0].scans, hours[-1].scans, sum(h.scans for h in hours)) == (1, 1, 2)
        with pytest.raises(ValueError, match="unknown unit"):
            usage.activity(cust.id, "week")


def test_each_movement_is_described_for_a_person(conn):
    cust, key = new_customer(credits=5)
    new_scan(cust, key)
    charges.charge_call(cust.id, "req_c", utcnow(), "GET /api/v1/scan/scn_x", entry=call_entry(cust.id))
    charges.credit(cust.id, 1, "refund", note="engine submission failed")
    customers.add_credits(cust.id, 7, "promo")
    customers.add_credits(cust.id, -2)
    described = [usage.describe(r) for r in CreditLedger.select().where(CreditLedger.customer == cust.id)
                 .order_by(CreditLedger.id)]
    assert [(d["kind"], d["what"], d["endpoint"], d["reason"]) for d in described] == [
        ("grant", "Credits added by your account manager", "", "initial credits"),
        ("scan", "Scan created", "POST /api/v1/scan", ""),
        ("call", "API call", "GET /api/v1/scan/scn_x", ""),
        ("refund", "Refund", "", "engine submission failed"),
        ("grant", "Credits added by your account manager", "", "promo"),
        ("debit", "Credits taken back by your account manager", "", ""),
    ]
    assert described[1]["scan_id"] and described[1]["delta"] == -1


def test_the_ledger_pages_newest_first(conn):
    cust, _ = new_customer(credits=1)
    for n in range(4):
        customers.add_credits(cust.id, n + 1)
    page = usage.ledger_page(cust.id, page=1, per_page=2)
    assert [r["delta"] for r in page.items] == [4, 3] and (page.total, page.pages) == (5, 3)
    assert [r["delta"] for r in usage.ledger_page(cust.id, page=3, per_page=2).items] == [1]
    assert len(usage.ledger_page(cust.id, page=0, per_page=1000).items) == 5  # clamped


def test_summed_reads_are_dated_by_the_latest_with_the_balance_after_it(conn):
    """A minute's summed reads are dated by the latest, with the balance after it: a movement
    made between the minute's reads is listed before the row, and the newest row's balance is the
    balance (the CLI's ``customers show`` and the portal's usage page list these). The README once
    called this a running balance; row by row it is not (94 - 2 is not 93), but the changes add up."""
    at = datetime(2026, 11, 22, 12, 30, 5)
    with freeze_time(at - timedelta(hours=1)):
        cust, _ = new_customer(credits=100)
    charges.charge_call(cust.id, "req_1", at, "GET /api/v1/scan/{scan_id}", read_of=True,
                        entry=call_entry(cust.id))
    with freeze_time(at + timedelta(seconds=10)):
        customers.add_credits(cust.id, -5, "correction")
    charges.charge_call(cust.id, "req_2", at + timedelta(seconds=20), "GET /api/v1/scan/{scan_id}", read_of=True,
                        entry=call_entry(cust.id))
    for listed in (usage.ledger_page(cust.id, page=1, per_page=10).items,
                   customers.customer_overview(cust.id)["ledger"]):
        assert [(r["delta"], r["balance_after"]) for r in listed] == [(-2, 93), (-5, 94), (100, 100)]
        assert listed[0]["balance_after"] == charges.balance_of(cust.id)
        assert sum(r["delta"] for r in listed) == charges.balance_of(cust.id)
    times = [r["created_at"] for r in usage.ledger_page(cust.id, page=1, per_page=10).items]
    assert times[:2] == [at + timedelta(seconds=20), at + timedelta(seconds=10)]


@pytest.mark.parametrize("start, end, message", [
    (date(2026, 11, 10), date(2026, 11, 9), "must not be after"),
    (date(2025, 1, 1), date(2026, 1, 2), "at most 366 days"),
    (date(2026, 11, 23), date(2026, 11, 30), "starts in the future"),
])
def test_a_period_that_cannot_be_exported_is_refused(start, end, message):
    with pytest.raises(InvalidRequest, match=message):
        usage.check_period(start, end, today=date(2026, 11, 22))


def test_a_period_is_the_half_open_interval_of_its_days():
    assert usage.check_period(date(2026, 11, 1), date(2026, 11, 22), today=date(2026, 11, 22)) == (
        datetime(2026, 11, 1), datetime(2026, 11, 23))
    assert usage.check_period(date(2025, 11, 22), date(2026, 11, 22), today=date(2026, 11, 22))[0] == datetime(
        2025, 11, 22)  # 366 days is allowed


def test_the_export_is_the_periods_movements_oldest_first_across_chunks(conn):
    with freeze_time(NOW - timedelta(days=1)) as frozen:
        cust, _ = new_customer(credits=1)  # the day before: outside the period
        frozen.move_to(NOW)
        for n in range(3):
            customers.add_credits(cust.id, n + 10)
        # More rows than one chunk of the export (1,000), many at one instant: the id orders them.
        CreditLedger.insert_many([{"customer": cust.id, "delta": 0, "balance_after": 34, "reason": "grant",
                                   "created_at": NOW + timedelta(hours=1)} for _ in range(1200)]).execute()
        frozen.move_to(NOW + timedelta(days=1))
        customers.add_credits(cust.id, 99)  # the day after: outside
        since, until = usage.check_period(NOW.date(), NOW.date(), today=NOW.date())
        exported = list(usage.ledger_export(cust.id, since, until))
        assert len(exported) == 1203
        assert [r["delta"] for r in exported[:3]] == [10, 11, 12]
        ids = [r["id"] for r in exported]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # no row twice at a chunk's edge


def test_activity_buckets_by_day_and_hour_at_a_given_now(conn):
    # Moved from tests/portal/test_portal_pages.py (a service call, no HTTP).
    account, _ = new_customer(credits=0)
    now = NOW
    for delta, reason, when in ((-1, "scan", now - timedelta(days=3)), (-1, "call", now - timedelta(days=3)),
                                (1, "refund", now - timedelta(days=3)), (-1, "scan", now - timedelta(hours=1)),
                                (-5, "call", now - timedelta(days=40))):
        CreditLedger.create(customer=account.id, delta=delta, balance_after=0, reason=reason, created_at=when)
    days = usage.activity(account.id, "day", now)
    hours = usage.activity(account.id, "hour", now)
    assert days[-4].credits == 1 and days[-1].credits == 1 and sum(b.credits for b in days) == 2
    assert hours[-2].credits == 1 and sum(b.credits for b in hours) == 1
    assert all(b.credits == 0 for b in days if b.label == (now - timedelta(days=40)).strftime("%Y-%m-%d"))


def test_a_row_of_summed_reads_says_how_many_reads_it_holds(conn):
    cust, _ = new_customer(credits=5)
    at = datetime(2026, 11, 22, 12, 30, 41)
    charges.charge_call(cust.id, "req_1", at, "GET /api/v1/account", read_of=True, entry=call_entry(cust.id))
    charges.charge_call(cust.id, "req_2", at.replace(minute=31), "GET /api/v1/scan/{scan_id}", read_of=True,
                        entry=call_entry(cust.id))
    charges.charge_call(cust.id, "req_3", at.replace(minute=31, second=50), "GET /api/v1/scan/{scan_id}",
                        read_of=True, entry=call_entry(cust.id))
    rows = CreditLedger.select().where((CreditLedger.customer == cust.id) & (CreditLedger.reason == "reads"))
    described = [usage.describe(r) for r in rows.order_by(CreditLedger.id)]
    assert [(d["kind"], d["what"], d["endpoint"], d["delta"], d["reads"], d["created_at"], d["request_id"])
            for d in described] == [
        ("reads", "1 read", "GET /api/v1/account", -1, 1, datetime(2026, 11, 22, 12, 30, 41), None),
        ("reads", "2 reads", "GET /api/v1/scan/{scan_id}", -2, 2, datetime(2026, 11, 22, 12, 31, 50), None)]
    assert described[1]["balance_after"] == 2 == charges.balance_of(cust.id)
    # The charts count a summed row's credits in its hour, like any charge.
    [hour] = [h for h in usage.activity(cust.id, "hour", now=at) if h.credits]
    assert (hour.label, hour.credits) == ("2026-11-22 12", 3)


def test_the_account_view_charges_its_call_and_shows_the_balance_after_it(conn):
    from app.accounts import access
    from app.activity import entries
    from app.activity.models import ActivityEntry
    from app.plumbing.errors import InsufficientBalance
    from tests.domain_fixtures import books_of, new_customer

    cust, key = new_customer(credits=2)

    def entry(request_id):
        return entries.call_entry(customer_id=cust.id, livemode=True, key_id=key.id, action="account.read",
                                   resource_id=None, client_address=None, request_id=request_id, status=200)

    before = books_of(cust.id)
    view = usage.account_view(key, request_id="req_a", endpoint="GET /api/v1/account", entry=entry("req_a"))
    assert view.balance == view.body["balance"] == 1 == books_of(cust.id).balance
    assert books_of(cust.id).ledger_rows == before.ledger_rows + 1
    assert view.body["key"] == {"key_id": key.id, "livemode": True, "scopes": list(access.SCOPES),
                                "expires_at": None, "allowed_ips": None}
    assert (view.limits.inflight, view.usage.hour) == (10, 0)
    usage.account_view(key, request_id="req_b", endpoint=None, entry=entry("req_b"))
    with pytest.raises(InsufficientBalance):  # the balance ran out between the check and the charge
        usage.account_view(key, request_id="req_c", endpoint=None, entry=entry("req_c"))
    # Each charge wrote its call's entry in its statement (D25); the refused one wrote none.
    written = ActivityEntry.select().where(ActivityEntry.customer_id == cust.id).order_by(ActivityEntry.created_at)
    assert [(e.request_id, e.status, e.credits) for e in written] == [("req_a", 200, 1), ("req_b", 200, 1)]
    assert books_of(cust.id).balance == 0
