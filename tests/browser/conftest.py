"""Playwright driving Debian's Chromium against the portal served on a real port.

Skipped, with the reason in pytest's summary, when /usr/bin/chromium is missing
(`.ci/run` installs it). Each test saves a screenshot under artifacts/browser/.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.accounts import admin
from app.extensions import db
from tests.processes import real_clock_env

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
PASSWORD = "correct horse battery staple"

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing: browser tests skipped (apt-get install chromium)",
                allow_module_level=True)


@pytest.fixture(scope="session")
def browser():
    """Chromium on the machine's real clock. Under ``make test-future`` (libfaketime preloaded)
    the service runs a year ahead, but Chromium and Playwright's driver hang on a faked clock;
    the browser stands for the customer, whose clock is not what that run tests. The driver is
    started without the preload, and Chromium, its child, inherits that."""
    from playwright.sync_api import sync_playwright
    preload = os.environ.get("LD_PRELOAD")
    if preload is not None:
        os.environ["LD_PRELOAD"] = real_clock_env()["LD_PRELOAD"]
    try:
        pw_manager = sync_playwright()
        pw = pw_manager.__enter__()
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload
    try:
        instance = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield instance
        instance.close()
    finally:
        pw_manager.__exit__(None, None, None)


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture
def portal_user(make_customer):
    acct = make_customer(tier="business", credits=50)
    with db.connection_context():
        admin.create_user(acct.id, "ops@acme.example", PASSWORD)
    return acct


@pytest.fixture
def logged_in(page, served_app, portal_user):
    page.goto(f"{served_app.url}/app/login")
    page.get_by_label("E-mail").fill("ops@acme.example")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/app/api-keys")
    return page
