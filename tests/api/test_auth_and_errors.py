"""Authentication (§5, D2) and the one error body (D1) from every layer."""
import logging

import pytest

from app.accounts import admin
from app.accounts.models import ApiKey, CreditLedger
from app.billing import charges
from app.extensions import db

SCAN = "/api/v1/scan"


def assert_error(response, status, code):
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["ok"] is False and body["error"] == code
    assert body["message"] and isinstance(body["message"], str)
    assert body["request_id"] == response.headers["X-Request-Id"]
    return body


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc", "Token service_live_x",
                                    "Bearer a b", "service_live_abc"])
def test_missing_or_malformed_header_is_unauthorized(client, account, header):
    headers = {} if header is None else {"Authorization": header}
    body = assert_error(client.post(SCAN, json={"target": "jane@example.com"}, headers=headers), 401, "unauthorized")
    assert "traceback" not in str(body).lower()


@pytest.mark.parametrize("token", ["service_live_unknown", "sk_live_abc", "service_test_abc", "x" * 300])
def test_unknown_or_foreign_tokens_are_invalid(client, account, token):
    assert_error(client.get(f"{SCAN}/scn_x", headers={"Authorization": f"Bearer {token}"}), 401, "invalid_token")


def test_revoked_key_is_invalid_at_once(client, account):
    assert client.get(f"{SCAN}/scn_x", headers=account.headers).status_code == 404
    with db.connection_context():
        admin.revoke_key(account.key.id)
    assert_error(client.get(f"{SCAN}/scn_x", headers=account.headers), 401, "invalid_token")


def test_401_costs_nothing_and_carries_no_account_headers(client, account):
    response = client.get(f"{SCAN}/scn_x", headers={"Authorization": "Bearer service_live_nope"})
    assert "X-Credits-Remaining" not in response.headers
    with db.connection_context():
        assert charges.balance_of(account.id) == 100


def test_key_is_stored_only_as_digest(client, account):
    import hashlib
    with db.connection_context():
        key = ApiKey.get_by_id(account.key.id)
        rows = [str(v) for v in key.__data__.values()]
    assert account.api_key not in rows
    assert key.digest == hashlib.sha256(account.api_key.encode()).hexdigest()
    assert account.api_key.startswith("service_live_") and len(account.api_key) >= len("service_live_") + 32
    assert key.last4 == account.api_key[-4:]


def test_bearer_scheme_is_case_insensitive(client, account):
    response = client.get(f"{SCAN}/scn_x", headers={"Authorization": f"bearer {account.api_key}"})
    assert response.status_code == 404


def test_unknown_path_is_404_before_authentication_and_free(client, account):
    for path in ("/nope", "/api/v1/nope", "/api/v2/scan"):
        assert_error(client.get(path, headers=account.headers), 404, "not_found")
    assert_error(client.get("/api/v1/nope"), 404, "not_found")
    with db.connection_context():
        assert charges.balance_of(account.id) == 100


def test_wrong_method_is_405_with_allow(client, account):
    body = assert_error(client.put(f"{SCAN}/scn_x", headers=account.headers), 405, "method_not_allowed")
    assert body["error"] == "method_not_allowed"
    response = client.put(SCAN, headers=account.headers)
    assert response.status_code == 405 and "POST" in response.headers["Allow"]


@pytest.mark.parametrize("kwargs,details_field", [
    ({"data": "not json", "content_type": "application/json"}, "_schema"),
    ({"json": ["a", "list"]}, "_schema"),
    ({"json": {"kind": "email"}}, "target"),
    ({"json": {"target": 7}}, "target"),
    ({"json": {"target": "jane@example.com", "kind": 7}}, "kind"),
])
def test_body_shape_errors_are_invalid_request_with_details(client, account, kwargs, details_field):
    body = assert_error(client.post(SCAN, headers=account.headers, **kwargs), 400, "invalid_request")
    assert details_field in body["details"]


@pytest.mark.parametrize("path", [SCAN, f"{SCAN}/bulk"])
@pytest.mark.parametrize("kwargs", [
    {"data": "target=jane@example.com", "content_type": "application/x-www-form-urlencoded"},
    {"data": '{"target": "jane@example.com"}', "content_type": "text/plain"},
    {"data": '{"target": "jane@example.com"}'},  # no Content-Type at all
    {},  # no body
])
def test_body_without_json_content_type_is_invalid_request_naming_it(client, account, path, kwargs):
    body = assert_error(client.post(path, headers=account.headers, **kwargs), 400, "invalid_request")
    assert "Content-Type: application/json" in body["message"] and "JSON" in body["message"]
    assert "Missing data" not in str(body)
    with db.connection_context():
        assert charges.balance_of(account.id) == 99  # a served 400, charged like any validation error


def test_json_content_type_with_parameters_is_accepted(client, account):
    response = client.post(SCAN, data='{"target": "jane@example.com"}', headers=account.headers,
                           content_type="application/json; charset=utf-8")
    assert response.status_code == 202


def test_non_utf8_body_is_a_clean_400(client, account):
    response = client.post(SCAN, data=b"\xff\xfe{\x00", content_type="application/json", headers=account.headers)
    assert_error(response, 400, "invalid_request")


def test_oversized_body_is_413_json(client, account):
    big = {"target": "a" * (300 * 1024)}
    assert_error(client.post(SCAN, json=big, headers=account.headers), 413, "payload_too_large")


def test_unexpected_exception_is_500_json_and_logged_with_request_id(app, account, caplog):
    @app.route("/boom")
    def boom():
        raise RuntimeError("secret internals")
    client = app.test_client()
    with caplog.at_level(logging.ERROR):
        response = client.get("/boom", headers={"X-Request-Id": "req-trace-1"})
    body = assert_error(response, 500, "internal_error")
    assert "secret internals" not in response.get_data(as_text=True)
    assert body["request_id"] == "req-trace-1"
    assert any("req-trace-1" in r.getMessage() for r in caplog.records)


def test_request_id_is_generated_or_echoed(client):
    generated = client.get("/healthz").headers["X-Request-Id"]
    assert generated.startswith("req_") and len(generated) >= 20
    assert client.get("/healthz", headers={"X-Request-Id": "abc-123"}).headers["X-Request-Id"] == "abc-123"
    hostile = client.get("/healthz", headers={"X-Request-Id": "<script>" * 20}).headers["X-Request-Id"]
    assert hostile.startswith("req_")


def test_every_charge_has_a_ledger_row(client, account):
    client.get(f"{SCAN}/scn_x", headers=account.headers)
    with db.connection_context():
        rows = list(CreditLedger.select().where(CreditLedger.customer == account.id).order_by(CreditLedger.id))
        assert [r.delta for r in rows] == [100, -1]
        assert charges.ledger_sum(account.id) == charges.balance_of(account.id) == 99
