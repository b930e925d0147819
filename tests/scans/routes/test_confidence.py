"""Findings with a confidence, and paying only for usable answers (D29), through the API: each finding's
confidence and matched_on, ``min_confidence`` at creation and on reads, ``required`` and its refund."""
import pytest
from freezegun import freeze_time

from app.extensions import db
from app.scans.models import Scan
from tests.api.helpers import assert_books_balance, balance, complete
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"


def read(client, account, scan_id, query=""):
    return client.get(f"{SCAN}/{scan_id}{query}", headers=account.headers)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_findings_carry_confidence_and_matched_on_and_a_minimum_filters_every_read(client, account, jobs):
    with freeze_time(START) as frozen:
        whole_id = complete(client, account, jobs, frozen, "jane@example.com")
        scan_id = complete(client, account, jobs, frozen, "jane@example.com", min_confidence=0.5,
                           required="breaches OR profiles")
        whole = read(client, account, whole_id).json
        body = read(client, account, scan_id).json
        lowered = read(client, account, scan_id, "?min_confidence=0").json
        raised = read(client, account, scan_id, "?min_confidence=0.95&wait=1").json
        listed = {e["scan_id"]: e for e in client.get("/api/v1/scans", headers=account.headers).json["data"]}
    findings = whole["result"]["findings"]
    assert all(0 <= f["confidence"] <= 1 and f["matched_on"] for f in findings)
    assert any(f["confidence"] < 0.5 for f in findings) and any(f["confidence"] >= 0.95 for f in findings)
    assert "min_confidence" not in whole and "filtered" not in whole["result"] and whole["result"]["match"] is True
    assert (body["min_confidence"], body["required"]) == (0.5, "breaches OR profiles")
    under = [f for f in findings if f["confidence"] < 0.5]
    result = body["result"]
    assert result["filtered"] == {"min_confidence": 0.5, "findings_left_out": len(under)}
    assert {f["id"] for f in result["findings"]} == {f["id"] for f in findings} - {f["id"] for f in under}
    weak = [f for f in result["findings"] if f["path"].startswith("profiles.weak")]
    assert len(result["profiles"]["weak"]) == len(weak)
    assert result["risk"]["score"] == sum(r["points"] for r in result["risk"]["reasons"])
    assert result["match"] is True
    # A read's own minimum, in place of the scan's, for that read only.
    assert lowered["result"]["filtered"] == {"min_confidence": 0.0, "findings_left_out": 0}
    assert len(lowered["result"]["findings"]) == len(findings)
    assert all(f["confidence"] >= 0.95 for f in raised["result"]["findings"])
    assert listed[scan_id]["result"] == result and listed[scan_id]["min_confidence"] == 0.5


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_bad_read_minimum_is_400_naming_it_and_charged(client, account, jobs):
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "jane@example.com")
        before = balance(account)
        for query in ("?min_confidence=2", "?min_confidence=abc", "?min_confidence=", "?min_confidence=0.5&wait=0"):
            bad = read(client, account, scan_id, query)
            assert_error(bad, 400, "invalid_request")
            assert set(bad.json["details"]) <= {"min_confidence", "wait"}, query
        unknown = read(client, account, scan_id, "?min_confidence=0.5&confidence=1")
        assert_error(unknown, 400, "invalid_request")
        assert set(unknown.json["details"]) == {"confidence"}
        assert balance(account) == before - 5  # a 400 is charged as any (D3)
        bulk = client.get(f"{BULK}/blk_nope?min_confidence=-1", headers=account.headers)
        assert_error(bulk, 400, "invalid_request")
    assert_books_balance(account)


@pytest.mark.parametrize("body, code, field", [
    ({"min_confidence": 1.5}, "invalid_request", "min_confidence"),
    ({"min_confidence": "high"}, "invalid_request", "min_confidence"),
    ({"min_confidence": True}, "invalid_request", "min_confidence"),
    ({"required": "breaches OR"}, "invalid_required", "required"),
    ({"required": "profile"}, "invalid_required", "required"),
    ({"required": 5}, "invalid_required", "required"),
])
def test_bad_creation_rules_are_400_naming_the_field_charged_and_create_nothing(client, account, body, code, field):
    before = balance(account)
    for path, payload in ((SCAN, {"target": "jane@example.com", **body}),
                          (BULK, {"targets": [{"target": "jane@example.com"}], **body}),
                          ("/api/v1/watches", {"target": "jane@example.com", "interval": "weekly", **body})):
        answer = client.post(path, json=payload, headers=account.headers)
        assert_error(answer, 400, code)
        assert field in answer.json["details"], path
        if code == "invalid_required" and isinstance(body["required"], str):
            assert "at position" in answer.json["message"]
    assert balance(account) == before - 3
    with db.connection_context():
        assert not Scan.select().where(Scan.customer == account.id).exists()


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_scan_that_does_not_meet_its_rule_has_no_items_and_its_credit_back(client, account, jobs):
    with freeze_time(START) as frozen:
        before = balance(account)
        scan_id = complete(client, account, jobs, frozen, "jane@example.com", required="phone_profile")
        kept_id = complete(client, account, jobs, frozen, "john@example.com", required="breaches OR profiles")
        body = read(client, account, scan_id).json
        entries = client.get("/api/v1/activity?action=scan.refund", headers=account.headers).json
    result = body["result"]
    assert result["match"] is False and result["findings"] == [] and result["breaches"] == []
    assert result["profiles"] == {"verified": [], "weak": []} and result["contacts"] == {"emails": [], "phones": []}
    assert result["sources"] and result["coverage"]["checked"] > 0
    assert all(set(r) == {"code", "points", "description", "finding_ids"} and r["points"] == 0
               for r in result["risk"]["reasons"])
    # Two creations, a scan's read and the activity's read, one creation given back.
    assert balance(account) == before - 2 - 1 - 1 + 1
    assert [e["resource_id"] for e in entries["data"]] == [scan_id] and entries["data"][0]["credits"] == -1
    assert kept_id != scan_id
    assert_books_balance(account)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_false_positive_drops_the_finding_under_the_minimum_in_the_next_scan_of_the_target(client, account, jobs):
    with freeze_time(START) as frozen:
        first = complete(client, account, jobs, frozen, "jane@example.com")
        sure = max(read(client, account, first).json["result"]["findings"], key=lambda f: f["confidence"])
        assert sure["confidence"] >= 0.95
        given = client.post(f"{SCAN}/{first}/findings/{sure['id']}/feedback", json={"verdict": "false_positive"},
                            headers=account.headers)
        assert given.json["finding"]["confidence"] == 0.0
        second = complete(client, account, jobs, frozen, "Jane@Example.com", min_confidence=0.5)
        result = read(client, account, second).json["result"]
        shown = read(client, account, second, "?min_confidence=0").json["result"]
    assert sure["id"] not in {f["id"] for f in result["findings"]}
    carried = next(f for f in shown["findings"] if f["id"] == sure["id"])
    assert carried["confidence"] == 0.0 and carried["feedback"]["scan_id"] == first


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_the_confidence_filter_adds_no_statement_to_a_served_read(client, make_customer, jobs, capsys):
    """The served read stays one statement with its BEGIN and COMMIT, whether a minimum applies (the
    read's or the scan's own) or not; the figures are printed for the report (``-s``)."""
    from bench import confidence_read
    account = make_customer(credits=100_000)
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "jane@example.com")
        filtered_id = complete(client, account, jobs, frozen, "john@example.com", min_confidence=0.5)
        bulk_id = client.post(BULK, json={"targets": [{"target": f"p{i}@example.com"} for i in range(10)]},
                              headers=account.headers).json["bulk_id"]
        assert jobs.run(frozen, until=lambda: client.get(f"{BULK}/{bulk_id}", headers=account.headers)
                        .json["all_done"])
    report = confidence_read.measure(client, account.headers, confidence_read.paths_for(scan_id, filtered_id,
                                                                                        bulk_id), n=100)
    with capsys.disabled():
        print("\n" + confidence_read.table(report))
    assert all(row["status"] == 200 for row in report.values())
    plain = report["read"]["sql"]
    assert plain == report["read ?min_confidence=0.5"]["sql"] == report["read of a scan with its own min_confidence"][
        "sql"] <= 3
    assert report["bulk read"]["sql"] == report["bulk read ?min_confidence=0.5"]["sql"]


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_webhook_bodies_use_the_scans_own_minimum_and_a_missed_rule(client, make_customer, jobs):
    import json

    from app.webhooks.models import WebhookDelivery
    account = make_customer(webhook_url="https://receiver.example.com/hook", webhook_secret="whsec_" + "A" * 32)
    with freeze_time(START) as frozen:
        filtered_id = complete(client, account, jobs, frozen, "jane@example.com", min_confidence=0.5)
        missed_id = complete(client, account, jobs, frozen, "john@example.com", required="phone_profile")
        shown = read(client, account, filtered_id).json
    with db.connection_context():
        bodies = {d.scan_id: json.loads(d.body) for d in WebhookDelivery.select().where(
            WebhookDelivery.scan_id.in_([filtered_id, missed_id]))}
    assert bodies[filtered_id]["result"] == shown["result"] and shown["result"]["filtered"]["min_confidence"] == 0.5
    assert all(f["confidence"] >= 0.5 for f in bodies[filtered_id]["result"]["findings"])
    assert bodies[missed_id]["result"]["match"] is False and bodies[missed_id]["result"]["findings"] == []


def test_a_watch_keeps_its_minimum_and_rule_and_gives_them_to_its_scans(client, account):
    answer = client.post("/api/v1/watches", json={"target": "jane@example.com", "interval": "weekly",
                                                  "min_confidence": 0.6, "required": "breaches"},
                         headers=account.headers)
    assert answer.status_code == 201, answer.json
    assert (answer.json["min_confidence"], answer.json["required"]) == (0.6, "breaches")
    scan = read(client, account, answer.json["last_scan_id"]).json
    assert (scan["min_confidence"], scan["required"], scan["watch_id"]) == (0.6, "breaches", answer.json["watch_id"])
    run = client.post(f"/api/v1/watches/{answer.json['watch_id']}/run", headers=account.headers)
    assert read(client, account, run.json["scan_id"]).json["min_confidence"] == 0.6
