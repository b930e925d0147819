"""scim: the rules of SCIM provisioning (D32) without HTTP: the token, the filter and paging, roles,
the last owner, and a deactivation that ends sessions."""
from __future__ import annotations

import pytest

from app.models import PortalSession, PortalUser
from app.services.accounts import accounts, portal_users, scim
from app.services.accounts.scim import ScimError

PASSWORD = "correct horse battery"


@pytest.fixture
def customer(conn):
    found = accounts.create_customer("Acme", "enterprise")
    accounts.create_user(found.id, "ops@acme.example", PASSWORD)
    return found


def test_a_token_authenticates_its_customer_only_until_replaced(customer):
    token = scim.issue_token(customer.id)
    assert scim.authenticate(f"Bearer {token}") == customer.id
    assert scim.authenticate(f"bearer   {token}") == customer.id
    newer = scim.issue_token(customer.id)
    for header in (f"Bearer {token}", None, "", token, f"Bearer {newer[:-1]}", f"Bearer {newer}x"):
        with pytest.raises(ScimError) as refused:
            scim.authenticate(header)
        assert refused.value.status == 401
    assert scim.revoke_token(customer.id)
    with pytest.raises(ScimError):
        scim.authenticate(f"Bearer {newer}")


@pytest.mark.parametrize(("text", "email"), [
    (None, None), ("", None), ('userName eq "Jane@Acme.example"', "jane@acme.example"),
    ('USERNAME EQ "a\\"b@acme.example"', 'a"b@acme.example')])
def test_the_filter_served_is_username_eq(text, email):
    assert scim.parse_filter(text) == email


@pytest.mark.parametrize("text", ['userName co "x"', 'emails eq "x"', 'userName eq "a" or userName eq "b"', 5])
def test_other_filters_are_refused_as_invalid(text):
    with pytest.raises(ScimError) as refused:
        scim.parse_filter(text)
    assert refused.value.scim_type == "invalidFilter"


def test_paging_follows_rfc_7644(customer):
    for n in range(3):
        scim.create(customer.id, {"userName": f"u{n}@acme.example"})
    assert scim.list_users(customer.id, start_index="0", count="-5")[:2] == (4, 1)
    total, start, rows = scim.list_users(customer.id, start_index="4", count="10")
    assert (total, start, [u.email for u in rows]) == (4, 4, ["u2@acme.example"])
    assert scim.list_users(customer.id, count="0")[2] == []
    with pytest.raises(ScimError):
        scim.list_users(customer.id, count="many")


def test_the_most_powerful_role_given_wins_and_unknown_roles_are_refused(customer):
    user = scim.create(customer.id, {"userName": "a@acme.example", "roles": ["viewer", {"value": "admin"}]})
    assert user.role == "admin"
    assert scim.create(customer.id, {"userName": "b@acme.example"}).role == "viewer"
    with pytest.raises(ScimError):
        scim.create(customer.id, {"userName": "c@acme.example", "roles": [{"value": "root"}]})
    assert PortalUser.get_or_none(PortalUser.email == "c@acme.example") is None


def test_deactivation_ends_sessions_and_the_last_owner_stays(customer):
    user = scim.create(customer.id, {"userName": "a@acme.example", "roles": [{"value": "owner"}]})
    portal_users.start_session(user)
    patch = {"schemas": [scim.PATCH_SCHEMA], "Operations": [{"op": "replace", "path": "active", "value": "False"}]}
    assert scim.patch(customer.id, user.id, patch).disabled
    assert PortalSession.select().where(PortalSession.user == user.id).count() == 0
    owner = portal_users.get_user("ops@acme.example")
    with pytest.raises(ScimError) as refused:
        scim.replace(customer.id, owner.id, {"userName": owner.email, "roles": [{"value": "viewer"}]})
    assert refused.value.scim_type == "mutability"
    assert portal_users.get_user("ops@acme.example").role == "owner"  # rolled back
    with pytest.raises(ScimError):
        scim.delete(customer.id, owner.id)
    assert PortalUser.get_or_none(PortalUser.id == owner.id) is not None


def test_patch_operations(customer):
    user = scim.create(customer.id, {"userName": "a@acme.example", "roles": [{"value": "admin"}]})
    op = {"schemas": [scim.PATCH_SCHEMA]}
    assert scim.patch(customer.id, user.id, {**op, "Operations": [{"op": "remove", "path": "roles"}]}).role == "viewer"
    renamed = scim.patch(customer.id, user.id, {**op, "Operations": [
        {"op": "Replace", "value": {"userName": "b@acme.example", "displayName": "ignored"}}]})
    assert renamed.email == "b@acme.example"
    for bad in ([{"op": "move", "path": "active", "value": True}], [{"op": "replace", "path": "password", "value": "x"}],
                [{"op": "remove", "path": "active"}], ["not an object"]):
        with pytest.raises(ScimError):
            scim.patch(customer.id, user.id, {**op, "Operations": bad})
    with pytest.raises(ScimError):
        scim.patch(customer.id, user.id, {"Operations": [{"op": "remove", "path": "roles"}]})  # no PatchOp schema
