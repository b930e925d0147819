"""The activity log through the API (D20): every authenticated call is one entry, written by the
hooks once its answer is decided; ``GET /api/v1/activity`` lists them with D17's pagination and
filters, "who looked up this target" included; targets are never stored in clear."""
from __future__ import annotations

import pytest

from app.accounts import admin
from app.activity.models import DEFAULT_PARTITION, ActivityEntry
from app.activity.statements import entries as activity_store
from app.extensions import db
from app.scans.models import Scan
from tests import factories
from tests.api.helpers import balance
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK, ACTIVITY = "/api/v1/scan", "/api/v1/scan/bulk", "/api/v1/activity"


def entries(account) -> list[ActivityEntry]:
    with db.connection_context():
        return list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
                    .order_by(ActivityEntry.created_at, ActivityEntry.id))


def listed(client, account, **query) -> dict:
    response = client.get(ACTIVITY, query_string=query, headers=account.headers)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_every_authenticated_call_is_one_entry_with_its_action_status_and_cost(client, account):
    calls = []

    def call(method, path, expected_action, expected_credits, **kwargs):
        before = balance(account)
        response = client.open(path, method=method, headers={**account.headers, **kwargs.pop("headers", {})},
                               **kwargs)
        assert before - balance(account) == expected_credits, (path, response.get_json())
        calls.append((expected_action, response.status_code, expected_credits, response.headers["X-Request-Id"]))
        return response

    scan_id = call("POST", SCAN, "scan.create", 1, json={"target": "jane@example.com", "purpose": "kyc_aml",
                                                            "case_ref": "CASE-7"}).get_json()["scan_id"]
    call("GET", f"{SCAN}/{scan_id}", "scan.read", 1)
    call("GET", f"{SCAN}/scn_unknown", "scan.read", 1)  # 404, charged
    bulk_id = call("POST", BULK, "bulk.create", 2, json={"targets": [
        {"target": "a@example.com"}, {"target": "+447700900123"}, {"target": "x"}]}).get_json()["bulk_id"]
    call("GET", f"{BULK}/{bulk_id}", "bulk.read", 1)
    call("GET", "/api/v1/scans", "scans.list", 1)
    call("GET", "/api/v1/deliveries", "deliveries.list", 1)
    call("POST", "/api/v1/deliveries/dlv_unknown/redeliver", "delivery.redeliver", 1)
    call("GET", ACTIVITY, "activity.list", 1)
    call("GET", ACTIVITY, "activity.list", 1, query_string={"limit": "0"})  # 400: charged, as D3 says
    call("POST", SCAN, "scan.create", 1, json={"target": "kim@example.com"}, headers={"Idempotency-Key": "k1"})
    call("POST", SCAN, "scan.create", 0, json={"target": "kim@example.com"}, headers={"Idempotency-Key": "k1"})
    call("POST", SCAN, "scan.create", 0, json={"target": "kim@example.com"},
         headers={"Idempotency-Key": "k" * 300})  # refused before the view: still an entry
    assert client.get(ACTIVITY, headers={"Authorization": "Bearer service_live_nope"}).status_code == 401

    rows = entries(account)
    assert [(r.action, r.status, r.credits, r.request_id) for r in rows] == calls
    assert {r.key_id for r in rows} == {account.key.id} and {r.livemode for r in rows} == {True}
    assert {r.client_address for r in rows} == {"127.0.0.1"}
    assert [r.status for r in rows] == [202, 200, 404, 202, 200, 200, 200, 404, 200, 400, 202, 202, 400]
    create, read, unknown, bulk_create, bulk_read, *_ = rows
    assert (create.resource_id, create.purpose, create.case_ref, len(create.target_hashes)) == (scan_id, "kyc_aml",
                                                                                              "CASE-7", 1)
    assert (read.resource_id, read.target_hashes, read.purpose) == (scan_id, None, None)
    assert unknown.resource_id == "scn_unknown"
    assert bulk_create.resource_id == bulk_id and len(bulk_create.target_hashes) == 2  # the queued targets only
    assert bulk_read.resource_id == bulk_id
    assert rows[7].resource_id == "dlv_unknown"


def test_the_target_filter_finds_who_created_a_scan_for_it_by_any_spelling(client, account, make_customer):
    with db.connection_context():
        second = factories.Account(account.customer, *_issue(account))
        stranger = make_customer()
    single = client.post(SCAN, json={"target": "jane.doe@Example.com"}, headers=account.headers).get_json()
    # The whole address is case-folded (its canonical form): the same target, however capitalised.
    batch = client.post(BULK, json={"targets": [{"target": "bob@example.com"}, {"target": "Jane.Doe@example.COM"}]},
                        headers=second.headers).get_json()
    client.post(SCAN, json={"target": "jane.doe@Example.com"}, headers=stranger.headers)  # another customer's
    client.get(f"{SCAN}/{single['scan_id']}", headers=account.headers)  # a read: not a look-up of the target
    for spelling in ("  jane.doe@EXAMPLE.com ", "Jane.Doe@example.com", "JANE.DOE@EXAMPLE.COM"):
        found = listed(client, account, target=spelling)["data"]
        assert [(e["action"], e["key_id"], e["resource_id"]) for e in found] == [
            ("bulk.create", second.key.id, batch["bulk_id"]), ("scan.create", account.key.id, single["scan_id"])]
    assert listed(client, account, target="bob@example.com", key_id=second.key.id)["data"][0]["resource_id"] == \
        batch["bulk_id"]
    assert listed(client, account, target="nobody@example.com")["data"] == []
    by_object = listed(client, account, resource_id=single["scan_id"])["data"]
    assert [e["action"] for e in by_object] == ["scan.read", "scan.create"]


def test_the_target_filter_finds_usernames_and_phone_numbers_by_any_spelling(client, account):
    handle = client.post(SCAN, json={"target": "@SuppHandle"}, headers=account.headers).get_json()
    phone = client.post(BULK, json={"targets": [{"target": "+1 (415) 555-0199"}]}, headers=account.headers).get_json()
    for spelling in ("supphandle", "@SUPPHANDLE", "SuppHandle"):
        assert [e["resource_id"] for e in listed(client, account, target=spelling)["data"]] == [handle["scan_id"]]
    for spelling in ("+14155550199", "+1.415.555.0199", "+1-415-555-0199", "+1 415 555 0199"):
        assert [e["resource_id"] for e in listed(client, account, target=spelling)["data"]] == [phone["bulk_id"]]


def _issue(account):
    from app.accounts import admin
    key, plaintext = admin.issue_key(account.id, "second key")
    return key, plaintext


def test_pages_newest_first_with_a_cursor(client, account):
    for _ in range(4):
        client.get("/api/v1/scans", headers=account.headers)
    first = listed(client, account, limit=3)  # 4 list calls before it
    assert [e["action"] for e in first["data"]] == ["scans.list"] * 3 and first["has_more"] is True
    second = listed(client, account, limit=3, starting_after=first["data"][-1]["activity_id"])
    # The first page's own call is newer than every entry of this page: it is not in it.
    assert [e["action"] for e in second["data"]] == ["scans.list"] and second["has_more"] is False
    everything = listed(client, account, limit=100)["data"]
    assert [e["activity_id"] for e in everything[2:]] == [e["activity_id"] for e in first["data"] + second["data"]]
    assert [e["action"] for e in everything[:2]] == ["activity.list", "activity.list"]
    entry = everything[-1]
    assert set(entry) == {"activity_id", "created_at", "livemode", "action", "key_id", "user_id", "user_email",
                          "resource_id", "status", "credits", "client_address", "request_id", "purpose", "case_ref"}
    assert (entry["status"], entry["credits"], entry["livemode"], entry["user_id"]) == (200, 1, True, None)


def test_a_key_sees_its_modes_entries_of_its_customer_only(client, account, make_customer):
    with db.connection_context():
        sandbox = factories.sandbox_key(account)
    stranger = make_customer()
    client.post(SCAN, json={"target": "jane@example.com"}, headers=sandbox.headers)
    client.get("/api/v1/scans", headers=stranger.headers)
    client.get("/api/v1/deliveries", headers=account.headers)
    live = listed(client, account)["data"]
    assert [e["action"] for e in live] == ["deliveries.list"]
    test = listed(client, sandbox)["data"]
    assert [(e["action"], e["livemode"], e["credits"]) for e in test] == [("scan.create", False, 0)]
    assert [e["action"] for e in listed(client, stranger)["data"]] == ["scans.list"]
    # Another mode's or customer's entry is no cursor here: the same refusal as an unknown id.
    for cursor in (test[0]["activity_id"], live[0]["activity_id"]):
        response = client.get(ACTIVITY, query_string={"starting_after": cursor}, headers=stranger.headers)
        assert_error(response, 400, "invalid_request")


@pytest.mark.parametrize("query, code", [
    ({"limit": "101"}, "invalid_request"),
    ({"created_after": "yesterday"}, "invalid_request"),
    ({"created_after": "0001-01-01T00:00+01:00"}, "invalid_request"),
    ({"key_id": "key x"}, "invalid_request"),
    ({"action": "DROP TABLE"}, "invalid_request"),
    ({"resource_id": "scn\x00"}, "invalid_request"),
    ({"starting_after": "act_unknown"}, "invalid_request"),
    ({"target": "ab"}, "target_too_short"),
    ({"target": "jane@"}, "invalid_target"),
    ({"target": "+12"}, "invalid_target"),
])
def test_bad_filters_are_a_400_that_changes_nothing_else(client, account, query, code):
    response = client.get(ACTIVITY, query_string=query, headers=account.headers)
    assert_error(response, 400, code)
    assert balance(account) == 99  # a 400 costs its call, as every 400 does
    assert [(e.action, e.status) for e in entries(account)] == [("activity.list", 400)]


def test_no_target_is_stored_in_clear(client, account):
    targets = ["Jane.Doe@Example.com", "+44 7700 900123", "@secret_handle", "bob@example.org"]
    client.post(SCAN, json={"target": targets[0], "case_ref": "CASE-1", "purpose": "other"}, headers=account.headers)
    client.post(BULK, json={"targets": [{"target": t} for t in targets[1:]], "purpose": "kyc_aml"},
                headers=account.headers)
    client.get(ACTIVITY, query_string={"target": targets[3]}, headers=account.headers)
    with db.connection_context():
        dump = "\n".join(row[0] for row in db.execute_sql(f'SELECT t::text FROM "{ActivityEntry._meta.table_name}" t'))
    assert dump.count("\n") == 2
    for target in targets + ["Jane.Doe@example.com", "+447700900123", "secret_handle", "jane", "bob", "7700900123"]:
        assert target.lower() not in dump.lower()


def test_a_charged_call_whose_entry_fails_is_not_served_and_a_free_ones_answer_stands(client, account, caplog):
    """No partition can take an entry (the DEFAULT one detached, no day's): every INSERT fails.
    A charged call and its entry commit together (D25): the creation's admission, the read's
    statement and a list's charge fail whole, so none is served or charged. A free call's
    entry is written after its answer: the answer stands, with one log line that names no target."""
    sandbox = factories.sandbox_key(account)
    with db.connection_context():
        days = activity_store.day_partitions()
        for day in days:
            activity_store.drop_day_partition(day)
        db.execute_sql(f'ALTER TABLE "activity_entry" DETACH PARTITION "{DEFAULT_PARTITION}"')
    try:
        created = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers)
        read = client.get(f"{SCAN}/scn_unknown", headers=account.headers)
        listing = client.get("/api/v1/scans", headers=account.headers)
        free = client.get("/api/v1/scans", headers=sandbox.headers)  # a test key's call costs nothing
    finally:
        with db.connection_context():
            db.execute_sql(f'ALTER TABLE "activity_entry" ATTACH PARTITION "{DEFAULT_PARTITION}" DEFAULT')
    assert (created.status_code, read.status_code, listing.status_code, free.status_code) == (500, 500, 500, 200)
    assert balance(account) == 100
    with db.connection_context():
        assert not Scan.select().where(Scan.customer == account.id).exists()
    # One line for each entry written after its answer (the creation's and the list's 500, the
    # free call), none for the read, whose statement failed whole.
    failures = [r.getMessage() for r in caplog.records if "activity log entry" in r.getMessage()]
    assert len(failures) == 3 and not any("jane" in line for line in failures)
    assert not any("jane" in r.getMessage() for r in caplog.records)
    assert entries(account) == []


@pytest.mark.config(TRUSTED_PROXIES=1)
def test_the_client_address_is_the_one_trusted_proxies_give(client, account):
    client.get("/api/v1/scans", headers={**account.headers, "X-Forwarded-For": "198.51.100.7"})
    assert [r.client_address for r in entries(account)] == ["198.51.100.7"]


def test_without_trusted_proxies_a_forwarded_address_is_not_believed(client, account):
    client.get("/api/v1/scans", headers={**account.headers, "X-Forwarded-For": "198.51.100.7"})
    assert [r.client_address for r in entries(account)] == ["127.0.0.1"]


def test_the_operation_is_documented_with_examples(client):
    document = client.get("/api/v1/openapi.json").get_json()
    operation = document["paths"]["/api/v1/activity"]["get"]
    assert operation["operationId"] == "listActivity" and "activity" in operation["tags"]
    assert operation["responses"]["200"]["content"]["application/json"]["example"]["data"][0]["action"] == "scan.read"
    assert {"invalid_target", "target_too_short", "invalid_request"} <= set(
        operation["responses"]["400"]["content"]["application/json"]["examples"])
    assert {p["name"] for p in operation["parameters"]} >= {"action", "key_id", "resource_id", "target",
                                                            "created_after", "created_before", "limit",
                                                            "starting_after"}


def test_a_read_s_entry_is_written_by_its_statement_with_the_answer_it_decided(client, account, make_customer):
    """A served read writes its entry in its one statement (no INSERT of its own): the status is
    the answer's (200, 403, 404, 402), the credits what it charged; a test key's read, which the
    statement does not charge, has its entry written by the hooks as before."""
    scan_id = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers).get_json()["scan_id"]
    poor = make_customer(credits=1)
    with db.connection_context():
        test_key, test_token = admin.issue_key(account.id, "sandbox", livemode=False)
    answers = [client.get(f"{SCAN}/{scan_id}", headers=account.headers).status_code,
               client.get(f"{SCAN}/{scan_id}", headers=poor.headers).status_code,  # another's: its last credit
               client.get(f"{SCAN}/{scan_id}", headers=poor.headers).status_code,  # no credit left
               client.get(f"{BULK}/blk_unknown", headers=account.headers).status_code,
               client.get(f"{SCAN}/{scan_id}", headers={"Authorization": f"Bearer {test_token}"}).status_code]
    assert answers == [200, 403, 402, 404, 404]
    mine = [(r.action, r.status, r.credits, r.key_id, r.livemode, r.resource_id) for r in entries(account)[1:]]
    assert mine == [("scan.read", 200, 1, account.key.id, True, scan_id),
                    ("bulk.read", 404, 1, account.key.id, True, "blk_unknown"),
                    ("scan.read", 404, 0, test_key.id, False, scan_id)]
    assert [(r.status, r.credits, r.key_id) for r in entries(poor)] == [(403, 1, poor.key.id), (402, 0, poor.key.id)]
