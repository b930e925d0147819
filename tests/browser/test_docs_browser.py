"""The API's documentation page in a real browser, under its Content-Security-Policy."""
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.processes]  # a real Chromium process


def test_docs_page_renders_every_operation_under_its_csp(page, served_app):
    problems = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    response = page.goto(f"{served_app.url}/api/docs")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    page.get_by_text("Create a scan").first.wait_for(timeout=15000)
    for summary in ("Read a scan", "Create a bulk batch", "Read a bulk batch"):
        assert page.get_by_text(summary).first.is_visible()
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems
