"""Two-factor login in a real Chromium (D21): enrol from the page's QR code and secret, log out,
log in again with a code computed from the secret."""
import time

import pyotp
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def test_enrol_log_out_and_log_in_with_a_code(logged_in, served_app):
    page = logged_in
    page.get_by_role("link", name="Two-factor login").click()
    page.wait_for_url("**/app/account/two-factor")
    assert page.locator("figure.qr svg").count() == 1  # drawn by the server, inline
    secret = page.locator("#totp-secret").inner_text().strip()
    totp = pyotp.TOTP(secret)
    page.get_by_label("Code from your app").fill(totp.now())
    page.get_by_role("button", name="Turn two-factor login on").click()
    page.get_by_text("They are shown only now.").wait_for()
    assert page.locator("#recovery-codes li").count() == 10

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/app/login")
    page.get_by_label("E-mail").fill("ops@acme.example")
    page.get_by_label("Password").fill("correct horse battery staple")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/app/login/code")
    page.goto(f"{served_app.url}/app/api-keys")  # no session between the two steps
    page.wait_for_url(lambda url: "/app/login?next=" in url)
    page.go_back()
    page.wait_for_url("**/app/login/code")
    # The next step's code: the enrolment spent this step's, and one step of drift is accepted.
    page.get_by_label("Code").fill(totp.at(time.time() + totp.interval))
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/app/api-keys")
    assert "ops@acme.example (owner)" in page.locator("header").inner_text()
