"""The client's activity log: ``list_activity`` / ``iter_activity`` over real pages, and
``scan-api activity``."""
import csv
import io
import json

import pytest
from scan_api_client import ActivityEntry, ScanClient, ValidationError
from scan_api_client.cli import main


def test_iter_activity_walks_every_page_and_finds_who_looked_up_a_target(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    created = api.create("jane.doe@example.com", purpose="kyc_aml", case_ref="CASE-9")
    for _ in range(3):
        api.list_scans(limit=1)
    entries = list(api.iter_activity(page_size=2))  # 4 calls before the first page
    assert [e.action for e in entries] == ["scans.list"] * 3 + ["scan.create"]
    assert all(isinstance(e, ActivityEntry) for e in entries)
    first = entries[-1]
    assert (first.resource_id, first.status, first.credits, first.key_id, first.purpose, first.case_ref) == (
        created.scan_id, 202, 1, account.key.id, "kyc_aml", "CASE-9")
    found = api.list_activity(target="jane.doe@EXAMPLE.com")
    assert [e.resource_id for e in found] == [created.scan_id] and found.has_more is False
    assert [e.action for e in api.iter_activity(action="scan.create", max_items=5)] == ["scan.create"]
    with pytest.raises(ValidationError) as caught:
        api.list_activity(target="jane@")
    assert caught.value.code == "invalid_target"


def test_cli_activity_prints_entries_as_json_and_csv(served_app, account):
    env = {"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key}
    ScanClient(served_app.url, account.api_key).create("jane.doe@example.com")
    out, err = io.StringIO(), io.StringIO()
    assert main(["activity", "--target", "jane.doe@example.com", "--format", "json"], stdout=out, stderr=err,
                env=env) == 0, err.getvalue()
    [entry] = json.loads(out.getvalue())
    assert entry["action"] == "scan.create" and entry["status"] == 202
    out = io.StringIO()
    assert main(["activity", "--all", "--format", "csv"], stdout=out, stderr=err, env=env) == 0, err.getvalue()
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["action"] for r in rows] == ["activity.list", "scan.create"]
    assert rows[1]["key_id"] == account.key.id and rows[0]["resource_id"] == ""
    assert "jane" not in out.getvalue()


def test_cli_activity_csv_quotes_a_case_reference_that_starts_a_formula(served_app, account):
    env = {"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key}
    ScanClient(served_app.url, account.api_key).create("jane.doe@example.com", case_ref='=HYPERLINK("http://x")')
    out, err = io.StringIO(), io.StringIO()
    assert main(["activity", "--action", "scan.create", "--format", "csv"], stdout=out, stderr=err,
                env=env) == 0, err.getvalue()
    [row] = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["case_ref"] == "'=HYPERLINK(\"http://x\")"


def test_iter_activity_export_goes_oldest_first_and_resumes_from_its_cursor(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    created = api.create("jane.doe@example.com", purpose="kyc_aml")
    api.list_scans(limit=1)
    export = api.iter_activity_export(page_size=2)
    first = list(export)
    # each page's call is an entry too: the second page holds the first page's call, then ends
    assert [e.action for e in first] == ["scan.create", "scans.list", "activity.export"]
    assert first[0].resource_id == created.scan_id and all(isinstance(e, ActivityEntry) for e in first)
    resumed = list(api.iter_activity_export(export.cursor))
    assert [e.action for e in resumed] == ["activity.export"]  # the last page's call, nothing seen before
    assert resumed[0].activity_id not in {e.activity_id for e in first}
    with pytest.raises(ValidationError):
        api.export_activity("bm9wZQ")
