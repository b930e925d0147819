"""The portal on a phone (390 x 844) and a laptop (1280 x 800), measured in a real Chromium: every
page fits the screen's width (a wide table scrolls inside its box, never the page), the top bar
wraps so that "Log out" stays on screen, and the key page stays short enough to read."""
from __future__ import annotations

import pytest
import requests

from app.accounts.models import ApiKey
from app.extensions import db
from app.privacy import erasure
from app.webhooks import endpoints, key_settings
from tests import factories
from tests.browser.conftest import ARTIFACTS
from tests.browser.test_portal_browser import _finish, receiver

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}


@pytest.fixture
def busy_account(served_app, portal_user, simulator, jobs):
    """An account with what makes pages wide and long: three endpoints, a page of deliveries (one
    of an erased scan), completed and failed scans, a batch with a rejected target, watches of a
    live and a test key, and the activity all that wrote. Returns the pages' paths by name."""
    api, headers = f"{served_app.url}/api/v1", portal_user.headers
    url = receiver(simulator, "phone-walk", [200])
    with db.connection_context():
        key = ApiKey.get_by_id(portal_user.key.id)
        key_settings.set_webhook(key.id, portal_user.id, url, "whsec_YnJvd3NlciBzZWNyZXQgMDEyMzQ1Njc4OQ==")
        key = ApiKey.get_by_id(key.id)
        for n in range(2):
            endpoints.create(key, url=f"{url}?endpoint={n}&a-rather-long-query-string=that-goes-on-and-on",
                             description=f"Receiver number {n} of the compliance team's case system")
        sandbox = factories.sandbox_key(portal_user, name="sandbox key of the compliance team's case system")

    def create(target):
        answer = requests.post(f"{api}/scan", json={"target": target}, headers=headers, timeout=10)
        assert answer.status_code == 202, answer.text
        return answer.json()["scan_id"]

    scans = [create(t) for t in ("jane.doe@example.com", "john.roe@example.com", "+442071838750")]
    failed = create("fail.hard@example.com")
    bulk = requests.post(f"{api}/scan/bulk", headers=headers, timeout=10, json={"targets": [
        {"target": "bulk.one@example.com"}, {"target": "no"}, {"target": "bulk.two@example.com"}]}).json()
    for scan_id in scans + [s["scan_id"] for s in bulk["scans"]]:
        _finish(scan_id)
    _finish(failed, fail=True)
    for target in ("watched.person@example.com", "other.watched@example.com"):
        answer = requests.post(f"{api}/watches", headers=headers, timeout=10,
                               json={"target": target, "interval": "weekly"})
        assert answer.status_code == 201, answer.text
    answer = requests.post(f"{api}/watches", headers=sandbox.headers, timeout=10,
                           json={"target": "sandboxed@example.com", "interval": "daily"})
    assert answer.status_code == 201, answer.text
    jobs.run()  # the deliveries
    with db.connection_context():
        erasure.erase_scan(customer_id=portal_user.id, scan_id=scans[1], livemode=True)
    return {"keys": "/app/api-keys", "key": f"/app/api-keys/{portal_user.key.id}", "scans": "/app/scans",
            "scan": f"/app/scans/{scans[0]}", "erased scan": f"/app/scans/{scans[1]}",
            "failed scan": f"/app/scans/{failed}", "batch": f"/app/batches/{bulk['bulk_id']}",
            "watches": "/app/watches", "activity": "/app/activity", "usage": "/app/usage", "team": "/app/users",
            "settings": "/app/settings", "two-factor": "/app/account/two-factor"}


def _open(browser, served_app, viewport):
    from tests.browser.conftest import PASSWORD
    context = browser.new_context(viewport=viewport)
    tab = context.new_page()
    tab.goto(f"{served_app.url}/app/login")
    tab.get_by_label("E-mail").fill("ops@acme.example")
    tab.get_by_label("Password").fill(PASSWORD)
    tab.get_by_role("button", name="Log in").click()
    tab.wait_for_url("**/app/api-keys")
    return context, tab


def _shoot(tab, name, *, full_page=True):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)



def _box(locator) -> dict:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_every_page_fits_the_screen_width(browser, served_app, busy_account, viewport):
    """No page scrolls sideways; "Log out" is on screen; a table wider than a phone scrolls in its
    box; at a laptop's width no table needs to."""
    context, tab = _open(browser, served_app, viewport)
    try:
        widths, heights, scrolling = {}, {}, {}
        for name, path in busy_account.items():
            answer = tab.goto(f"{served_app.url}{path}")
            assert answer.status == 200, (name, answer.status)
            widths[name] = tab.evaluate("document.scrollingElement.scrollWidth")
            heights[name] = tab.evaluate("document.scrollingElement.scrollHeight")
            logout = _box(tab.get_by_role("button", name="Log out"))
            assert logout["x"] >= 0 and logout["x"] + logout["width"] <= viewport["width"], name
            scrolling[name] = tab.evaluate("""() => [...document.querySelectorAll('main table')].filter(
                t => !t.closest('details:not([open])')).map(t => t.closest('.table-scroll') ?
                t.closest('.table-scroll').scrollWidth > t.closest('.table-scroll').clientWidth : null)""")
            _shoot(tab, f"portal_{viewport['width']}_{name.replace(' ', '_')}")
        print(f"at {viewport['width']} px: widths {widths}, heights {heights}")
        assert {n: w for n, w in widths.items() if w > viewport["width"]} == {}
        assert {n: s for n, s in scrolling.items() if None in s} == {}  # every table in its box
        if viewport == LAPTOP:
            assert {n: s for n, s in scrolling.items() if any(s)} == {}
        else:
            assert any(scrolling["key"]) and any(scrolling["activity"])  # these do scroll, in their box
            # The key page of 20 deliveries and 3 endpoints: 21,973 px tall before, 5,634 after.
            assert heights["key"] < 7000
    finally:
        context.close()


def test_the_key_page_reads_at_a_laptops_width(browser, served_app, busy_account):
    """The delivery console's scan ids whole, never under the status; an erased scan's delivery says
    why it has no Redeliver; "Show secret" lands at the secret."""
    context, tab = _open(browser, served_app, LAPTOP)
    try:
        tab.goto(f"{served_app.url}{busy_account['key']}")
        rows = tab.locator("table.console tr.summary-row")
        assert rows.count() >= 18  # six scans' events (and the watches' first, once done), each to three endpoints
        for n in range(rows.count()):
            row = rows.nth(n)
            scan, status = row.locator("td").nth(3), row.locator("td").nth(4)
            if row.locator("td").nth(3).locator("code").count():
                code = _box(scan.locator("code"))
                assert code["x"] + code["width"] <= _box(status)["x"], n
                assert scan.locator("code").evaluate("e => e.getClientRects().length") == 1, n
        erased = tab.locator("td.redeliver .no-redeliver")
        assert erased.count() >= 1 and "its scan was erased" in erased.first.inner_text()
        _shoot(tab, "portal_1280_key_console")
        tab.get_by_role("button", name="Show secret").click()
        secret = tab.locator("#revealed-secret")
        secret.wait_for()
        assert tab.url.endswith("#revealed")
        box, top = _box(secret), tab.evaluate("window.scrollY")
        assert top > 0 and box["y"] >= 0 and box["y"] + box["height"] <= LAPTOP["height"]  # in view, no scrolling
        shown = _box(tab.locator("#revealed"))
        assert box["x"] + box["width"] <= shown["x"] + shown["width"]  # inside its box, whole
        _shoot(tab, "portal_1280_key_secret_shown", full_page=False)  # what the person sees
    finally:
        context.close()


def test_the_scan_and_activity_pages_read_at_a_laptops_width(browser, served_app, busy_account):
    """The risk card's counts inside the card; the activity log's times on one line each."""
    context, tab = _open(browser, served_app, LAPTOP)
    try:
        tab.goto(f"{served_app.url}{busy_account['scan']}")
        card = _box(tab.locator("section.card", has=tab.get_by_role("heading", name="Risk")))
        for part in tab.locator("dl.counts dt, dl.counts dd").all():
            box = _box(part)
            assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"], part.inner_text()
        tab.goto(f"{served_app.url}{busy_account['activity']}")
        times = tab.locator("table.activity td.time .when")
        assert times.count() >= 5
        assert {t.evaluate("e => e.getClientRects().length") for t in times.all()} == {1}
    finally:
        context.close()
