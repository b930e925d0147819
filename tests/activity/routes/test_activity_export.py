"""The audit export through the API: NDJSON, oldest first, one credit a page, the key's mode only,
resumed with the previous page's ``X-Next-Cursor``."""
from __future__ import annotations

import json

from app.extensions import db
from tests import factories
from tests.api.helpers import balance
from tests.api.test_auth_and_errors import assert_error

EXPORT = "/api/v1/activity/export"


def page(client, account, **query):
    response = client.get(EXPORT, query_string=query, headers=account.headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/x-ndjson"
    lines = response.get_data(as_text=True).splitlines()
    return [json.loads(line) for line in lines], response.headers


def test_the_export_is_ndjson_oldest_first_resumable_and_costs_a_credit_a_page(client, account):
    client.post("/api/v1/scan", json={"target": "jane@example.com", "purpose": "kyc_aml"}, headers=account.headers)
    client.get("/api/v1/scans", headers=account.headers)
    before = balance(account)
    first, headers = page(client, account, limit=1)
    assert balance(account) == before - 1
    assert [e["action"] for e in first] == ["scan.create"] and headers["X-Has-More"] == "true"
    assert first[0]["purpose"] == "kyc_aml" and "target" not in first[0] and "target_hashes" not in first[0]
    rest, headers = page(client, account, cursor=headers["X-Next-Cursor"])
    # the first export call's own entry is there too: each page's call is in the log like any other
    assert [e["action"] for e in rest] == ["scans.list", "activity.export"] and headers["X-Has-More"] == "false"
    nothing_new, again = page(client, account, cursor=headers["X-Next-Cursor"], limit=1)
    assert [e["action"] for e in nothing_new] == ["activity.export"]  # the previous page's call


def test_a_test_key_exports_only_test_mode_entries(client, account):
    with db.connection_context():
        test_key = factories.sandbox_key(account)
    client.get("/api/v1/scans", headers=account.headers)
    client.get("/api/v1/scans", headers=test_key.headers)
    entries, _ = page(client, test_key)
    assert [(e["action"], e["key_id"]) for e in entries] == [("scans.list", test_key.key.id)]


def test_a_bad_cursor_or_limit_is_a_400_naming_it(client, account):
    assert_error(client.get(EXPORT, query_string={"cursor": "bm9wZQ"}, headers=account.headers),
                 400, "invalid_request")
    response = client.get(EXPORT, query_string={"limit": "1001"}, headers=account.headers)
    assert_error(response, 400, "invalid_request")
    assert "limit" in json.dumps(response.get_json())
    response = client.get(EXPORT, query_string={"starting_after": "x"}, headers=account.headers)
    assert_error(response, 400, "invalid_request")


def test_the_operator_adds_lists_and_removes_an_audit_sink_with_the_token_on_stdin(app, account):
    runner = app.test_cli_runner()
    added = runner.invoke(args=["customers", "audit-sink", account.id, "--url", "https://siem.example/hec",
                                "--token-stdin", "--json"], input="s3cret-hec-token\n")
    assert added.exit_code == 0, added.output
    sink = json.loads(added.output)
    assert sink["ok"] is True and sink["format"] == "splunk_hec" and "s3cret-hec-token" not in added.output
    listed = runner.invoke(args=["customers", "audit-sinks", account.id])
    assert sink["sink_id"] in listed.output and "s3cret" not in listed.output
    no_token = runner.invoke(args=["customers", "audit-sink", account.id, "--url", "https://siem.example/hec",
                                   "--token-stdin"], input="")
    assert no_token.exit_code == 1 and "Traceback" not in no_token.output
    bad_format = runner.invoke(args=["customers", "audit-sink", account.id, "--url", "https://siem.example/hec",
                                     "--token-stdin", "--format", "xml"], input="t\n")
    assert bad_format.exit_code != 0
    removed = runner.invoke(args=["customers", "audit-sink-remove", sink["sink_id"], "--json"])
    assert json.loads(removed.output)["removed"] is True
    again = runner.invoke(args=["customers", "audit-sink-remove", sink["sink_id"]])
    assert again.exit_code == 1 and "no audit sink" in again.output
