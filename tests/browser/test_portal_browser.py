"""A person's walk through the portal in a real Chromium."""
import re

import pytest
import requests

from app.extensions import db
from app.webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def receiver(simulator, name, responses):
    requests.post(f"{simulator.url}/_sim/receivers/{name}",
                  json={"secret": "whsec_YnJvd3NlciBzZWNyZXQgMDEyMzQ1Njc4OQ==", "responses": responses}, timeout=5).raise_for_status()
    return f"{simulator.url}/_sim/hooks/{name}"


def open_key(page, served_app, account):
    page.goto(f"{served_app.url}/app/api-keys")
    page.get_by_role("link", name=account.key.name).click()
    page.wait_for_url(f"**/app/api-keys/{account.key.id}")


def set_webhook(page, url):
    page.get_by_label("Webhook URL").fill(url)
    page.get_by_label("Signing secret").fill("whsec_YnJvd3NlciBzZWNyZXQgMDEyMzQ1Njc4OQ==")
    page.get_by_role("button", name="Save webhook").click()
    page.get_by_text("Webhook settings saved.").wait_for()


def test_login_set_webhook_and_see_a_test_event_arrive(logged_in, served_app, portal_user, simulator, jobs):
    page = logged_in
    open_key(page, served_app, portal_user)
    page.get_by_text("No deliveries yet: set a webhook URL").wait_for()
    set_webhook(page, receiver(simulator, "browser-ok", [200]))
    page.get_by_role("button", name="Send test event").click()
    page.get_by_text("Test event queued").wait_for()
    jobs.run()
    page.reload()
    row = page.locator("table.log tbody tr").first
    assert "HTTP 200" in row.inner_text() and "scan.completed" in row.inner_text()
    got = requests.get(f"{simulator.url}/_sim/receivers/browser-ok/deliveries", timeout=5).json()["deliveries"]
    assert len(got) == 1 and got[0]["signature_valid"] is True


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0, 0, 0))
def test_a_failing_delivery_can_be_redelivered(logged_in, served_app, portal_user, simulator, jobs):
    page = logged_in
    open_key(page, served_app, portal_user)
    set_webhook(page, receiver(simulator, "browser-fail", [500]))
    page.get_by_role("button", name="Send test event").click()
    jobs.run()
    page.goto(f"{served_app.url}/app/api-keys/{portal_user.key.id}?status=failed")
    assert page.locator("tbody.delivery").count() == 1
    page.locator("tbody.delivery summary").first.click()  # <details>: no script needed
    assert page.locator("tbody.delivery tr.attempt").count() == 4  # attempt 1 + 3 retries
    assert "HTTP 500" in page.locator("table.log").inner_text()
    receiver(simulator, "browser-fail", [200])
    page.get_by_role("button", name="Redeliver").click()
    page.get_by_text("queued again").wait_for()
    jobs.run()
    page.goto(f"{served_app.url}/app/api-keys/{portal_user.key.id}")
    assert "HTTP 200" in page.locator("table.log tbody tr").first.inner_text()
    with db.connection_context():
        assert WebhookDelivery.get().status == "succeeded"


def test_another_customers_key_is_refused(logged_in, served_app, make_customer):
    other = make_customer()
    response = logged_in.goto(f"{served_app.url}/app/api-keys/{other.key.id}")
    assert response.status == 404
    logged_in.goto(f"{served_app.url}/app/api-keys")
    assert other.key.id not in logged_in.content()


def test_usage_page_shows_balance_and_limits(logged_in, served_app, portal_user):
    logged_in.get_by_role("link", name="Usage").click()
    logged_in.get_by_role("heading", name="Limits now").wait_for()
    text = logged_in.inner_text("main")
    assert "50" in text and "In flight now" in text and "Business" in text


# --- scans, batches, usage and the delivery console (issue 19) -----------------------------

def _shot(page, name):
    from tests.browser.conftest import ARTIFACTS
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _finish(scan_id, *, fail=False):
    from app.scans.models import Scan
    from app.scans.results import normalize_result
    from app.tracking import states
    from app.tracking.simulated.results import result_for
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        if fail:
            assert states.fail(scan_id, "engine_failed", "the engine could not finish this investigation")
        else:
            raw = result_for(scan.kind, scan.target, f"https://artifacts.example/{scan_id}")
            assert states.complete(scan_id, normalize_result(raw, scan.kind))


def test_walk_scans_batch_usage_and_delivery_console(logged_in, served_app, portal_user, simulator, jobs):
    page = logged_in
    open_key(page, served_app, portal_user)
    set_webhook(page, receiver(simulator, "browser-walk", [503, 200]))
    api = f"{served_app.url}/api/v1"
    headers = portal_user.headers

    def create(target, kind=None):
        answer = requests.post(f"{api}/scan", json={"target": target} | ({"kind": kind} if kind else {}),
                               headers=headers, timeout=10)
        assert answer.status_code == 202, answer.text
        return answer.json()["scan_id"]

    email = create("jane.doe@example.com")
    phone = create("+442071838750")
    failed = create("fail.hard@example.com")
    running = create("hang.going@example.com")  # never finishes (the "hang" convention): in flight throughout
    bulk = requests.post(f"{api}/scan/bulk", headers=headers, timeout=10, json={"targets": [
        {"target": "bulk.one@example.com"}, {"target": "no"}, {"target": "@hang_two"}]}).json()  # in flight throughout
    for scan_id in (email, phone, bulk["scans"][0]["scan_id"]):
        _finish(scan_id)
    _finish(failed, fail=True)
    jobs.run()  # the webhook deliveries: 503, then 200 on the immediate retry
    requests.get(f"{api}/scan/{email}", headers=headers, timeout=10)  # a read: "1 read" in the ledger

    # Scans: the list, keyboard to a scan, the filters.
    page.get_by_role("link", name="Scans").click()
    page.wait_for_url("**/app/scans")
    rows = page.locator("table.scans tbody tr")
    assert rows.count() == 6
    assert "bulk.one@example.com" in rows.first.inner_text()  # newest first: the batch came last
    assert "jane.doe@example.com" in rows.last.inner_text()
    _shot(page, "portal_scans_list")
    page.get_by_label("Status").select_option("completed")
    # Each filter loads a new page: counted before it had come (a loaded machine, 2026-11-29), the
    # list had no rows.
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert page.locator("table.scans tbody tr").count() == 3
    page.get_by_label("Target contains").fill("jane")
    with page.expect_navigation():
        page.get_by_label("Target contains").press("Enter")
    assert page.locator("table.scans tbody tr").count() == 1
    link = page.get_by_role("link", name="jane.doe@example.com")
    link.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/app/scans/{email}")

    # A completed scan, laid out.
    page.get_by_role("heading", name="Risk").wait_for()
    for heading in ("Summary", "Profiles", "Contacts", "Webhook deliveries"):
        assert page.get_by_role("heading", name=heading).count() == 1, heading
    assert page.get_by_role("link", name="PDF report").get_attribute("rel") == "noopener noreferrer"
    assert "succeeded" in page.locator("section", has=page.get_by_role("heading", name="Webhook deliveries")).inner_text()
    _shot(page, "portal_scan_completed")

    page.goto(f"{served_app.url}/app/scans/{phone}")
    page.get_by_role("heading", name="Phone profile").wait_for()
    assert "Europe/London" in page.inner_text("main")
    _shot(page, "portal_scan_phone")
    page.goto(f"{served_app.url}/app/scans/{failed}")
    page.get_by_role("heading", name="The scan failed").wait_for()
    assert "engine_failed" in page.inner_text("main")
    _shot(page, "portal_scan_failed")
    page.goto(f"{served_app.url}/app/scans/{running}")
    # jobs.run() above may have run this scan's first look too: queued or running, it is in flight.
    page.get_by_role("heading", name=re.compile("^(Waiting for the engine|In progress)$")).wait_for()
    assert page.locator("main progress").count() == 1
    _shot(page, "portal_scan_in_flight")

    # The batch.
    page.goto(f"{served_app.url}/app/batches/{bulk['bulk_id']}")
    counters = page.locator("dl.counters").inner_text()
    assert "Submitted\n3" in counters and "Rejected\n1" in counters and "Completed\n1" in counters
    assert page.locator("table.scans tbody tr").count() == 2
    _shot(page, "portal_batch")

    # The delivery console: one row per delivery, expandable to attempts and the masked request.
    open_key(page, served_app, portal_user)
    deliveries = page.locator("tbody.delivery")
    assert deliveries.count() == 4  # the three completed scans and the failed one
    first = deliveries.filter(has=page.locator("tr.attempt", has_text="HTTP 503"))  # the receiver's one refusal
    assert first.count() == 1
    first.locator("summary").focus()
    page.keyboard.press("Enter")  # <details> opens from the keyboard, no script
    assert first.locator("tr.attempt").count() == 2
    request_text = first.locator("pre.request").inner_text()
    assert "X-Service-Signature: sha256=••••••••" in request_text and '"event":"scan.' in request_text
    assert "browser-secret-0123456789" not in page.content()
    _shot(page, "portal_key_delivery_console")

    # Usage: charts with titles, the described ledger, a CSV export and a refused period.
    page.get_by_role("link", name="Usage").click()
    page.get_by_role("heading", name="Activity").wait_for()
    assert page.locator("svg.chart[role=img] > title").count() == 2
    ledger_text = page.inner_text("table.ledger")
    assert "1 read" in ledger_text and "GET /api/v1/scan/{scan_id}" in ledger_text
    _shot(page, "portal_usage")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    text = open(download.value.path(), encoding="utf-8").read()
    assert text.startswith("time_utc,change,balance_after,kind,what") and "POST /api/v1/scan/bulk" in text
    page.get_by_label("First day").fill("2026-03-01")
    page.get_by_label("Last day").fill("2026-02-01")
    page.get_by_role("button", name="Download CSV").click()
    page.get_by_text("must not be after the last day").wait_for()
    _shot(page, "portal_usage_export_refused")


def test_another_customers_scan_and_batch_are_404_in_the_browser(logged_in, served_app, make_customer):
    other = make_customer()
    created = requests.post(f"{served_app.url}/api/v1/scan/bulk", headers=other.headers, timeout=10,
                            json={"targets": [{"target": "secret.person@example.com"}]}).json()
    assert logged_in.goto(f"{served_app.url}/app/scans/{created['scans'][0]['scan_id']}").status == 404
    assert logged_in.goto(f"{served_app.url}/app/batches/{created['bulk_id']}").status == 404
    logged_in.goto(f"{served_app.url}/app/scans")
    assert "secret.person@example.com" not in logged_in.content()
