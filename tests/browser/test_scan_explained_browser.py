"""A person checks a result in a real Chromium: coverage at a glance, the sources, the score's reasons
leading to their items, and the feedback buttons (D23)."""
import json

import pytest
import requests

from app.extensions import db
from app.scans.models import Scan
from tests.browser.test_portal_browser import _shot

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def _complete(scan_id):
    from app.scans.results import normalize_result
    from app.tracking import states
    from app.tracking.simulated.results import result_for
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        raw = result_for(scan.kind, scan.target, f"https://artifacts.example/{scan_id}", messy=False,
                         checked_at="2026-11-21T12:01:00Z")
        result = normalize_result(raw, scan.kind, scan_id=scan_id)
        assert states.complete(scan_id, result)
    return result


def test_check_a_partial_result_follow_a_reason_and_mark_a_finding(logged_in, served_app, portal_user):
    page = logged_in
    answer = requests.post(f"{served_app.url}/api/v1/scan", json={"target": "partial.jane.doe@example.com"},
                           headers=portal_user.headers, timeout=10)
    scan_id = answer.json()["scan_id"]
    result = _complete(scan_id)
    page.goto(f"{served_app.url}/app/scans/{scan_id}")

    coverage = page.get_by_role("region", name="Coverage")
    assert f"{result['coverage']['checked']} of {len(result['sources'])} sources asked" in coverage.inner_text()
    coverage.get_by_text("Partial result").wait_for()
    sources = page.locator("table.sources tbody tr")
    assert sources.count() == len(result["sources"])
    failed = [s["name"] for s in result["sources"] if s["status"] in ("rate_limited", "timeout")]
    assert failed and all(name in page.locator("table.sources").inner_text() for name in failed)

    # The score as its reasons: a link leads to the item behind it.
    reason = next(r for r in result["risk"]["reasons"] if r["finding_ids"])
    finding_id = reason["finding_ids"][0]
    page.locator(f'ul.reasons a[href="#{finding_id}"]').first.click()
    page.wait_for_url(f"**#{finding_id}")
    row = page.locator(f'tr[id="{finding_id}"]')
    assert row.is_visible()
    finding = next(f for f in result["findings"] if f["id"] == finding_id)
    names = {s["id"]: s["name"] for s in result["sources"]}
    assert all(names[s] in row.inner_text() for s in finding["source_ids"])
    _shot(page, "portal_scan_explained")

    # Feedback: the button, the message, the mark on the finding, and the API's read of it.
    row.get_by_role("button", name="Not this person").click()
    page.get_by_text("the finding is marked not this person").wait_for()
    assert "Not this person" in page.locator(f'tr[id="{finding_id}"] td.feedback .badge').inner_text()
    _shot(page, "portal_scan_feedback")
    with db.connection_context():
        stored = json.loads(Scan.get_by_id(scan_id).result_json)
    assert next(f for f in stored["findings"] if f["id"] == finding_id)["feedback"]["verdict"] == "false_positive"
