"""accounts: customers, keys and users as the operator CLI and the portal manage them; every
input checked before anything changes (AccountError). A customer's credits, limits and usage as
the operator sees them are billing's (tests/billing/test_customers.py)."""
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.admin import INT_MAX, AccountError
from app.accounts.models import ApiKey, Customer, PortalUser
from app.plumbing.crypto import digest

NOW = datetime(2026, 11, 22, 12, 0, 0)


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


def test_a_new_customer_is_the_row_alone_with_no_credits(conn):
    cust = admin.create_customer("  Acme  ", "pro")
    assert (cust.name, cust.tier, Customer.get_by_id(cust.id).balance) == ("Acme", "pro", 0)
    with pytest.raises(AccountError, match="tier must be one of"):
        admin.create_customer("Acme", "gold")
    assert Customer.select().count() == 1
