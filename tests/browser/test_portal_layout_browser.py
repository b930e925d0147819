"""The portal laid out for a person, measured in a real Chromium at 1280 px: the navigation on one
line, the key page's endpoints in a full-width section, each checkbox beside its label, ids whole."""
import pytest

from app.accounts import admin
from app.accounts.models import Customer
from app.extensions import db
from tests.browser.conftest import PASSWORD
from tests.browser.test_portal_browser import _shot

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def _box(locator) -> dict:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def _lines(locator) -> int:
    """How many lines an inline element takes (one rectangle per line)."""
    return locator.evaluate("e => e.getClientRects().length")


def test_the_navigation_is_one_line_at_1280_px(page, served_app, portal_user):
    """An owner (every item) with a long e-mail address and account name: the name gives way."""
    email = "operations.and.compliance.team@acme-investigations-international.example"
    with db.connection_context():
        admin.create_user(portal_user.id, email, PASSWORD)
        Customer.update(name="Acme Investigations International Holdings (Europe)").where(
            Customer.id == portal_user.id).execute()
    page.goto(f"{served_app.url}/app/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/app/api-keys")
    for path in ("/app/api-keys", "/app/scans", "/app/watches", "/app/activity", "/app/users"):
        page.goto(f"{served_app.url}{path}")
        items = page.locator("header.top nav a")
        assert items.count() == 11  # the owner's whole navigation
        tops = {round(_box(items.nth(i))["y"]) for i in range(items.count())}
        assert len(tops) == 1, (path, tops)
        logout = _box(page.get_by_role("button", name="Log out"))
        assert round(logout["y"] + logout["height"] / 2) in range(*sorted(
            (round(min(tops)), round(min(tops) + _box(items.first)["height"]) + 1)))  # the same line
    _shot(page, "portal_navigation")


def test_the_key_page_is_laid_out_for_a_person(logged_in, served_app, portal_user):
    page = logged_in
    page.goto(f"{served_app.url}/app/api-keys/{portal_user.key.id}")
    page.locator("main details").evaluate_all("all => all.forEach(d => { d.open = true; })")  # folded forms
    endpoints, grid = page.locator("section.endpoints"), page.locator("main > div.grid").first
    # Endpoints: a section of their own, as wide as the page's content (the cards' grid above it).
    assert abs(_box(endpoints)["width"] - _box(grid)["width"]) < 2
    assert _box(endpoints)["y"] >= _box(grid)["y"] + _box(grid)["height"]
    # Each checkbox (scopes, events) on the line of its label, before it.
    boxes = page.locator("fieldset.choices li")
    assert boxes.count() >= 9  # five scopes, four events
    for i in range(boxes.count()):
        check, label = _box(boxes.nth(i).locator("input[type=checkbox]")), _box(boxes.nth(i).locator("label"))
        assert abs((check["y"] + check["height"] / 2) - (label["y"] + label["height"] / 2)) < 4, i
        assert check["x"] + check["width"] <= label["x"]
    # Ids whole: the key id and the scopes are never broken mid-word.
    key_id = page.locator("main p.muted code", has_text=portal_user.key.id)
    assert _lines(key_id) == 1
    for code in page.locator("#key-scopes code").all():
        assert _lines(code) == 1
    _shot(page, "portal_key_layout")
