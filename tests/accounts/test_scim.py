"""scim: the customer's token, what a SCIM User is here, PATCH and filters (D32)."""
import threading

import pytest

from app.accounts import admin, portal_users, scim
from app.accounts.models import Customer, PortalUser
from app.plumbing.crypto import digest
from app.plumbing.errors import Conflict, Forbidden, InvalidRequest, NotAuthenticated, NotFound

BASE = "https://scan.example/scim/v2"


@pytest.fixture
def customer(conn):
    return admin.create_customer("Acme", "business")


def make(customer_id, user_name="ada@acme.example", **attributes):
    return scim.create_user(customer_id, {"schemas": [scim.USER_SCHEMA], "userName": user_name, **attributes}, BASE)


def patch(customer_id, user_id, *operations):
    return scim.patch_user(customer_id, user_id, {"schemas": [scim.PATCH_SCHEMA], "Operations": list(operations)},
                           BASE)


def test_a_token_authenticates_its_customer_only_while_it_is_the_latest(customer):
    first = scim.issue_token(customer.id)
    assert scim.authenticate(first) == customer.id
    second = scim.issue_token(customer.id)
    assert scim.authenticate(second) == customer.id
    with pytest.raises(NotAuthenticated):
        scim.authenticate(first)
    assert Customer.get_by_id(customer.id).scim_token_digest == digest(second)
    scim.revoke_token(customer.id)
    with pytest.raises(NotAuthenticated):
        scim.authenticate(second)
    assert scim.token_status(Customer.get_by_id(customer.id)) == {"token_set": False, "token_set_at": None}


@pytest.mark.parametrize("token", [None, "", "scim_", "scim_" + "x" * 300, "service_live_abc"])
def test_what_cannot_be_a_token_is_refused_without_a_look_up(customer, token):
    with pytest.raises(NotAuthenticated):
        scim.authenticate(token)


def test_the_token_status_shows_when_but_never_the_token(customer):
    token = scim.issue_token(customer.id)
    status = scim.token_status(Customer.get_by_id(customer.id))
    assert status["token_set"] is True and status["token_set_at"].endswith("Z") and token not in str(status)


@pytest.mark.parametrize("roles, role", [
    (None, "viewer"), ([], "viewer"), ([{"value": "developer"}], "developer"), ("Admin", "admin"),
    ([{"value": "viewer"}, {"value": "admin"}, "developer"], "admin")])
def test_the_role_is_the_most_powerful_of_the_roles_given(customer, roles, role):
    body = make(customer.id, roles=roles) if roles is not None else make(customer.id)
    assert body["roles"] == [{"value": role}]


@pytest.mark.parametrize("text, match", [
    ('userName eq "Ada@Acme.example"', ("userName", "ada@acme.example")),
    ('USERNAME EQ "a\\"b@c.example"', ("userName", 'a"b@c.example')),
    (f'{scim.USER_SCHEMA}:userName eq "x@y.example"', ("userName", "x@y.example")),
    ('externalId eq "Okta-1"', ("externalId", "Okta-1")),
    ('id eq "usr_1"', ("id", "usr_1"))])
def test_a_filter_is_an_equality_on_user_name_external_id_or_id(text, match):
    assert scim.parse_filter(text) == match


@pytest.mark.parametrize("text", ['userName sw "a"', 'userName eq "a" and active eq true', "active eq true",
                                  'userName eq a', 'title eq "x"'])
def test_other_filters_are_invalid_filter(text):
    with pytest.raises(InvalidRequest) as refused:
        scim.parse_filter(text)
    assert refused.value.code == "invalidFilter"


def test_a_user_name_taken_by_another_customers_user_is_a_conflict(customer):
    other = admin.create_customer("Other", "pro")
    admin.create_user(other.id, "eve@other.example", "long enough password")
    with pytest.raises(Conflict) as refused:
        make(customer.id, "EVE@other.example")
    assert refused.value.code == "uniqueness"
    assert PortalUser.select().where(PortalUser.customer == customer.id).count() == 0


def test_two_creations_of_one_name_for_two_customers_at_once_make_one_user(app, customer):
    other = admin.create_customer("Other", "pro")
    outcomes = []
    barrier = threading.Barrier(2)

    def create(customer_id):
        from app.extensions import db
        with db.connection_context():
            barrier.wait()
            try:
                outcomes.append(make(customer_id, "same@acme.example")["id"])
            except Conflict:
                outcomes.append("conflict")

    threads = [threading.Thread(target=create, args=(c,)) for c in (customer.id, other.id)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o == "conflict" for o in outcomes) == [False, True]
    assert PortalUser.select().where(PortalUser.email == "same@acme.example").count() == 1


def test_patch_operations_apply_in_order_all_or_none(customer):
    user = make(customer.id, roles=[{"value": "developer"}])
    with pytest.raises(InvalidRequest):
        patch(customer.id, user["id"], {"op": "replace", "path": "roles", "value": "admin"},
              {"op": "replace", "path": "userName", "value": "no-at-sign"})
    assert PortalUser.get_by_id(user["id"]).role == "developer"
    body = patch(customer.id, user["id"], {"op": "replace", "path": "roles", "value": "admin"},
                 {"op": "replace", "path": "roles", "value": [{"value": "viewer"}]},
                 {"op": "add", "path": f"{scim.USER_SCHEMA}:externalId", "value": "e-1"})
    assert body["roles"][0]["value"] == "viewer" and body["externalId"] == "e-1"


def test_remove_active_makes_the_user_active_again(customer):
    user = make(customer.id, active=False)
    assert PortalUser.get_by_id(user["id"]).disabled is True
    assert patch(customer.id, user["id"], {"op": "remove", "path": "active"})["active"] is True


def test_deactivation_ends_sessions_and_a_change_of_role_keeps_them(customer):
    user = make(customer.id)
    token = portal_users.start_session(PortalUser.get_by_id(user["id"]))
    patch(customer.id, user["id"], {"op": "replace", "path": "roles", "value": "admin"})
    assert portal_users.session_user(token) is not None
    patch(customer.id, user["id"], {"op": "replace", "path": "active", "value": False})
    assert portal_users.session_user(token) is None


def test_an_owner_is_read_but_not_changed(customer):
    owner = admin.create_user(customer.id, "owner@acme.example", "long enough password")
    assert scim.get_user(customer.id, owner.id, BASE)["roles"][0]["value"] == "owner"
    with pytest.raises(Forbidden):
        patch(customer.id, owner.id, {"op": "replace", "path": "roles", "value": "viewer"})
    with pytest.raises(Forbidden):
        scim.delete_user(customer.id, owner.id)


def test_a_user_made_in_the_portal_may_be_managed_and_keeps_its_mark(customer):
    invited, _ = portal_users.invite_user(customer.id, email="bo@acme.example", role="developer", by_user_id="x")
    patch(customer.id, invited.id, {"op": "replace", "path": "active", "value": False})
    user = PortalUser.get_by_id(invited.id)
    assert user.disabled is True and user.provisioned_by is None


def test_another_customers_user_is_not_found(customer):
    other = admin.create_customer("Other", "pro")
    theirs = admin.create_user(other.id, "eve@other.example", "long enough password", role="viewer")
    for action in (lambda: scim.get_user(customer.id, theirs.id, BASE), lambda: scim.delete_user(customer.id, theirs.id),
                   lambda: patch(customer.id, theirs.id, {"op": "replace", "path": "active", "value": False})):
        with pytest.raises(NotFound):
            action()
    assert PortalUser.get_by_id(theirs.id).disabled is False


def test_a_page_counts_all_matches_and_holds_at_most_max_results(customer, monkeypatch):
    monkeypatch.setattr(scim, "MAX_RESULTS", 2)
    for i in range(3):
        make(customer.id, f"u{i}@acme.example")
    page = scim.list_users(customer.id, BASE, count="50")
    assert (page["totalResults"], page["itemsPerPage"]) == (3, 2)
    assert scim.list_users(customer.id, BASE, start_index="3")["Resources"][0]["userName"] == "u2@acme.example"
    assert scim.list_users(customer.id, BASE, start_index="9")["Resources"] == []
