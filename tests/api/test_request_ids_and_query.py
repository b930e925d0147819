"""A client's request id shaped like a key or a secret is never echoed, logged or stored, the
404 of an unknown path included; query parameters that are invalid or unknown are a 400 naming
them as query parameters, charged like every 400."""
from __future__ import annotations

import logging
import re

import pytest

from app.accounts.models import CreditLedger
from app.activity.models import ActivityEntry
from app.extensions import db
from tests.api.helpers import balance
from tests.api.test_auth_and_errors import assert_error

SECRET_SHAPED = ["service_live_AbCdEf0123456789", "service_test_AbCdEf0123456789", "whsec_AbCdEf0123456789",
                 "SERVICE_LIVE_AbCdEf0123456789"]
# A key or secret inside a longer id is as much a secret: anywhere in it, in any case.
SECRET_INSIDE = ["key:service_live_AbCdEf0123456789", "xservice_live_AbCdEf0123456789",
                 "id-service_test_AbCdEf0123456789-1", "a.whsec_AbCdEf0123456789", "order.WHSEC_Zz0123456789"]


@pytest.mark.parametrize("value", SECRET_SHAPED + SECRET_INSIDE)
@pytest.mark.parametrize("path", ["/api/v1/no-such-path", "/no-such-page", "/healthz"])
def test_a_secret_shaped_request_id_is_replaced_everywhere(client, caplog, value, path):
    with caplog.at_level(logging.DEBUG):
        response = client.get(path, headers={"X-Request-Id": value})
    assert response.headers["X-Request-Id"].startswith("req_")
    assert value.lower() not in response.get_data(as_text=True).lower()
    assert value.lower() not in caplog.text.lower()
    if response.status_code == 404:
        assert response.get_json()["request_id"] == response.headers["X-Request-Id"]


@pytest.mark.parametrize("value", ["whsec_" + "Z" * 24, "key:service_live_" + "Z" * 24, "a.whsec_" + "Z" * 24])
def test_a_secret_shaped_request_id_is_not_stored_in_the_activity_log(client, account, caplog, value):
    with caplog.at_level(logging.DEBUG):
        response = client.get("/api/v1/scans", headers={**account.headers, "X-Request-Id": value})
    assert response.status_code == 200
    with db.connection_context():
        stored = [entry.request_id for entry in ActivityEntry.select().where(ActivityEntry.customer_id == account.id)]
    assert stored == [response.headers["X-Request-Id"]] and stored[0].startswith("req_")
    assert value not in caplog.text


@pytest.mark.parametrize("value", ["order-42_retry.1", "service-live-1", "whsec", "my_service_livestock"])
def test_an_ordinary_request_id_is_still_kept(client, value):
    assert client.get("/nowhere", headers={"X-Request-Id": value}).get_json()["request_id"] == value


def test_every_prefix_of_a_credential_is_one_the_ids_are_checked_for():
    """The prefixes come from where the credentials are made: a new kind of key is covered at once."""
    from app.plumbing import crypto
    from app.request_ids import SECRET_PREFIXES, client_request_id
    made = [crypto.new_api_key(livemode=True), crypto.new_api_key(livemode=False), crypto.new_webhook_secret()]
    for secret in made:
        assert secret.startswith(SECRET_PREFIXES)
        allowed = re.sub(r"[^A-Za-z0-9._:-]", "x", secret)  # a webhook secret's base64 may hold + and /
        assert client_request_id("id-" + allowed + "-1") is None


LONGEST_ID = "order-42." + "x" * 119  # 128 characters: the longest id a client may send


@pytest.mark.parametrize("value, kept", [(LONGEST_ID, True), ("a", True), (LONGEST_ID + "x", False), ("", False)])
def test_a_request_id_of_1_to_128_characters_is_kept(client, value, kept):
    response = client.get("/nowhere", headers={"X-Request-Id": value})
    echoed = response.get_json()["request_id"]
    assert echoed == response.headers["X-Request-Id"]
    assert (echoed == value) is kept and (echoed.startswith("req_") and len(echoed) < 64) is not kept


def test_the_longest_request_id_is_stored_whole_with_a_charged_call(client, account):
    """The activity entry and the ledger row of a creation keep the client's id as it was sent."""
    response = client.post("/api/v1/scan", json={"target": "jane@example.com"},
                           headers={**account.headers, "X-Request-Id": LONGEST_ID})
    assert response.status_code == 202 and response.headers["X-Request-Id"] == LONGEST_ID
    with db.connection_context():
        stored = [e.request_id for e in ActivityEntry.select().where(ActivityEntry.customer_id == account.id)]
        charged = [row.request_id for row in CreditLedger.select().where(
            (CreditLedger.customer_id == account.id) & (CreditLedger.delta < 0))]
    assert stored == [LONGEST_ID] and charged == [LONGEST_ID]


QUERY_ROUTES = ["/api/v1/scans", "/api/v1/activity", "/api/v1/deliveries"]


@pytest.mark.parametrize("path", QUERY_ROUTES)
def test_an_unknown_query_parameter_is_a_charged_400_naming_it(client, account, path):
    before = balance(account)
    body = assert_error(client.get(path, query_string={"limt": "5"}, headers=account.headers), 400, "invalid_request")
    assert body["message"] == "unknown query parameter: limt"
    assert body["details"] == {"limt": ["Unknown field."]}
    assert balance(account) == before - 1  # a 400 is charged


@pytest.mark.parametrize("path", QUERY_ROUTES)
def test_an_invalid_query_parameter_is_named_as_one(client, account, path):
    body = assert_error(client.get(path, query_string={"limit": "0"}, headers=account.headers), 400, "invalid_request")
    assert body["message"] == "invalid query parameter: limit"
    assert list(body["details"]) == ["limit"]
    assert "body" not in body["message"]


def test_unknown_and_invalid_together(client, account):
    body = assert_error(client.get("/api/v1/scans", query_string={"limit": "x", "zz": "1"}, headers=account.headers),
                        400, "invalid_request")
    assert body["message"] == "invalid query parameters: limit, zz"


@pytest.mark.parametrize("path", ["/api/v1/account", "/api/v1/endpoints", "/api/v1/scan/scn_unknown",
                                  "/api/v1/scan/bulk/blk_unknown"])
def test_a_query_parameter_on_a_path_that_takes_none_is_a_charged_400(client, account, path):
    before = balance(account)
    body = assert_error(client.get(path, query_string={"target": "jane@example.com"}, headers=account.headers),
                        400, "invalid_request")
    assert body["message"] == "unknown query parameter: target"
    assert balance(account) == before - 1
    # The key is checked first: without one, the same call is a free 401.
    assert_error(client.get(path, query_string={"target": "x"}), 401, "unauthorized")


def test_a_known_query_still_works_and_the_document_lists_the_parameters(client, account):
    assert client.get("/api/v1/scans", query_string={"limit": "5", "status": "completed"},
                      headers=account.headers).status_code == 200
    document = client.get("/api/v1/openapi.json").get_json()
    for path, names in {"/api/v1/scans": {"status", "limit", "starting_after"},
                        "/api/v1/activity": {"target", "action", "limit"},
                        "/api/v1/deliveries": {"status", "event", "limit"}}.items():
        listed = {p["name"] for p in document["paths"][path]["get"]["parameters"] if p["in"] == "query"}
        assert names <= listed, (path, listed)
