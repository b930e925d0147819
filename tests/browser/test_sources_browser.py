"""A customer reads the sources' health in a real Chromium (D30): the Sources page from the
navigation, a quarantined source shown as such, and the public status page it links to."""
import pytest

from app.extensions import db
from app.plumbing.models import utcnow
from app.sources import health
from tests.browser.test_portal_browser import _shot

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def test_the_sources_page_and_the_status_page_it_links(logged_in, served_app):
    health.forget_cache()
    with db.connection_context(), db.atomic():
        health.record_answers([("gravatar", "Gravatar", "error", 100)] * 20
                              + [("github", "GitHub", "found", 120)] * 5, utcnow())
    with db.connection_context():
        health.evaluate()
    page = logged_in
    page.get_by_role("link", name="Sources").click()
    page.wait_for_url("**/app/sources")
    gravatar = page.locator('tr[data-source="gravatar"]')
    assert "down" in gravatar.inner_text() and "quarantined" in gravatar.inner_text()
    assert "healthy" in page.locator('tr[data-source="github"]').inner_text()
    _shot(page, "sources_page")
    page.get_by_role("link", name="the status page").click()
    page.wait_for_url("**/status")
    assert page.get_by_role("heading", name="Service status: degraded").is_visible()
    cells = page.locator('tr[data-source="gravatar"] td.cell')
    assert cells.count() == 24
    _shot(page, "status_page")
