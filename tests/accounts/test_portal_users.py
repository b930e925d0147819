"""portal_users: login within the throttle, server-side sessions that end at logout, at a
password reset, when the user is disabled or after SESSION_LIFETIME; the operator's views."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin, login_throttle, portal_users
from app.accounts.models import PortalSession, PortalUser
from app.accounts.portal_users import LoginRefused, LoginThrottled
from app.plumbing.crypto import digest
from app.plumbing.errors import AccountError

EMAIL = "ops@acme.example"
PASSWORD = "correct horse battery"
NOW = datetime(2026, 11, 22, 12, 0, 0)


@pytest.fixture
def user(conn):
    cust = admin.create_customer("Portal", "business")
    return admin.create_user(cust.id, EMAIL, PASSWORD)


def test_the_right_password_logs_in_whatever_the_case_of_the_address(user):
    assert portal_users.authenticate(" OPS@acme.EXAMPLE ", PASSWORD, "10.0.0.1").id == user.id


@pytest.mark.parametrize("email, password", [(EMAIL, "wrong password"), ("nobody@acme.example", PASSWORD)])
def test_a_wrong_address_or_password_is_one_refusal(user, email, password):
    with pytest.raises(LoginRefused):
        portal_users.authenticate(email, password, "10.0.0.1")


def test_an_unknown_address_costs_the_check_of_a_real_hash():
    """The hash checked for an unknown address is written out: it must cost what a user's hash
    costs (the same method and parameters), or a refusal would tell which addresses exist."""
    from werkzeug.security import check_password_hash, generate_password_hash
    made = generate_password_hash("any password at all", method=portal_users.PASSWORD_METHOD)
    assert portal_users._DUMMY_HASH.split("$")[0] == made.split("$")[0] == "scrypt:32768:8:1"
    assert not check_password_hash(portal_users._DUMMY_HASH, "any password at all")


def test_a_disabled_user_is_refused_even_with_the_right_password(user):
    portal_users.set_disabled(EMAIL, True)
    with pytest.raises(LoginRefused):
        portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.1")


def test_wrong_passwords_are_throttled_before_the_password_is_checked(user, redis_conn):
    for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT):
        with pytest.raises(LoginRefused):
            portal_users.authenticate(EMAIL, "wrong password", "10.0.0.1")
    with pytest.raises(LoginThrottled) as throttled:
        portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.1")  # even the right one, unchecked
    assert throttled.value.retry_after > 0
    assert portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.2").id == user.id  # another client


def test_a_successful_login_resets_this_clients_count(user, redis_conn):
    for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT - 1):
        with pytest.raises(LoginRefused):
            portal_users.authenticate(EMAIL, "wrong password", "10.0.0.1")
    portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.1")
    for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT - 1):
        with pytest.raises(LoginRefused):
            portal_users.authenticate(EMAIL, "wrong password", "10.0.0.1")
    assert portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.1").id == user.id


def test_a_session_is_stored_as_its_digest_and_ends_after_its_lifetime(conn):
    with freeze_time(NOW) as frozen:
        cust = admin.create_customer("Portal", "business")
        user = admin.create_user(cust.id, EMAIL, PASSWORD)
        token = portal_users.start_session(user)
        row = PortalSession.get_by_id(digest(token))
        assert (row.user_id, row.expires_at) == (user.id, NOW + portal_users.SESSION_LIFETIME)
        assert PortalUser.get_by_id(user.id).last_login_at == NOW
        found = portal_users.session_user(token)
        assert found.id == user.id and found.customer.id == cust.id
        frozen.tick(portal_users.SESSION_LIFETIME - timedelta(seconds=1))
        assert portal_users.session_user(token) is not None
        frozen.tick(timedelta(seconds=1))
        assert portal_users.session_user(token) is None
        portal_users.start_session(user)  # a new login sweeps the expired row
        assert not PortalSession.select().where(PortalSession.id == digest(token)).exists()


def test_session_user_is_none_for_junk_tokens(user):
    # Moved from tests/portal/test_portal_security.py (a service call, no HTTP).
    token = portal_users.start_session(user)
    assert portal_users.session_user(token).id == user.id
    for junk in (None, "", 7, ["x"], token + "x", "x" * 500, "x" * 201):
        assert portal_users.session_user(junk) is None


def test_logout_ends_only_that_session(user):
    first, second = portal_users.start_session(user), portal_users.start_session(user)
    portal_users.end_session(first)
    portal_users.end_session(None)  # nothing to end, no error
    assert portal_users.session_user(first) is None
    assert portal_users.session_user(second).id == user.id


def test_a_password_reset_ends_every_session_and_lifts_the_lockout(user, redis_conn):
    tokens = [portal_users.start_session(user) for _ in range(2)]
    for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT):
        with pytest.raises(LoginRefused):
            portal_users.authenticate(EMAIL, "wrong password", "10.0.0.1")
    updated, ended = portal_users.reset_password(EMAIL, "a brand new password")
    assert ended == 2
    assert all(portal_users.session_user(t) is None for t in tokens)
    assert portal_users.authenticate(EMAIL, "a brand new password", "10.0.0.1").id == updated.id
    with pytest.raises(LoginRefused):
        portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.3")


@pytest.mark.parametrize("password, message", [("short", "at least 10"), ("x" * 1001, "at most 1000")])
def test_a_refused_new_password_changes_nothing(user, password, message):
    token = portal_users.start_session(user)
    with pytest.raises(AccountError, match=message):
        portal_users.reset_password(EMAIL, password)
    assert portal_users.session_user(token) is not None
    assert portal_users.authenticate(EMAIL, PASSWORD, "10.0.0.1").id == user.id


def test_disabling_ends_the_sessions_and_enabling_lets_the_user_back(user):
    token = portal_users.start_session(user)
    disabled, ended = portal_users.set_disabled(EMAIL, True)
    assert (disabled.disabled, ended) == (True, 1)
    assert portal_users.session_user(token) is None
    enabled, ended = portal_users.set_disabled(EMAIL, False)
    assert (enabled.disabled, ended) == (False, 0)
    assert portal_users.authenticate(EMAIL, PASSWORD, None).id == user.id


def test_operator_actions_on_an_unknown_user_are_refused(conn):
    with pytest.raises(AccountError, match=r"no user nobody@acme\.example"):
        portal_users.get_user(" Nobody@Acme.Example")
    with pytest.raises(AccountError):
        portal_users.set_disabled("nobody@acme.example", True)


def test_users_are_listed_with_their_live_sessions(conn):
    with freeze_time(NOW) as frozen:
        one, two = admin.create_customer("One", "pro"), admin.create_customer("Two", "pro")
        first = admin.create_user(one.id, "a@one.example", PASSWORD)
        frozen.tick(1)
        other = admin.create_user(two.id, "b@two.example", PASSWORD)
        portal_users.start_session(first)
        portal_users.start_session(first)
        listed = portal_users.list_users()
        assert [(u["email"], u["sessions"]) for u in listed] == [("a@one.example", 2), ("b@two.example", 0)]
        assert [u["user_id"] for u in portal_users.list_users(two.id)] == [other.id]
        assert portal_users.live_sessions([]) == {}
        frozen.tick(portal_users.SESSION_LIFETIME)
        assert portal_users.live_sessions([first.id]) == {}
        with pytest.raises(AccountError):
            portal_users.list_users("cus_unknown")


# --- users added by owners (D21) -------------------------------------------------------------


@pytest.fixture
def owner(user):
    return user  # admin.create_user (the operator's `users create`) makes an owner


def test_the_operator_makes_owners(owner):
    assert owner.role == "owner"


def test_an_invited_user_sets_a_password_through_a_link_that_works_once(owner):
    with freeze_time(NOW):
        invited, token = portal_users.invite_user(owner.customer_id, email=" Dev@Acme.example ", role="developer",
                                                  by_user_id=owner.id)
        assert invited.email == "dev@acme.example" and invited.role == "developer"
        stored = PortalUser.get_by_id(invited.id)
        assert stored.password_token_digest == digest(token) and token not in stored.password_token_digest
        with pytest.raises(LoginRefused):  # no password yet: nothing logs in
            portal_users.authenticate("dev@acme.example", "!", "10.0.0.1")
        assert portal_users.password_link_user(token).id == invited.id
        portal_users.use_password_link(token, "a new password here")
        assert portal_users.authenticate("dev@acme.example", "a new password here", "10.0.0.1").id == invited.id
        assert portal_users.password_link_user(token) is None
        with pytest.raises(LookupError):
            portal_users.use_password_link(token, "another password!")
        assert portal_users.authenticate("dev@acme.example", "a new password here", "10.0.0.1").id == invited.id


def test_a_link_expires_after_24_hours(owner):
    with freeze_time(NOW) as clock:
        _, token = portal_users.invite_user(owner.customer_id, email="dev@acme.example", role="viewer",
                                            by_user_id=owner.id)
        clock.tick(timedelta(hours=23, minutes=59))
        assert portal_users.password_link_user(token) is not None
        clock.tick(timedelta(minutes=1))
        assert portal_users.password_link_user(token) is None
        with pytest.raises(LookupError):
            portal_users.use_password_link(token, "a new password here")


def test_a_new_link_replaces_the_previous_one(owner):
    with freeze_time(NOW):
        invited, first = portal_users.invite_user(owner.customer_id, email="dev@acme.example", role="viewer",
                                                  by_user_id=owner.id)
        second = portal_users.new_password_link(owner.customer_id, invited.id, by_user_id=owner.id)
        assert portal_users.password_link_user(first) is None
        assert portal_users.password_link_user(second).id == invited.id


@pytest.mark.parametrize("email, role, message", [("not-an-address", "viewer", "e-mail"),
                                                  (EMAIL, "viewer", "exists already"),
                                                  ("new@acme.example", "root", "role must be")])
def test_an_invitation_is_refused_with_its_reason(owner, email, role, message):
    with pytest.raises(AccountError, match=message):
        portal_users.invite_user(owner.customer_id, email=email, role=role, by_user_id=owner.id)


def test_the_last_enabled_owner_cannot_be_demoted_or_disabled(owner):
    with pytest.raises(portal_users.LastOwner):
        portal_users.change_role(owner.customer_id, owner.id, "admin", by_user_id=owner.id)
    with pytest.raises(portal_users.LastOwner):
        portal_users.set_user_disabled(owner.customer_id, owner.id, True, by_user_id=owner.id)
    stored = PortalUser.get_by_id(owner.id)
    assert stored.role == "owner" and not stored.disabled
    second, _ = portal_users.invite_user(owner.customer_id, email="two@acme.example", role="owner",
                                         by_user_id=owner.id)
    portal_users.change_role(owner.customer_id, owner.id, "viewer", by_user_id=second.id)
    assert PortalUser.get_by_id(owner.id).role == "viewer"
    with pytest.raises(portal_users.LastOwner):
        portal_users.set_user_disabled(owner.customer_id, second.id, True, by_user_id=second.id)


def test_disabling_a_user_ends_their_sessions_and_another_customers_user_is_unknown(owner):
    other = admin.create_customer("Other", "business")
    stranger = admin.create_user(other.id, "x@other.example", PASSWORD)
    with pytest.raises(LookupError):
        portal_users.change_role(owner.customer_id, stranger.id, "viewer", by_user_id=owner.id)
    invited, _ = portal_users.invite_user(owner.customer_id, email="dev@acme.example", role="developer",
                                          by_user_id=owner.id)
    token = portal_users.start_session(invited)
    _, ended = portal_users.set_user_disabled(owner.customer_id, invited.id, True, by_user_id=owner.id)
    assert ended == 1 and portal_users.session_user(token) is None
    portal_users.set_user_disabled(owner.customer_id, invited.id, False, by_user_id=owner.id)
    assert not PortalUser.get_by_id(invited.id).disabled
