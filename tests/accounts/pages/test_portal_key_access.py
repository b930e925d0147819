"""The key page's access card (D21): scopes, expiry and allowlist shown; a CSRF-protected form narrows
the scopes (never widens), makes the expiry earlier (never later) and edits the allowlist; a refused
change changes nothing."""
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.accounts import access, admin
from app.accounts.models import ApiKey
from app.extensions import db
from tests.portal.helpers import csrf, login

FROZEN = "2026-11-21 12:00:00"


def _restricted(account, **rules) -> ApiKey:
    with db.connection_context():
        return admin.issue_key(account.id, "restricted", **rules)[0]


def _access(key_id: str) -> tuple:
    with db.connection_context():
        key = ApiKey.get_by_id(key_id)
    return key.scopes, key.expires_at, key.allowed_ips


def _save(client, key_id, **fields):
    page = f"/app/api-keys/{key_id}"
    data = {"csrf_token": csrf(client, page), **fields}
    return client.post(f"{page}/access", data=data)


def test_the_key_page_shows_scopes_expiry_and_allowlist(client, portal_account):
    with freeze_time(FROZEN):
        key = _restricted(portal_account, scopes="scans:read,webhooks", expires_in_days=30,
                          allowed_ips="203.0.113.0/24")
        login(client)
        html = client.get(f"/app/api-keys/{key.id}").get_data(as_text=True)
        plain = client.get(f"/app/api-keys/{portal_account.key.id}").get_data(as_text=True)
    assert "<code>scans:read</code>" in html and "<code>webhooks</code>" in html
    assert "<code>scans:write</code>" not in html  # neither shown as the key's nor offered
    assert access.SCOPE_WORDS["scans:read"] in html
    assert "2026-12-21 12:00" in html and "<code>203.0.113.0/24</code>" in html
    assert 'id="key-expiry">never' in plain and 'id="key-allowlist">anywhere' in plain


def test_the_keys_list_shows_each_keys_expiry_and_an_expired_one_as_such(client, portal_account):
    with freeze_time(FROZEN) as frozen:
        key = _restricted(portal_account, expires_in_days=1)
        frozen.move_to("2026-11-22 12:00:00")
        login(client)
        html = client.get("/app/api-keys").get_data(as_text=True)
    row = html[html.index(key.id):]
    row = row[:row.index("</tr>")]
    assert "2026-11-22 12:00" in row and "expired" in row
    assert ">active<" in html  # the fixture's key, which never expires


def test_narrowing_an_earlier_expiry_and_a_new_allowlist_are_saved(client, portal_account):
    with freeze_time(FROZEN):
        key = _restricted(portal_account, scopes="scans:read,scans:write,webhooks", expires_in_days=30)
        login(client)
        response = _save(client, key.id, scopes=["scans:read", "webhooks"], expires_on="2026-12-01",
                         allowed_ips="203.0.113.0/24\n2001:db8::/32")
        assert response.status_code == 302
        assert _access(key.id) == (["scans:read", "webhooks"], datetime(2026, 12, 1),
                                   ["203.0.113.0/24", "2001:db8::/32"])
        # The form sent back as the page fills it changes nothing (the expiry's own day keeps its time).
        again = _save(client, key.id, scopes=["scans:read", "webhooks"], expires_on="2026-12-01",
                      allowed_ips="203.0.113.0/24\n2001:db8::/32")
        assert again.status_code == 302 and _access(key.id)[1] == datetime(2026, 12, 1)
        # An emptied allowlist would widen the key's access by mistake: only "none" removes it.
        emptied = _save(client, key.id, scopes=["webhooks"], expires_on="2026-12-01", allowed_ips="")
        assert emptied.status_code == 400 and "the allowlist is empty" in emptied.get_data(as_text=True)
        assert _access(key.id)[2] == ["203.0.113.0/24", "2001:db8::/32"]
        assert _save(client, key.id, scopes=["webhooks"], expires_on="2026-12-01",
                     allowed_ips="none").status_code == 302
        assert _access(key.id) == (["webhooks"], datetime(2026, 12, 1), None)
        # The page fills the form of a key without an allowlist with "none": sent back, it changes nothing.
        assert "\nnone</textarea>" in client.get(f"/app/api-keys/{key.id}").get_data(as_text=True)


@pytest.mark.parametrize("fields, message", [
    ({"scopes": ["scans:read", "scans:erase"], "expires_on": "2026-12-01"}, "can only be narrowed"),
    ({"scopes": ["scans:read"], "expires_on": "2026-12-22"}, "earlier, not later"),
    ({"scopes": ["scans:read"], "expires_on": ""}, "earlier, not removed"),
    ({"scopes": ["scans:read"], "expires_on": "2026-11-20"}, "in the future"),
    ({"expires_on": "2026-12-01"}, "at least one scope"),
    ({"scopes": ["scans:read"], "expires_on": "2026-12-01", "allowed_ips": "10.0.0.0/33"}, "not an IP address"),
    ({"scopes": ["scans:read"], "expires_on": "2026-12-01", "allowed_ips": "198.51.100.1/24"},
     "did you mean 198.51.100.0/24?"),
])
def test_a_wider_or_later_change_is_refused_and_nothing_changes(client, portal_account, fields, message):
    with freeze_time(FROZEN):
        key = _restricted(portal_account, scopes="scans:read,webhooks", expires_in_days=30,
                          allowed_ips="203.0.113.0/24")
        before = _access(key.id)
        login(client)
        response = _save(client, key.id, **{"allowed_ips": "198.51.100.0/24", **fields})
        assert response.status_code == 400
        assert message in response.get_data(as_text=True)
        assert _access(key.id) == before


def test_the_access_form_needs_csrf_and_the_keys_owner(client, portal_account, make_customer):
    other = make_customer()
    login(client)
    key_id = portal_account.key.id
    refused = client.post(f"/app/api-keys/{key_id}/access", data={"scopes": ["scans:read"]})
    assert refused.status_code == 400 and refused.get_json()["error"] == "csrf_failed"
    token = csrf(client, "/app/api-keys")
    assert client.post(f"/app/api-keys/{other.key.id}/access",
                       data={"csrf_token": token, "scopes": ["scans:read"]}).status_code == 404
    assert _access(key_id)[0] == list(access.SCOPES) and _access(other.key.id)[0] == list(access.SCOPES)
