"""accounts: customers, keys and users as the operator CLI and the portal manage them; every
input checked before anything changes (AccountError), credits through the ledger."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.admin import BIGINT_MAX, INT_MAX, AccountError
from app.accounts.models import ApiKey, CreditLedger, Customer, PortalUser
from app.billing import charges, quotas
from app.plumbing.crypto import digest
from app.plumbing.models import new_id
from app.scans.models import QuotaMinute, Scan
from tests.domain_fixtures import books_of

NOW = datetime(2026, 11, 22, 12, 0, 0)


def test_a_new_customer_gets_its_initial_credits_as_one_grant(conn):
    cust = admin.create_customer("  Acme  ", "pro", 25)
    assert (cust.name, cust.tier, cust.balance, cust.in_flight) == ("Acme", "pro", 25, 0)
    [row] = CreditLedger.select().where(CreditLedger.customer == cust.id)
    assert (row.delta, row.balance_after, row.reason, row.note) == (25, 25, "grant", "initial credits")
    assert cust.id.startswith("cus_")


def test_no_credits_no_ledger_row(conn):
    cust = admin.create_customer("Zero", "business")
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
        admin.create_customer(name, tier, credits)
    assert Customer.select().count() == 0


@pytest.mark.parametrize("bad_id", ["cus_missing", "cus\x00nul", "c" * 41])
def test_unknown_ids_are_account_errors_not_database_errors(conn, bad_id):
    with pytest.raises(AccountError, match="no customer"):
        admin.get_customer(bad_id)
    with pytest.raises(AccountError, match="no key"):
        admin.get_key(bad_id.replace("cus", "key"))
    assert admin.list_keys(bad_id) == []


def test_tier_and_limits_change_and_are_checked(conn):
    cust = admin.create_customer("Limits", "pro")
    assert admin.set_tier(cust.id, "enterprise").tier == "enterprise"
    with pytest.raises(AccountError):
        admin.set_tier(cust.id, "platinum")
    changed = admin.set_limits(cust.id, inflight=0, day=INT_MAX)
    assert (changed.inflight_limit, changed.hour_limit, changed.day_limit) == (0, None, INT_MAX)
    with pytest.raises(AccountError, match="hour_limit"):
        admin.set_limits(cust.id, hour=-1)
    with pytest.raises(AccountError, match="day_limit"):
        admin.set_limits(cust.id, inflight=5, day=INT_MAX + 1)
    assert Customer.get_by_id(cust.id).inflight_limit == 0  # a refused call changes no limit


def test_credits_are_added_and_taken_back_with_the_reason_in_the_ledger(conn):
    cust = admin.create_customer("Credits", "business", 10)
    assert admin.add_credits(cust.id, 5, "  goodwill  ") == 15
    assert admin.add_credits(cust.id, -12) == 3
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
    cust = admin.create_customer("Refused", "business", 3)
    before = books_of(cust.id)
    with pytest.raises(AccountError, match=message):
        admin.add_credits(cust.id, amount, reason)
    assert books_of(cust.id) == before


def test_a_key_is_stored_as_its_digest_and_shown_once(conn):
    cust = admin.create_customer("Keys", "business")
    key, plaintext = admin.issue_key(cust.id, " primary ")
    stored = ApiKey.get_by_id(key.id)
    assert stored.digest == digest(plaintext)
    assert plaintext not in {stored.prefix, stored.last4, stored.name}
    assert (stored.name, stored.prefix, stored.last4, stored.livemode) == ("primary", plaintext[:17], plaintext[-4:], True)
    test_key, test_plain = admin.issue_key(cust.id, livemode=False)
    assert test_plain.startswith("service_test_") and ApiKey.get_by_id(test_key.id).livemode is False


def test_a_key_of_no_customer_is_refused(conn):
    with pytest.raises(AccountError, match="no customer"):
        admin.issue_key("cus_nobody", "k")
    assert ApiKey.select().count() == 0


def test_keys_are_listed_oldest_first_or_newest_first_for_the_portal(conn):
    with freeze_time(NOW) as frozen:
        one, two = admin.create_customer("One", "pro"), admin.create_customer("Two", "pro")
        first, _ = admin.issue_key(one.id, "first")
        frozen.tick(1)
        other, _ = admin.issue_key(two.id, "other")
        frozen.tick(1)
        second, _ = admin.issue_key(one.id, "second")
        assert [k.id for k in admin.list_keys()] == [first.id, other.id, second.id]
        assert [k.id for k in admin.list_keys(one.id)] == [first.id, second.id]
        assert [k.id for k in admin.customer_keys(one.id)] == [second.id, first.id]


def test_revoking_is_once_and_an_unknown_key_is_refused(conn):
    with freeze_time(NOW) as frozen:
        cust = admin.create_customer("Revoke", "pro")
        key, _ = admin.issue_key(cust.id)
        revoked = admin.revoke_key(key.id)
        assert revoked.revoked_at == NOW and not revoked.is_live
        frozen.tick(60)
        assert admin.revoke_key(key.id).revoked_at == NOW  # the first revocation stands
        with pytest.raises(AccountError):
            admin.revoke_key("key_unknown")


def test_portal_users_are_checked_and_unique_by_address(conn):
    cust = admin.create_customer("Users", "pro")
    user = admin.create_user(cust.id, "  Ops@Acme.Example ", "a-long-password")
    assert user.email == "ops@acme.example"
    assert user.password_hash != "a-long-password"
    for email, password, message in [("ops@acme.example", "another-password", "exists already"),
                                     ("not-an-address", "a-long-password", "e-mail address"),
                                     ("new@acme.example", "short", "at least 10")]:
        with pytest.raises(AccountError, match=message):
            admin.create_user(cust.id, email, password)
    with pytest.raises(AccountError, match="role must be one of owner, admin, developer, viewer, not 'root'"):
        admin.create_user(cust.id, "root@acme.example", "a-long-password", role="root")
    assert PortalUser.select().count() == 1
    assert (user.role, admin.create_user(cust.id, "dev@acme.example", "a-long-password", "developer").role) == (
        "owner", "developer")


def test_the_overview_shows_limits_usage_keys_and_latest_ledger_rows(conn):
    cust = admin.create_customer("Overview", "pro", 5)
    admin.set_limits(cust.id, hour=7)
    key, _ = admin.issue_key(cust.id, "k")
    admin.add_credits(cust.id, 2, "promo")
    quotas.count_created(cust.id, NOW - timedelta(minutes=5), 2)
    overview = admin.customer_overview(cust.id, now=NOW, ledger_rows=1)
    assert overview["limits"] == {"inflight": 3, "hour": 7, "day": 100, "watches": 100}
    assert overview["overrides"] == {"inflight": None, "hour": 7, "day": None, "watches": None}
    assert overview["usage"] == {"in_flight": 0, "hour": 2, "day": 2}
    assert [k["key_id"] for k in overview["keys"]] == [key.id]
    assert overview["keys"][0]["status"] == "active" and overview["keys"][0]["mode"] == "live"
    assert [(r["delta"], r["kind"], r["note"]) for r in overview["ledger"]] == [(2, "grant", "promo")]
    assert overview["balance"] == 7


def test_recount_rebuilds_the_counters_from_the_scans(conn):
    with freeze_time(NOW):
        cust = admin.create_customer("Recount", "business")
        key, _ = admin.issue_key(cust.id)
        for status in ("queued", "running", "completed"):
            Scan.create(id=new_id("scn"), customer=cust.id, api_key=key.id, kind="email", target="a@example.com",
                        status=status, created_at=NOW - timedelta(minutes=3))
        Customer.update(in_flight=9).where(Customer.id == cust.id).execute()  # counters gone wrong
        QuotaMinute.delete().execute()
        report = admin.recount(cust.id)
        assert report == {"customer_id": cust.id, "in_flight": {"was": 9, "now": 2}, "day": 3}
        assert Customer.get_by_id(cust.id).in_flight == 2
        assert quotas.window_usage(cust.id, NOW).hour == 3
