"""A person's walk through the portal in a real Chromium."""
import pytest
import requests

from app.extensions import db
from app.models import WebhookDelivery

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
    assert page.locator("table.log tbody tr").count() == 4  # attempt 1 + 3 retries
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
