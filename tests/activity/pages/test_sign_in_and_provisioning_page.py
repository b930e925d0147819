"""The sign-in and provisioning page (D32): an admin reads the customer's SCIM settings and its
audit sinks there (whether a token is set and since when; a sink's receiver host, format and last
delivery), never a token; a developer or a viewer does not reach it."""
from __future__ import annotations

from datetime import datetime

from app.accounts import scim
from app.activity.audit_models import AuditSink
from app.extensions import db
from app.plumbing import crypto

SINK_TOKEN = "hec-token-5b8e0d61c2"
SINK_URL = "https://siem.acme.example/services/collector/event?channel=url-borne-credential-4417"


def _setup(account) -> str:
    with db.connection_context():
        token = scim.issue_token(account.id)
        AuditSink.create(id="snk_page", customer_id=account.id, url=SINK_URL,
                         token_encrypted=crypto.encrypt_secret(SINK_TOKEN), format="splunk_hec",
                         created_at=datetime(2031, 6, 1, 9, 0), delivered=1200, failures=3, last_status=503,
                         next_attempt_at=datetime(2031, 6, 1, 9, 5))
    return token


def test_an_admin_sees_scim_and_the_audit_sinks_but_no_token(portal_account, role_clients):
    scim_token = _setup(portal_account)
    clients = role_clients(portal_account)
    for role in ("admin", "owner"):
        page = clients[role].get("/app/single-sign-on")
        text = page.get_data(as_text=True)
        assert page.status_code == 200, role
        assert "Sign-in and provisioning" in text
        assert "A SCIM token is set since" in text and "No SCIM token is set" not in text
        assert "siem.acme.example" in text and "splunk_hec" in text and "1200" in text
        assert "failing (3 in a row, last answer\n          503)" in text
        for secret in (scim_token, scim_token[len(scim.TOKEN_PREFIX):], scim.digest(scim_token), SINK_TOKEN,
                       "url-borne-credential-4417"):
            assert secret not in text, (role, secret)
        with db.connection_context():
            assert AuditSink.get_by_id("snk_page").token_encrypted not in text
    for role in ("developer", "viewer"):
        assert clients[role].get("/app/single-sign-on").status_code == 403, role


def test_without_scim_or_sinks_the_page_says_so(portal_account, role_clients):
    text = role_clients(portal_account)["admin"].get("/app/single-sign-on").get_data(as_text=True)
    assert "No SCIM token is set" in text and "The activity log is not pushed anywhere" in text
    assert "Single sign-on is not set up" in text
