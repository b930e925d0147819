"""The portal's sources page (D30): each source's health and quarantine, escaped, the status page
linked; login required. And the metrics per source (zeros, not gaps)."""
from __future__ import annotations

from app.extensions import db
from app.plumbing.models import utcnow
from app.sources import health
from tests.portal.helpers import login

PAGE = "/app/sources"


def seed():
    health.forget_cache()
    with db.connection_context(), db.atomic():
        health.record_answers([("gravatar", "<b>Grav</b>", "error", 100)] * 20
                              + [("github", "GitHub", "found", 100)] * 3, utcnow())
    with db.connection_context():
        health.evaluate()


def test_the_sources_page_shows_health_and_quarantine(client, portal_account):
    seed()
    assert client.get(PAGE).status_code == 302  # login first
    login(client)
    page = client.get(PAGE)
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    row = html[html.index('data-source="gravatar"'):]
    row = row[:row.index("</tr>")]
    assert "down" in row and "quarantined" in row and "0 %" in row
    assert "&lt;b&gt;Grav&lt;/b&gt;" in html and "<b>Grav</b>" not in html
    github = html[html.index('data-source="github"'):]
    assert "healthy" in github[:github.index("</tr>")]
    assert 'href="/status"' in html


def test_metrics_per_source_start_at_zero_and_say_the_status(client):
    seed()
    lines = client.get("/metrics").get_data(as_text=True)
    assert 'scan_api_source_status{source="gravatar",status="down"} 1.0' in lines
    assert 'scan_api_source_status{source="gravatar",status="healthy"} 0.0' in lines
    assert 'scan_api_source_quarantined{source="gravatar"} 1.0' in lines
    assert 'scan_api_source_probes_total{outcome="wrong",source="github"} 0.0' in lines
