"""A person watches targets from a CSV file in a real Chromium (D28): the file chosen, the import's
report read row by row, the watches listed with their next scan, one paused."""
import pytest

from app.extensions import db
from app.watches.models import Watch
from tests.browser.test_portal_browser import _shot

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process

CSV = (b"name,target,kind\n"
       b"Jane,jane.doe@example.com,\n"
       b"Too short,ab,\n"
       b"Phone,+44 7700 900123,phone\n"
       b"Fax,someone@example.com,fax\n")


def test_import_a_csv_file_read_its_report_and_pause_a_watch(logged_in, served_app, portal_user, tmp_path):
    page = logged_in
    page.get_by_role("link", name="Watches").click()
    page.wait_for_url("**/app/watches")
    page.get_by_text("No watches yet").wait_for()
    upload = tmp_path / "targets.csv"
    upload.write_bytes(CSV)

    form = page.get_by_role("region", name="Import a CSV file")
    form.get_by_label("CSV file").set_input_files(str(upload))
    form.get_by_label("Scan again").select_option("daily")
    form.get_by_label("Case reference").fill("IMPORT-7")
    form.get_by_role("button", name="Import and watch").click()

    report = page.get_by_role("region", name="Import report")
    report.wait_for()
    assert "/app/watches/import" in page.url and "jane" not in page.url  # the targets went in the body
    rows = report.locator("tbody tr")
    assert rows.count() == 4
    cells = [rows.nth(n).locator("td").all_inner_texts() for n in range(4)]
    assert [c[0] for c in cells] == ["2", "3", "4", "5"]  # the header is row 1
    assert cells[0][1] == "jane.doe@example.com" and cells[0][3].startswith("created")
    assert cells[1][1] == "ab" and "rejected" in cells[1][3] and "target_too_short" in cells[1][3]
    assert cells[2][1] == "+447700900123" and cells[2][3].startswith("created")
    assert "rejected" in cells[3][3] and "invalid_kind" in cells[3][3]
    page.get_by_text("2 of 4 rows watched, 2 rejected").wait_for()
    _shot(page, "portal_watches_import_report")

    listed = page.locator("table.watches tbody tr")
    assert listed.count() == 2
    with db.connection_context():
        jane = Watch.get(Watch.target == "jane.doe@example.com")
    row = page.locator(f'tr[id="{jane.id}"]')
    assert "active" in row.inner_text() and "daily" in row.inner_text() and "IMPORT-7" in row.inner_text()
    row.get_by_role("button", name="Pause").click()
    page.get_by_text(f"Watch {jane.id} paused").wait_for()
    assert "paused" in page.locator(f'tr[id="{jane.id}"]').inner_text()
    _shot(page, "portal_watches_after_pause")
    with db.connection_context():
        assert Watch.get_by_id(jane.id).status == "paused"


def test_a_watch_scans_page_says_what_changed_since_the_previous_one(logged_in, served_app, portal_user):
    import copy

    import requests

    from app.scans import results
    from app.scans.models import Scan
    from app.tracking import states
    from app.tracking.simulated.results import result_for

    def complete(scan_id, raw):
        with db.connection_context():
            scan = Scan.get_by_id(scan_id)
            owner = results.Owner(scan.customer_id, scan.kind, scan.target)
            assert states.complete(scan_id, results.normalize_result(raw, scan.kind, scan_id=scan_id, owner=owner))

    target = "jane.watch@example.com"
    watch = requests.post(f"{served_app.url}/api/v1/watches", json={"target": target, "interval": "weekly"},
                          headers=portal_user.headers, timeout=10).json()
    first = result_for("email", target, "https://artifacts.example/inv_1", messy=False)
    complete(watch["last_scan_id"], first)
    second = copy.deepcopy(first)
    second["breaches"] = [first["breaches"][1], {"name": "FreshLeak", "date": "2026-09", "accounts": 1000,
                                                 "classes": ["email_addresses"]}]
    second["risk"].update(score=80, band="critical")
    second["risk"]["reasons"][-1]["points"] += 80 - first["risk"]["score"]  # the reasons still add up to the score
    run = requests.post(f"{served_app.url}/api/v1/watches/{watch['watch_id']}/run", headers=portal_user.headers,
                        timeout=10).json()
    complete(run["scan_id"], second)

    page = logged_in
    page.goto(f"{served_app.url}/app/watches")
    page.locator(f'tr[id="{watch["watch_id"]}"]').get_by_role("link", name=run["scan_id"]).click()
    changed = page.get_by_role("region", name="What changed since the previous scan")
    changed.wait_for()
    risk = first["risk"]
    assert changed.locator("#watch-risk").inner_text().lower() == f"risk: {risk['score']} {risk['band']} → 80 critical"
    assert "Breach: FreshLeak (2026-09)" in changed.locator("ul.watch-added").inner_text()
    assert "Breach: TravelNest (2018-05)" in changed.locator("ul.watch-removed").inner_text()
    changed.get_by_role("link", name="Breach: FreshLeak (2026-09)").click()  # to the finding on this page
    page.wait_for_url("**#fnd_*")
    _shot(page, "portal_watch_scan_changes")
