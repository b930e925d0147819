"""SCIM 2.0 at /scim/v2/ (D32): a customer's identity provider provisions its portal users."""
import json
import logging

import pytest

from app.accounts import admin, portal_users, scim
from app.accounts.models import Customer, PortalSession, PortalUser
from app.extensions import db
from app.plumbing.crypto import digest

USER = scim.USER_SCHEMA
PATCH = scim.PATCH_SCHEMA
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
SCIM_JSON = "application/scim+json"


@pytest.fixture
def idp(app, account):
    """The customer's identity provider: a client with the customer's SCIM token."""
    with db.connection_context():
        token = scim.issue_token(account.id)
    return Idp(app.test_client(), token, account)


class Idp:
    def __init__(self, client, token, account):
        self.client, self.token, self.account = client, token, account

    def call(self, method, path, body=None, token=None, headers=(), **kw):
        headers = {"Authorization": f"Bearer {token or self.token}", **dict(headers)}
        if body is not None:
            kw["data"], kw["content_type"] = json.dumps(body), SCIM_JSON
        return self.client.open(f"/scim/v2{path}", method=method, headers=headers, **kw)

    def create(self, user_name="ada@acme.example", **attributes):
        answer = self.call("POST", "/Users", {"schemas": [USER], "userName": user_name, **attributes})
        assert answer.status_code == 201, answer.get_json(force=True)
        return answer.get_json(force=True)


def scim_json(answer) -> dict:
    assert answer.headers["Content-Type"].startswith(SCIM_JSON)
    return json.loads(answer.data)


def assert_error(answer, status: int, scim_type: str | None = None) -> dict:
    body = scim_json(answer)
    assert answer.status_code == status
    assert body["schemas"] == [ERROR] and body["status"] == str(status) and body["detail"]
    assert body.get("scimType") == scim_type
    return body


def row(user_id) -> PortalUser:
    with db.connection_context():
        return PortalUser.get_by_id(user_id)


def start_session(user_id) -> str:
    with db.connection_context():
        return portal_users.start_session(PortalUser.get_by_id(user_id))


def live(token) -> bool:
    with db.connection_context():
        return portal_users.session_user(token) is not None


# --- the token ----------------------------------------------------------------------------------

def test_the_token_is_kept_only_as_its_digest_and_a_new_one_replaces_the_old(idp):
    assert idp.token.startswith("scim_") and len(idp.token) > 40
    with db.connection_context():
        customer = Customer.get_by_id(idp.account.id)
        assert customer.scim_token_digest == digest(idp.token) and customer.scim_token_set_at is not None
        newer = scim.issue_token(idp.account.id)
    assert idp.call("GET", "/Users").status_code == 401
    assert idp.call("GET", "/Users", token=newer).status_code == 200


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer scim_wrong", "Bearer service_live_x", "Basic eDp5"])
def test_a_missing_or_wrong_token_is_401_in_scims_error_schema(idp, header):
    headers = {"Authorization": header} if header else {}
    for path in ("/Users", "/ServiceProviderConfig", "/Schemas", "/ResourceTypes", "/Users/usr_x"):
        answer = idp.client.get(f"/scim/v2{path}", headers=headers)
        assert_error(answer, 401)
        assert "scim_" not in answer.get_data(as_text=True).replace("SCIM token", "")


def test_a_revoked_token_is_refused(idp):
    with db.connection_context():
        assert scim.revoke_token(idp.account.id) is True
        assert scim.revoke_token(idp.account.id) is False
    assert_error(idp.call("GET", "/Users"), 401)


def test_an_api_key_is_not_a_scim_token_nor_a_scim_token_an_api_key(idp):
    assert_error(idp.call("GET", "/Users", token=idp.account.api_key), 401)
    answer = idp.client.get("/api/v1/account", headers={"Authorization": f"Bearer {idp.token}"})
    assert answer.status_code == 401 and answer.get_json()["ok"] is False


def test_the_token_never_reaches_the_log_nor_a_request_id(idp, caplog):
    with caplog.at_level(logging.INFO):
        answer = idp.call("GET", "/Users", headers={"X-Request-Id": idp.token})
        with db.connection_context():
            newer = scim.issue_token(idp.account.id)
        logging.getLogger("app.test").info("leaked %s", newer)
    assert answer.headers["X-Request-Id"] != idp.token and answer.headers["X-Request-Id"].startswith("req_")
    from app.plumbing.logging_setup import RedactFilter
    redact = RedactFilter()
    for record in caplog.records:
        redact.filter(record)
        assert idp.token not in record.getMessage() and newer not in record.getMessage()


# --- Users ----------------------------------------------------------------------------------------

def test_create_makes_a_portal_user_marked_as_provisioned_by_scim(idp):
    body = idp.create("Ada@Acme.example", roles=[{"value": "developer"}], externalId="okta-1",
                      name={"givenName": "Ada"})
    assert body["schemas"] == [USER] and body["userName"] == "ada@acme.example" and body["active"] is True
    assert body["roles"] == [{"value": "developer"}] and body["externalId"] == "okta-1"
    assert body["emails"][0]["value"] == "ada@acme.example"
    assert body["meta"]["resourceType"] == "User"
    assert body["meta"]["location"].endswith(f"/scim/v2/Users/{body['id']}")
    user = row(body["id"])
    assert (user.customer_id, user.role, user.provisioned_by, user.disabled) == (
        idp.account.id, "developer", "scim", False)
    assert user.password_hash == portal_users.NO_PASSWORD  # signs in by SSO or a set-password link


def test_create_answers_201_with_location_and_scim_json(idp, app):
    app.config["PUBLIC_BASE_URL"] = "https://scan.example"
    answer = idp.call("POST", "/Users", {"schemas": [USER], "userName": "bo@acme.example"},
                      headers={"Host": "attacker.example"})
    body = scim_json(answer)
    assert answer.status_code == 201 and answer.headers["Location"] == body["meta"]["location"]
    assert body["meta"]["location"] == f"https://scan.example/scim/v2/Users/{body['id']}"
    assert body["roles"] == [{"value": "viewer"}]  # no role given: the least
    assert answer.headers["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in answer.headers  # no portal session opened for a bearer-token protocol


def test_a_taken_user_name_is_409_uniqueness_also_another_customers(idp, make_customer):
    idp.create("ada@acme.example")
    assert_error(idp.call("POST", "/Users", {"schemas": [USER], "userName": "ADA@acme.example"}), 409, "uniqueness")
    other = make_customer()
    with db.connection_context():
        admin.create_user(other.id, "eve@other.example", "long enough password")
    body = assert_error(idp.call("POST", "/Users", {"schemas": [USER], "userName": "eve@other.example"}),
                        409, "uniqueness")
    assert other.id not in body["detail"]


@pytest.mark.parametrize("body, scim_type", [
    ({"schemas": [USER]}, "invalidValue"),
    ({"schemas": [USER], "userName": "not an e-mail"}, "invalidValue"),
    ({"schemas": [USER], "userName": "a@b.example", "roles": [{"value": "owner"}]}, "invalidValue"),
    ({"schemas": [USER], "userName": "a@b.example", "roles": [{"value": "root"}]}, "invalidValue"),
    ({"schemas": [USER], "userName": "a@b.example", "active": "maybe"}, "invalidValue"),
    ({"schemas": ["urn:other"], "userName": "a@b.example"}, "invalidSyntax"),
    ([1, 2], "invalidSyntax"),
])
def test_an_invalid_user_is_400_with_its_scim_type_and_nothing_is_made(idp, body, scim_type):
    assert_error(idp.call("POST", "/Users", body), 400, scim_type)
    with db.connection_context():
        assert PortalUser.select().count() == 0


def test_a_body_that_is_not_json_is_400_invalid_syntax(idp):
    answer = idp.client.post("/scim/v2/Users", data="{nope", content_type=SCIM_JSON,
                             headers={"Authorization": f"Bearer {idp.token}"})
    assert_error(answer, 400, "invalidSyntax")
    answer = idp.client.post("/scim/v2/Users", data="x", content_type="text/plain",
                             headers={"Authorization": f"Bearer {idp.token}"})
    assert_error(answer, 415)


def test_read_and_another_customers_user_is_404(idp, make_customer):
    created = idp.create()
    answer = idp.call("GET", f"/Users/{created['id']}")
    assert answer.status_code == 200 and scim_json(answer) == created
    other = make_customer()
    with db.connection_context():
        theirs = admin.create_user(other.id, "eve@other.example", "long enough password", role="viewer")
        other_token = scim.issue_token(other.id)
    for method, body in (("GET", None), ("PUT", {"schemas": [USER], "userName": "x@y.example"}),
                         ("PATCH", {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "active",
                                                                        "value": False}]}),
                         ("DELETE", None)):
        assert_error(idp.call(method, f"/Users/{theirs.id}", body), 404)
    assert row(theirs.id).disabled is False and row(theirs.id).email == "eve@other.example"
    assert_error(idp.call("GET", "/Users/usr_unknown"), 404)
    assert idp.call("GET", f"/Users/{created['id']}", token=other_token).status_code == 404


def test_list_filters_on_user_name_and_pages_with_start_index_and_count(idp, make_customer):
    made = [idp.create(f"u{i}@acme.example") for i in range(5)]
    other = make_customer()
    with db.connection_context():
        admin.create_user(other.id, "eve@other.example", "long enough password")
    body = scim_json(idp.call("GET", "/Users"))
    assert body["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:ListResponse"]
    assert body["totalResults"] == 5 and [u["id"] for u in body["Resources"]] == [u["id"] for u in made]
    page = scim_json(idp.call("GET", "/Users?startIndex=2&count=2"))
    assert (page["totalResults"], page["startIndex"], page["itemsPerPage"]) == (5, 2, 2)
    assert [u["id"] for u in page["Resources"]] == [made[1]["id"], made[2]["id"]]
    assert scim_json(idp.call("GET", "/Users?count=0"))["Resources"] == []
    assert scim_json(idp.call("GET", "/Users?startIndex=0&count=1"))["Resources"][0]["id"] == made[0]["id"]
    found = scim_json(idp.call("GET", '/Users?filter=userName eq "U3@acme.example"'))
    assert found["totalResults"] == 1 and found["Resources"][0]["id"] == made[3]["id"]
    assert scim_json(idp.call("GET", '/Users?filter=userName eq "eve@other.example"'))["totalResults"] == 0
    assert scim_json(idp.call("GET", '/Users?filter=userName eq "nobody@acme.example"'))["Resources"] == []


@pytest.mark.parametrize("query, scim_type", [
    ('filter=userName co "a"', "invalidFilter"), ("filter=nonsense", "invalidFilter"),
    ("count=many", "invalidValue"), ("startIndex=x", "invalidValue")])
def test_an_unsupported_filter_or_bad_paging_is_400(idp, query, scim_type):
    assert_error(idp.call("GET", f"/Users?{query}"), 400, scim_type)


def test_put_replaces_the_user_and_what_it_leaves_out_goes_to_the_default(idp):
    created = idp.create(roles=[{"value": "admin"}], externalId="x-1")
    answer = idp.call("PUT", f"/Users/{created['id']}", {"schemas": [USER], "userName": "ada.l@acme.example"})
    body = scim_json(answer)
    assert answer.status_code == 200 and body["userName"] == "ada.l@acme.example"
    assert body["roles"][0]["value"] == "viewer" and "externalId" not in body
    assert row(created["id"]).email == "ada.l@acme.example"


def test_put_to_a_taken_user_name_is_409_and_changes_nothing(idp):
    first, second = idp.create("a@acme.example"), idp.create("b@acme.example", roles=[{"value": "admin"}])
    assert_error(idp.call("PUT", f"/Users/{second['id']}", {"schemas": [USER], "userName": "a@acme.example"}),
                 409, "uniqueness")
    assert (row(second["id"]).email, row(second["id"]).role) == ("b@acme.example", "admin")
    assert row(first["id"]).email == "a@acme.example"


def test_patch_replace_add_and_remove_change_role_and_external_id(idp):
    created = idp.create()
    path = f"/Users/{created['id']}"
    body = scim_json(idp.call("PATCH", path, {"schemas": [PATCH], "Operations": [
        {"op": "replace", "path": "roles", "value": [{"value": "admin"}]},
        {"op": "add", "path": "externalId", "value": "azure-7"}]}))
    assert body["roles"][0]["value"] == "admin" and body["externalId"] == "azure-7"
    # Azure's shapes: capitalised op, a filtered role path, a value object without a path
    body = scim_json(idp.call("PATCH", path, {"schemas": [PATCH], "Operations": [
        {"op": "Replace", "path": 'roles[primary eq "True"].value', "value": "developer"},
        {"op": "replace", "value": {"userName": "ada2@acme.example", "displayName": "ignored"}}]}))
    assert body["roles"][0]["value"] == "developer" and body["userName"] == "ada2@acme.example"
    body = scim_json(idp.call("PATCH", path, {"schemas": [PATCH], "Operations": [
        {"op": "remove", "path": "roles"}, {"op": "remove", "path": "externalId"}]}))
    assert body["roles"][0]["value"] == "viewer" and "externalId" not in body
    assert (row(created["id"]).role, row(created["id"]).scim_external_id) == ("viewer", None)


@pytest.mark.parametrize("operations, scim_type", [
    ([{"op": "remove"}], "noTarget"),
    ([{"op": "move", "path": "active", "value": True}], "invalidSyntax"),
    ([{"op": "replace", "path": "", "value": "x"}], "invalidPath"),
    ([{"op": "replace", "path": "id", "value": "usr_mine"}], "mutability"),
    ([{"op": "remove", "path": "userName"}], "mutability"),
    ([{"op": "replace", "path": "roles", "value": [{"value": "owner"}]}], "invalidValue"),
    ([{"op": "replace", "path": "roles", "value": "admin"}, {"op": "replace", "path": "active", "value": 3}],
     "invalidValue"),
    ([], "invalidSyntax"),
])
def test_an_invalid_patch_is_400_and_changes_nothing_of_the_user(idp, operations, scim_type):
    created = idp.create()
    assert_error(idp.call("PATCH", f"/Users/{created['id']}", {"schemas": [PATCH], "Operations": operations}),
                 400, scim_type)
    assert (row(created["id"]).role, row(created["id"]).disabled) == ("viewer", False)


def test_a_patch_path_to_an_attribute_not_kept_is_ignored_as_in_a_body(idp):
    created = idp.create()
    answer = idp.call("PATCH", f"/Users/{created['id']}", {"schemas": [PATCH], "Operations": [
        {"op": "replace", "path": "name.givenName", "value": "Ada"},
        {"op": "replace", "path": 'emails[type eq "work"].value', "value": "other@acme.example"},
        {"op": "replace", "path": "active", "value": False}]})
    body = scim_json(answer)
    assert answer.status_code == 200 and body["active"] is False and body["userName"] == created["userName"]
    assert "name" not in body


def test_a_patch_without_its_schema_is_400(idp):
    created = idp.create()
    assert_error(idp.call("PATCH", f"/Users/{created['id']}", {"Operations": [{"op": "replace", "path": "active",
                                                                               "value": False}]}),
                 400, "invalidSyntax")


@pytest.mark.parametrize("deactivate", [
    lambda idp, user: idp.call("PATCH", f"/Users/{user['id']}", {"schemas": [PATCH], "Operations": [
        {"op": "replace", "path": "active", "value": False}]}),
    lambda idp, user: idp.call("PATCH", f"/Users/{user['id']}", {"schemas": [PATCH], "Operations": [
        {"op": "Replace", "path": "active", "value": "False"}]}),  # Azure's string boolean
    lambda idp, user: idp.call("PATCH", f"/Users/{user['id']}", {"schemas": [PATCH], "Operations": [
        {"op": "replace", "value": {"active": False}}]}),  # Okta's shape
    lambda idp, user: idp.call("PUT", f"/Users/{user['id']}", {"schemas": [USER], "userName": user["userName"],
                                                               "active": False}),
], ids=["patch", "patch-string", "patch-no-path", "put"])
def test_deactivation_ends_the_users_sessions_at_once(idp, deactivate):
    created = idp.create()
    session = start_session(created["id"])
    assert live(session)
    answer = deactivate(idp, created)
    assert answer.status_code == 200 and scim_json(answer)["active"] is False
    assert not live(session) and row(created["id"]).disabled is True
    with db.connection_context():
        assert PortalSession.select().where(PortalSession.user == created["id"]).count() == 0
    reactivated = idp.call("PATCH", f"/Users/{created['id']}", {"schemas": [PATCH], "Operations": [
        {"op": "replace", "path": "active", "value": True}]})
    assert scim_json(reactivated)["active"] is True and row(created["id"]).disabled is False


def test_delete_removes_the_user_and_ends_its_sessions(idp):
    created = idp.create()
    session = start_session(created["id"])
    answer = idp.call("DELETE", f"/Users/{created['id']}")
    assert answer.status_code == 204 and answer.data == b""
    assert not live(session)
    assert_error(idp.call("GET", f"/Users/{created['id']}"), 404)
    assert_error(idp.call("DELETE", f"/Users/{created['id']}"), 404)


def test_an_owner_is_listed_but_never_changed_by_scim(idp):
    with db.connection_context():
        owner = admin.create_user(idp.account.id, "owner@acme.example", "long enough password")
    found = scim_json(idp.call("GET", '/Users?filter=userName eq "owner@acme.example"'))
    assert found["Resources"][0]["roles"][0]["value"] == "owner"
    for method, body in (("PUT", {"schemas": [USER], "userName": "owner@acme.example", "active": False}),
                         ("PATCH", {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "active",
                                                                        "value": False}]}),
                         ("DELETE", None)):
        assert_error(idp.call(method, f"/Users/{owner.id}", body), 403)
    assert (row(owner.id).role, row(owner.id).disabled) == ("owner", False)


# --- discovery and protocol -------------------------------------------------------------------------

def test_service_provider_config_says_what_is_supported(idp):
    body = scim_json(idp.call("GET", "/ServiceProviderConfig"))
    assert body["schemas"] == ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"]
    assert body["patch"]["supported"] and body["filter"]["supported"] and not body["bulk"]["supported"]
    assert body["authenticationSchemes"][0]["type"] == "oauthbearertoken"


def test_resource_types_and_schemas_describe_the_user(idp):
    types = scim_json(idp.call("GET", "/ResourceTypes"))
    assert types["totalResults"] == 1 and types["Resources"][0]["schema"] == USER
    assert scim_json(idp.call("GET", "/ResourceTypes/User"))["endpoint"] == "/Users"
    assert_error(idp.call("GET", "/ResourceTypes/Group"), 404)
    schemas = scim_json(idp.call("GET", "/Schemas"))
    user_schema = schemas["Resources"][0]
    assert user_schema["id"] == USER
    roles = next(a for a in user_schema["attributes"] if a["name"] == "roles")
    assert next(s for s in roles["subAttributes"] if s["name"] == "value")["canonicalValues"] == [
        "admin", "developer", "viewer"]
    assert scim_json(idp.call("GET", f"/Schemas/{USER}"))["id"] == USER
    assert_error(idp.call("GET", "/Schemas/urn:nope"), 404)


def test_unknown_paths_and_methods_answer_in_scims_error_schema(idp):
    assert_error(idp.call("GET", "/Groups"), 404)
    assert_error(idp.call("POST", "/Bulk", {}), 404)
    assert_error(idp.call("POST", "/ServiceProviderConfig", {}), 405)


def test_the_scim_views_are_no_api_calls_nothing_charged_nor_logged_as_activity(idp):
    from tests.api.helpers import balance, ledger
    before = balance(idp.account)
    idp.create()
    idp.call("GET", "/Users")
    assert balance(idp.account) == before and ledger(idp.account)[-1][1] == "grant"


def test_the_app_refuses_to_start_with_a_scim_view_outside_its_authentication(app):
    from app.api_calls import check_accounted
    check_accounted(app)  # as built: every view wrapped
    app.view_functions["scim.extra"] = lambda: "open"
    app.url_map.add(type(next(app.url_map.iter_rules()))("/scim/v2/Extra", endpoint="scim.extra"))
    with pytest.raises(RuntimeError, match="scim_authenticated"):
        check_accounted(app)


def test_attributes_and_excluded_attributes_choose_what_is_returned(idp):
    created = idp.create(roles=[{"value": "admin"}])
    only = scim_json(idp.call("GET", f"/Users/{created['id']}?attributes=userName,roles.value"))
    assert only == {"schemas": [USER], "id": created["id"], "userName": created["userName"],
                    "roles": [{"value": "admin"}]}
    without = scim_json(idp.call("GET", f"/Users?excludedAttributes=active,{USER}:emails,id"))["Resources"][0]
    assert "active" not in without and "emails" not in without and without["id"] == created["id"]


def test_a_search_sent_as_a_body_filters_and_pages_as_the_list(idp):
    idp.create("a@acme.example")
    wanted = idp.create("b@acme.example")
    for path in ("/Users/.search", "/.search"):
        body = scim_json(idp.call("POST", path, {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:SearchRequest"],
            "filter": 'userName eq "b@acme.example"', "attributes": ["userName"], "count": 5}))
        assert body["totalResults"] == 1 and body["Resources"] == [
            {"schemas": [USER], "id": wanted["id"], "userName": "b@acme.example"}]
    assert_error(idp.call("POST", "/.search", {"filter": "x"}), 400, "invalidSyntax")


# --- the operator's command -------------------------------------------------------------------------

def test_the_operator_issues_the_token_once_replaces_it_and_revokes_it(app, account, caplog):
    runner = app.test_cli_runner()
    with caplog.at_level(logging.INFO):
        shown = runner.invoke(args=["customers", "scim-token", account.id])
    assert shown.exit_code == 0, shown.output
    token = shown.output.strip().rsplit(" ", 1)[-1]
    assert token.startswith("scim_") and "shown once" in shown.output
    assert all(token not in record.getMessage() for record in caplog.records)
    with db.connection_context():
        assert Customer.get_by_id(account.id).scim_token_digest == digest(token)
    client = app.test_client()
    assert client.get("/scim/v2/Users", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    again = json.loads(runner.invoke(args=["customers", "scim-token", account.id, "--json"]).output)
    assert again["ok"] and again["scim_token"] != token
    assert client.get("/scim/v2/Users", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    revoked = json.loads(runner.invoke(args=["customers", "scim-token", account.id, "--revoke", "--json"]).output)
    assert revoked == {"ok": True, "customer_id": account.id, "revoked": True}
    newer = again["scim_token"]
    assert client.get("/scim/v2/Users", headers={"Authorization": f"Bearer {newer}"}).status_code == 401
    with db.connection_context():
        assert Customer.get_by_id(account.id).scim_token_digest is None


def test_the_command_for_an_unknown_customer_is_one_line(app):
    result = app.test_cli_runner().invoke(args=["customers", "scim-token", "cus_nobody"])
    assert result.exit_code == 1 and "no customer cus_nobody" in result.output and "Traceback" not in result.output


def test_a_body_too_large_is_413_in_scims_error_schema_and_makes_nothing(idp, app):
    limit = app.config["MAX_CONTENT_LENGTH"]
    answer = idp.call("POST", "/Users", {"schemas": [USER], "userName": "big@acme.example", "externalId": "x" * limit})
    assert_error(answer, 413)
    with db.connection_context():
        assert PortalUser.select().count() == 0


def test_a_scim_requests_log_lines_name_the_customer_whose_token_it_was(idp, app):
    from flask import g

    from app.plumbing.logging_setup import ContextFilter
    seen = {}

    @app.after_request
    def keep(response):
        record = logging.LogRecord("app.test", logging.INFO, __file__, 1, "during the request", None, None)
        ContextFilter().filter(record)
        seen["customer_id"] = record.customer_id if g.get("scim_customer_id") else None
        return response

    idp.call("GET", "/Users")
    assert seen["customer_id"] == idp.account.id
