"""D21 in ``app.accounts.access``: the check's order, the parsing of scopes and allowlists, the
operator's changes and the portal's narrowing (never widening, never a later expiry)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import access, admin
from app.accounts.models import ApiKey
from app.plumbing.errors import AccountError, InsufficientScope, IpNotAllowed, KeyExpired
from tests.domain_fixtures import new_customer

NOW = datetime(2026, 11, 21, 12, 0, 0)


def _key(**rules) -> ApiKey:
    cust, _ = new_customer()
    key, _ = admin.issue_key(cust.id, "k", **rules)
    return key


def test_a_key_is_issued_with_every_scope_no_expiry_and_no_allowlist_unless_told(conn):
    key = _key()
    assert (key.scopes, key.expires_at, key.allowed_ips) == (list(access.SCOPES), None, None)
    with freeze_time(NOW):
        narrow = _key(scopes="scans:read, scans:write", expires_in_days=30, allowed_ips="203.0.113.7,2001:DB8::/32")
    assert narrow.scopes == ["scans:write", "scans:read"]  # in SCOPES order
    assert narrow.expires_at == NOW + timedelta(days=30)
    assert narrow.allowed_ips == ["203.0.113.7/32", "2001:db8::/32"]  # normalised


def test_the_check_refuses_in_d21s_order():
    key = ApiKey(scopes=[access.SCANS_READ], expires_at=NOW, allowed_ips=["203.0.113.0/24"])
    with pytest.raises(KeyExpired):
        access.check(key, scope=access.SCANS_WRITE, client_address="198.51.100.1", now=NOW)
    with pytest.raises(IpNotAllowed):
        access.check(key, scope=access.SCANS_WRITE, client_address="198.51.100.1", now=NOW - timedelta(seconds=1))
    with pytest.raises(InsufficientScope, match="scans:write") as refused:
        access.check(key, scope=access.SCANS_WRITE, client_address="203.0.113.9", now=NOW - timedelta(seconds=1))
    assert refused.value.key is key and refused.value.code == "insufficient_scope"
    access.check(key, scope=access.SCANS_READ, client_address="203.0.113.9", now=NOW - timedelta(seconds=1))
    access.check(key, scope=access.ANY_SCOPE, client_address="203.0.113.9", now=NOW - timedelta(seconds=1))


@pytest.mark.parametrize("blocks, address, allowed", [
    (None, None, True),
    (None, "198.51.100.1", True),
    (["203.0.113.0/24"], "203.0.113.255", True),
    (["203.0.113.0/24"], "203.0.114.0", False),
    (["2001:db8::/32"], "2001:db8:ffff::1", True),
    (["203.0.113.0/24"], "::ffff:203.0.113.1", False),  # as PostgreSQL's <<= has it: another family
    (["203.0.113.0/24"], "", False),
    (["203.0.113.0/24"], None, False),
    (["203.0.113.0/24"], "unix:/run/gunicorn.sock", False),
])
def test_an_address_is_allowed_only_inside_a_block(blocks, address, allowed):
    assert access.address_allowed(blocks, address) is allowed


@pytest.mark.parametrize("value, message", [
    ("scans:read,scans:delete", "unknown scope 'scans:delete'"),
    ("", "at least one scope"),
    (" , ", "at least one scope"),
])
def test_scopes_are_checked(value, message):
    with pytest.raises(AccountError, match=message):
        access.parse_scopes(value)


def test_allowlists_are_checked_and_none_removes_one():
    assert access.parse_allowlist("none") is None and access.parse_allowlist(None) is None
    assert access.parse_allowlist("10.0.0.0/8,10.0.0.0/8, 10.1.2.3/32") == ["10.0.0.0/8", "10.1.2.3/32"]
    assert access.parse_allowlist("2001:db8::/32\n203.0.113.5") == ["2001:db8::/32", "203.0.113.5/32"]
    with pytest.raises(AccountError, match=r"'10\.0\.0\.300' is not an IP address or CIDR block"):
        access.parse_allowlist("10.0.0.300")
    with pytest.raises(AccountError, match="at most 50 blocks, not 51"):
        access.parse_allowlist([f"10.0.{n}.0/24" for n in range(51)])
    assert len(access.parse_allowlist([f"10.0.{n}.0/24" for n in range(50)])) == 50


@pytest.mark.parametrize("value, message", [
    # Each of these could widen a key's access by mistake: refused, naming what was meant.
    ("", "the allowlist is empty: give IP addresses or CIDR blocks, or 'none'"),
    (" , \n", "the allowlist is empty"),
    ([], "the allowlist is empty"),
    ("10.0.0.1/8", r"'10\.0\.0\.1/8' has host bits set, so it is not a block: did you mean 10\.0\.0\.0/8\? "
                   r"\(or 10\.0\.0\.1/32 for that address alone\)"),
    ("203.0.113.0/24,2001:db8::1/32", r"did you mean 2001:db8::/32\? \(or 2001:db8::1/128"),
    ("fe80::1%eth0", r"'fe80::1%eth0' carries an IPv6 zone id .*did you mean fe80::1\?"),
    ("fe80::%2/64", r"zone id .*did you mean fe80::/64\?"),
    ("none,10.0.0.0/8", "'none' removes the allowlist and goes alone"),
])
def test_an_allowlist_that_could_widen_access_by_mistake_is_refused(value, message):
    with pytest.raises(AccountError, match=message):
        access.parse_allowlist(value)


@pytest.mark.parametrize("days", [0, -1, 3651])
def test_an_expiry_is_one_day_to_ten_years(days):
    with pytest.raises(AccountError, match="from 1 to 3650"):
        access.expiry_in_days(days, NOW)


def test_the_operator_sets_any_access_and_a_refused_change_changes_nothing(conn):
    key = _key(allowed_ips="203.0.113.0/24")
    with freeze_time(NOW):
        changed = access.set_access(key.id, scopes="webhooks", expires_in_days=7)
    assert (changed.scopes, changed.expires_at, changed.allowed_ips) == (["webhooks"], NOW + timedelta(days=7),
                                                                         ["203.0.113.0/24"])
    assert access.set_access(key.id, allowed_ips=None).allowed_ips is None
    with pytest.raises(AccountError, match="unknown scope"):
        access.set_access(key.id, scopes="webhooks,admin", allowed_ips="10.0.0.0/8")
    assert ApiKey.get_by_id(key.id).allowed_ips is None  # nothing of the refused change
    with pytest.raises(AccountError, match="no key"):
        access.set_access("key_nope", scopes="webhooks")
    with pytest.raises(AccountError, match="give --scopes"):
        access.set_access(key.id)


def test_the_portal_narrows_but_never_widens_nor_extends(conn):
    with freeze_time(NOW):
        key = _key(scopes="scans:read,scans:write,webhooks", expires_in_days=30)
        narrowed = access.narrow_access(key.id, key.customer_id, scopes=["scans:read"],
                                        expires_at=NOW + timedelta(days=10), allowed_ips="203.0.113.0/24")
        assert (narrowed.scopes, narrowed.expires_at, narrowed.allowed_ips) == (
            ["scans:read"], NOW + timedelta(days=10), ["203.0.113.0/24"])
        refusals = [
            ({"scopes": ["scans:read", "webhooks"], "expires_at": narrowed.expires_at}, "can only be narrowed"),
            ({"scopes": ["scans:read"], "expires_at": NOW + timedelta(days=11)}, "earlier, not later"),
            ({"scopes": ["scans:read"], "expires_at": None}, "earlier, not removed"),
            ({"scopes": ["scans:read"], "expires_at": NOW}, "in the future"),
            ({"scopes": [], "expires_at": narrowed.expires_at}, "at least one scope"),
        ]
        for change, message in refusals:
            with pytest.raises(AccountError, match=message):
                access.narrow_access(key.id, key.customer_id, allowed_ips=None, **change)
            after = ApiKey.get_by_id(key.id)
            assert (after.scopes, after.expires_at, after.allowed_ips) == (
                ["scans:read"], NOW + timedelta(days=10), ["203.0.113.0/24"])
        other, _ = new_customer()
        with pytest.raises(LookupError):
            access.narrow_access(key.id, other.id, scopes=["scans:read"], expires_at=None, allowed_ips=None)


def test_access_of_is_what_the_account_call_shows():
    key = ApiKey(scopes=["scans:read"], expires_at=NOW, allowed_ips=["10.0.0.0/8"])
    assert access.access_of(key) == {"scopes": ["scans:read"], "expires_at": "2026-11-21T12:00:00Z",
                                     "allowed_ips": ["10.0.0.0/8"]}


def test_a_day_picked_in_the_portal_is_its_start_unless_it_is_the_current_expirys():
    from datetime import date
    assert access.expiry_on(None, NOW) is None
    assert access.expiry_on(date(2026, 11, 30), None) == datetime(2026, 11, 30)
    assert access.expiry_on(date(2026, 11, 21), NOW) == NOW  # sent back unchanged: kept as it is
    assert access.expiry_on(date(2026, 11, 20), NOW) == datetime(2026, 11, 20)


def test_a_narrowing_based_on_what_changed_meanwhile_is_refused(conn, monkeypatch):
    """Two admins at once: the second narrowing, checked against the key as it was, must not write
    back a scope the first took away."""
    key = _key(scopes="scans:read,scans:write,webhooks")
    stale = ApiKey.get_by_id(key.id)
    access.narrow_access(key.id, key.customer_id, scopes=["scans:read", "scans:write"], expires_at=None,
                         allowed_ips=None)
    monkeypatch.setattr(access, "_key", lambda key_id: stale)  # the second admin read the key before the first
    with pytest.raises(AccountError, match="changed meanwhile"):
        access.narrow_access(key.id, key.customer_id, scopes=["scans:read", "webhooks"], expires_at=None,
                             allowed_ips=None)
    assert ApiKey.get_by_id(key.id).scopes == ["scans:write", "scans:read"]


def test_every_change_of_a_keys_access_is_one_log_line_without_addresses(conn, caplog):
    import logging
    _, key = new_customer()
    with caplog.at_level(logging.INFO, logger="app.accounts.access"):
        access.set_access(key.id, scopes="scans:read", allowed_ips="203.0.113.0/24")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"key {key.id} access changed by the operator: scopes scans:read, expires unchanged, "
                     f"allowlist 1 block(s)"]
    assert "203.0.113" not in caplog.text
