"""Results a customer can check (D23/E6): the result's sources, coverage, partial flag, findings and
the score's reasons on every read (single, aggregate, list) and in the webhook body."""
import json

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.models import Scan, WebhookDelivery

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"
FAILED = ("rate_limited", "timeout")


def status_of(scan_id):
    with db.connection_context():
        return Scan.get_by_id(scan_id).status


def complete(client, account, jobs, frozen, target):
    scan_id = client.post(SCAN, json={"target": target}, headers=account.headers).json["scan_id"]
    assert jobs.run(frozen, until=lambda: status_of(scan_id) == "completed")
    return scan_id


def assert_explained(result, *, partial):
    assert result["partial"] is partial
    failed = [s for s in result["sources"] if s["status"] in FAILED]
    assert bool(failed) is partial and result["coverage"]["failed"] == len(failed)
    assert 10 <= result["coverage"]["checked"] <= 20
    finding_ids = {f["id"] for f in result["findings"]}
    assert finding_ids and all(f["source_ids"] for f in result["findings"])
    assert sum(r["points"] for r in result["risk"]["reasons"]) == result["risk"]["score"]
    assert all(set(r["finding_ids"]) <= finding_ids for r in result["risk"]["reasons"])


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_partial_result_reads_with_its_sources_coverage_findings_and_reasons(client, account, jobs):
    with freeze_time(START) as frozen:
        partial_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        whole_id = complete(client, account, jobs, frozen, "jane@example.com")
        partial = client.get(f"{SCAN}/{partial_id}", headers=account.headers).json["result"]
        again = client.get(f"{SCAN}/{partial_id}", headers=account.headers).json["result"]
        whole = client.get(f"{SCAN}/{whole_id}", headers=account.headers).json["result"]
        listed = {e["scan_id"]: e for e in client.get("/api/v1/scans", headers=account.headers).json["data"]}
    assert_explained(partial, partial=True)
    assert_explained(whole, partial=False)
    assert [f["id"] for f in again["findings"]] == [f["id"] for f in partial["findings"]]  # stable ids
    assert listed[partial_id]["result"] == partial


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_aggregate_entries_carry_the_explanation(client, account, jobs):
    with freeze_time(START) as frozen:
        bulk_id = client.post(BULK, json={"targets": [{"target": "partial.a@example.com"}, {"target": "+447700907777"},
                                                      {"target": "b@example.com"}]},
                              headers=account.headers).json["bulk_id"]
        assert jobs.run(frozen, until=lambda: client.get(f"{BULK}/{bulk_id}", headers=account.headers)
                        .json["all_done"])
        entries = client.get(f"{BULK}/{bulk_id}", headers=account.headers).json["scans"]
    assert [e["result"]["partial"] for e in entries] == [True, True, False]
    for entry, partial in zip(entries, (True, True, False), strict=True):
        assert_explained(entry["result"], partial=partial)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_the_webhook_body_carries_the_explanation(client, make_customer, jobs):
    account = make_customer(webhook_url="https://receiver.example.com/hook", webhook_secret="whsec_" + "A" * 32)
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "partial.jo@example.com")
        read = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]
    with db.connection_context():
        delivery = WebhookDelivery.get(WebhookDelivery.scan_id == scan_id)
    body = json.loads(bytes(delivery.body) if not isinstance(delivery.body, str) else delivery.body)
    assert body["result"] == read
    assert body["result"]["partial"] is True and body["result"]["findings"]
