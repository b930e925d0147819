"""The portal's scan page explains the result (D23): coverage at a glance, the sources with their
status, the score as its reasons linking to their items, each finding's sources and feedback buttons."""
from __future__ import annotations

import json
import re

from app.extensions import db
from app.scans.models import FindingFeedback, Scan
from app.scans.results import normalize_result
from app.tracking import states
from app.tracking.simulated.results import result_for
from tests.portal.helpers import csrf, login


def completed(client, account, target):
    scan_id = client.post("/api/v1/scan", json={"target": target}, headers=account.headers).get_json()["scan_id"]
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        raw = result_for(scan.kind, scan.target, "https://artifacts.example/inv_1", messy=False,
                         checked_at="2026-11-21T12:01:00Z")
        result = normalize_result(raw, scan.kind, scan_id=scan_id)
        assert states.complete(scan_id, result)
    return scan_id, result


def test_the_scan_page_shows_coverage_sources_reasons_and_each_findings_sources(client, portal_account):
    scan_id, result = completed(client, portal_account, "partial.jane@example.com")
    login(client)
    page = client.get(f"/app/scans/{scan_id}").get_data(as_text=True)
    coverage = result["coverage"]
    glance = (f"{coverage['checked']} of {len(result['sources'])} sources asked · {coverage['found']} found something · "
              f"{coverage['failed']} could not answer")
    assert glance in page
    assert "Partial result" in page and f'action="/app/scans/{scan_id}/rerun"' in page
    for source in result["sources"]:
        assert f'data-source="{source["id"]}"' in page
    assert page.count("rate limited") + page.count("timeout") >= 2
    for reason in result["risk"]["reasons"]:
        assert f"+{reason['points']}" in page
        for finding_id in reason["finding_ids"]:
            assert f'href="#{finding_id}"' in page and f'id="{finding_id}"' in page
    for finding in result["findings"]:
        row = re.search(rf'<tr id="{finding["id"]}">(.*?)</tr>', page, re.DOTALL).group(1)
        names = {s["id"]: s["name"] for s in result["sources"]}
        assert all(names[sid] in row for sid in finding["source_ids"])
        assert f"/app/scans/{scan_id}/findings/{finding['id']}/feedback" in row


def test_a_result_without_sources_says_so(client, portal_account):
    scan_id = client.post("/api/v1/scan", json={"target": "old@example.com"},
                          headers=portal_account.headers).get_json()["scan_id"]
    with db.connection_context():
        assert states.complete(scan_id, normalize_result({"risk": {"score": 5}}, "email", scan_id=scan_id))
    login(client)
    page = client.get(f"/app/scans/{scan_id}").get_data(as_text=True)
    assert "The engine reported no sources for this scan." in page
    assert "The engine gave no breakdown of this score." in page


def test_the_feedback_buttons_record_it_and_the_page_shows_it(client, portal_account):
    scan_id, result = completed(client, portal_account, "jane@example.com")
    finding = result["findings"][0]
    login(client)
    token = csrf(client, f"/app/scans/{scan_id}")
    response = client.post(f"/app/scans/{scan_id}/findings/{finding['id']}/feedback",
                           data={"csrf_token": token, "verdict": "false_positive"})
    assert response.status_code == 302 and response.headers["Location"].endswith(f"/app/scans/{scan_id}#{finding['id']}")
    page = client.get(f"/app/scans/{scan_id}").get_data(as_text=True)
    row = re.search(rf'<tr id="{finding["id"]}">(.*?)</tr>', page, re.DOTALL).group(1)
    assert 'data-verdict="false_positive"' in row and "Not this person" in row
    with db.connection_context():
        assert FindingFeedback.select().count() == 1
        stored = json.loads(Scan.get_by_id(scan_id).result_json)
    assert stored["findings"][0]["feedback"]["verdict"] == "false_positive"
    # The API reads it too.
    read = client.get(f"/api/v1/scan/{scan_id}", headers=portal_account.headers).get_json()
    assert read["result"]["findings"][0]["feedback"]["verdict"] == "false_positive"


def test_feedback_on_another_customers_scan_or_without_csrf_is_refused(client, portal_account, make_customer):
    other = make_customer()
    scan_id, result = completed(client, other, "jane@example.com")
    own_id, _ = completed(client, portal_account, "john@example.com")
    login(client)
    token = csrf(client, f"/app/scans/{own_id}")
    path = f"/app/scans/{scan_id}/findings/{result['findings'][0]['id']}/feedback"
    assert client.post(path, data={"csrf_token": token, "verdict": "confirmed"}).status_code == 404
    assert client.post(path, data={"verdict": "confirmed"}).status_code == 400
    with db.connection_context():
        assert FindingFeedback.select().count() == 0


def test_each_finding_shows_its_confidence_and_matched_on_and_the_page_filters_by_confidence(client, portal_account):
    """D29: the confidence and what it matched on beside each finding; ``?min_confidence=`` (the page's
    form) leaves out the findings under it, and says how many; a bad value is refused, the page shown."""
    scan_id, result = completed(client, portal_account, "jane@example.com")
    login(client)
    page = client.get(f"/app/scans/{scan_id}").get_data(as_text=True)
    assert 'id="confidence-filter"' in page and 'name="min_confidence"' in page
    for finding in result["findings"]:
        row = re.search(rf'<tr id="{finding["id"]}">(.*?)</tr>', page, re.DOTALL).group(1)
        assert f'data-confidence="{finding["confidence"]}"' in row
        assert all(f'<span class="badge">{word}</span>' in row for word in finding["matched_on"])
    low = [f for f in result["findings"] if f["confidence"] < 0.5]
    assert low
    filtered = client.get(f"/app/scans/{scan_id}?min_confidence=0.5")
    text = filtered.get_data(as_text=True)
    assert filtered.status_code == 200
    assert all(f'id="{f["id"]}"' not in text for f in low)
    assert f"{len(low)} finding" in re.search(r'id="filtered-note"[^>]*>(.*?)</p>', text, re.DOTALL).group(1)
    refused = client.get(f"/app/scans/{scan_id}?min_confidence=7")
    assert refused.status_code == 400 and "Confidence filter" in refused.get_data(as_text=True)
    assert all(f'id="{f["id"]}"' in refused.get_data(as_text=True) for f in low)  # shown as created


def test_a_scan_that_did_not_meet_its_rule_says_so(client, portal_account):
    answer = client.post("/api/v1/scan", json={"target": "jane@example.com", "required": "phone_profile"},
                         headers=portal_account.headers)
    scan_id = answer.get_json()["scan_id"]
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        raw = result_for(scan.kind, scan.target, "https://artifacts.example/inv_1", messy=False)
        assert states.complete(scan_id, normalize_result(raw, scan.kind, scan_id=scan_id))
    login(client)
    page = client.get(f"/app/scans/{scan_id}").get_data(as_text=True)
    assert 'id="no-match"' in page and "<code>phone_profile</code>" in page
