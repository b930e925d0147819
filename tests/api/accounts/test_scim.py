"""SCIM 2.0 at /scim/v2/ (D32; RFC 7643/7644): a customer's identity provider provisions its portal
users with the customer's bearer token; every answer application/scim+json, errors in SCIM's schema."""
from __future__ import annotations

import pytest

from app.extensions import db
from app.models import Customer, PortalSession, PortalUser
from app.services.accounts import accounts, portal_users, scim
from app.services.shared.crypto import digest
from tests.portal.helpers import PASSWORD

USER = scim.USER_SCHEMA
PATCH = scim.PATCH_SCHEMA


@pytest.fixture
def idp(app, account):
    """The customer's owner ops@acme.example and its SCIM token: ``.headers``, ``.customer_id``."""
    with db.connection_context():
        accounts.create_user(account.id, "ops@acme.example", PASSWORD)
        token = scim.issue_token(account.id)
    account.token = token
    account.scim_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/scim+json"}
    return account


def call(client, method, path, idp, json=None, headers=None):
    return client.open(f"/scim/v2{path}", method=method, json=json,
                       headers=idp.scim_headers if headers is None else headers)


def make(client, idp, user_name="jane@acme.example", **extra):
    answer = call(client, "POST", "/Users", idp, json={"schemas": [USER], "userName": user_name, **extra})
    assert answer.status_code == 201, answer.get_data(as_text=True)
    return answer.get_json()


def assert_scim_error(answer, status, scim_type=None):
    assert answer.status_code == status
    assert answer.mimetype == "application/scim+json"
    body = answer.get_json()
    assert body["schemas"] == [scim.ERROR_SCHEMA] and body["status"] == str(status) and body["detail"]
    if scim_type:
        assert body["scimType"] == scim_type


def test_the_token_is_shown_once_with_its_prefix_and_kept_as_a_digest(idp):
    assert idp.token.startswith("scim_") and len(idp.token) >= 45
    with db.connection_context():
        stored = Customer.get_by_id(idp.id).scim_token_digest
    assert stored == digest(idp.token) and idp.token not in stored


@pytest.mark.parametrize("authorization", [None, "Bearer scim_wrong", "Basic abc", "Bearer service_live_x"])
def test_without_the_token_every_call_is_401_in_scims_error_schema(client, idp, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    for method, path in (("GET", "/Users"), ("POST", "/Users"), ("GET", "/ServiceProviderConfig")):
        answer = call(client, method, path, idp, json={}, headers=headers)
        assert_scim_error(answer, 401)
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_new_token_stops_the_old_one(client, idp):
    with db.connection_context():
        scim.issue_token(idp.id)
    assert_scim_error(call(client, "GET", "/Users", idp), 401)


def test_create_read_and_the_user_is_marked_provisioned(client, idp):
    made = make(client, idp, "Jane@Acme.example", roles=[{"value": "developer", "primary": True}])
    assert made["schemas"] == [USER] and made["userName"] == "jane@acme.example" and made["active"] is True
    assert made["roles"] == [{"value": "developer", "primary": True}] and made["id"].startswith("usr_")
    assert made["meta"]["location"].endswith(f"/scim/v2/Users/{made['id']}")
    read = call(client, "GET", f"/Users/{made['id']}", idp)
    assert read.status_code == 200 and read.mimetype == "application/scim+json" and read.get_json() == made
    with db.connection_context():
        user = PortalUser.get_by_id(made["id"])
    assert (user.customer_id, user.role, user.provisioned_by) == (idp.id, "developer", "scim")
    assert user.password_hash == portal_users.NO_PASSWORD
    assert_scim_error(call(client, "POST", "/Users", idp, json={"userName": "JANE@acme.example"}), 409, "uniqueness")


def test_list_filters_on_username_and_pages(client, idp):
    for n in range(3):
        make(client, idp, f"user{n}@acme.example")
    listed = call(client, "GET", "/Users?startIndex=2&count=2", idp).get_json()
    assert listed["schemas"] == [scim.LIST_SCHEMA] and listed["totalResults"] == 4
    assert listed["startIndex"] == 2 and listed["itemsPerPage"] == 2
    assert [r["userName"] for r in listed["Resources"]] == ["user0@acme.example", "user1@acme.example"]
    found = call(client, "GET", '/Users?filter=userName eq "USER2@acme.example"', idp).get_json()
    assert found["totalResults"] == 1 and found["Resources"][0]["userName"] == "user2@acme.example"
    none = call(client, "GET", '/Users?filter=userName eq "nobody@acme.example"', idp).get_json()
    assert none["totalResults"] == 0 and none["Resources"] == []
    assert_scim_error(call(client, "GET", '/Users?filter=emails co "x"', idp), 400, "invalidFilter")


def test_replace_and_patch_change_the_role_and_the_name(client, idp):
    made = make(client, idp)
    replaced = call(client, "PUT", f"/Users/{made['id']}", idp,
                    json={"schemas": [USER], "userName": "jane.doe@acme.example", "roles": [{"value": "admin"}],
                          "active": True}).get_json()
    assert replaced["userName"] == "jane.doe@acme.example" and replaced["roles"][0]["value"] == "admin"
    patched = call(client, "PATCH", f"/Users/{made['id']}", idp, json={
        "schemas": [PATCH], "Operations": [{"op": "replace", "path": "roles", "value": [{"value": "viewer"}]}]})
    assert patched.status_code == 200 and patched.get_json()["roles"][0]["value"] == "viewer"
    assert_scim_error(call(client, "PATCH", f"/Users/{made['id']}", idp, json={
        "schemas": [PATCH], "Operations": [{"op": "replace", "path": "roles", "value": [{"value": "root"}]}]}),
        400, "invalidValue")
    assert_scim_error(call(client, "PATCH", f"/Users/{made['id']}", idp, json={"Operations": []}), 400)


def test_deactivation_ends_the_users_sessions_at_once(client, idp, app):
    made = make(client, idp, roles=[{"value": "developer"}])
    with db.connection_context():
        token = portal_users.start_session(PortalUser.get_by_id(made["id"]))
    browser = app.test_client()
    with browser.session_transaction() as session:
        session["sid"] = token
    assert browser.get("/app/api-keys").status_code == 200
    answer = call(client, "PATCH", f"/Users/{made['id']}", idp, json={
        "schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]})
    assert answer.status_code == 200 and answer.get_json()["active"] is False
    with db.connection_context():
        assert PortalSession.select().where(PortalSession.user == made["id"]).count() == 0
    assert browser.get("/app/api-keys").status_code == 302  # back to the login page
    again = call(client, "PATCH", f"/Users/{made['id']}", idp, json={
        "schemas": [PATCH], "Operations": [{"op": "replace", "path": "active", "value": True}]})
    assert again.get_json()["active"] is True


def test_delete_and_the_last_owner_is_kept(client, idp):
    made = make(client, idp)
    assert call(client, "DELETE", f"/Users/{made['id']}", idp).status_code == 204
    assert_scim_error(call(client, "GET", f"/Users/{made['id']}", idp), 404)
    with db.connection_context():
        owner = PortalUser.get(PortalUser.email == "ops@acme.example")
    assert_scim_error(call(client, "DELETE", f"/Users/{owner.id}", idp), 400, "mutability")
    assert_scim_error(call(client, "PATCH", f"/Users/{owner.id}", idp, json={
        "schemas": [PATCH], "Operations": [{"op": "replace", "path": "active", "value": False}]}), 400, "mutability")
    with db.connection_context():
        assert not PortalUser.get_by_id(owner.id).disabled


def test_another_customers_users_are_unknown(client, idp, make_customer):
    other = make_customer()
    with db.connection_context():
        stranger = accounts.create_user(other.id, "x@other.example", PASSWORD)
    assert_scim_error(call(client, "GET", f"/Users/{stranger.id}", idp), 404)
    assert_scim_error(call(client, "DELETE", f"/Users/{stranger.id}", idp), 404)
    listed = call(client, "GET", "/Users", idp).get_json()
    assert "x@other.example" not in [r["userName"] for r in listed["Resources"]]


def test_bad_bodies_are_400_in_scims_error_schema(client, idp):
    assert_scim_error(client.post("/scim/v2/Users", data="{not json", headers=idp.scim_headers), 400, "invalidSyntax")
    assert_scim_error(call(client, "POST", "/Users", idp, json={"userName": "not an email"}), 400, "invalidValue")
    assert_scim_error(call(client, "POST", "/Users", idp, json={"userName": "a@b.example", "active": "maybe"}), 400)


def test_the_discovery_endpoints(client, idp):
    config = call(client, "GET", "/ServiceProviderConfig", idp).get_json()
    assert config["patch"]["supported"] is True and config["filter"]["supported"] is True
    assert config["authenticationSchemes"][0]["type"] == "oauthbearertoken"
    types = call(client, "GET", "/ResourceTypes", idp).get_json()
    assert types["Resources"][0]["endpoint"] == "/Users" and types["Resources"][0]["schema"] == USER
    schemas = call(client, "GET", "/Schemas", idp).get_json()
    assert schemas["Resources"][0]["id"] == USER
    names = {a["name"] for a in schemas["Resources"][0]["attributes"]}
    assert {"userName", "active", "roles"} <= names
    assert call(client, "GET", f"/Schemas/{USER}", idp).get_json()["id"] == USER
