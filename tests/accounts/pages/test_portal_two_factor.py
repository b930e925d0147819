"""Two-factor portal login (D21): enrolment with a server-drawn QR code, the code step after
the password (no session before it), wrong and reused codes, throttling, recovery codes once
each, and the customer setting that requires it."""
from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta

import pyotp
from freezegun import freeze_time

from app.accounts import login_throttle
from app.accounts.models import Customer, PortalUser
from app.extensions import db
from tests.portal.helpers import csrf, login
from tests.portal.test_portal_security import cli

NOW = datetime(2026, 11, 22, 9, 0, 0)
SECRET_RE = re.compile(r'<code id="totp-secret">([A-Z2-7]+)</code>')
RECOVERY_RE = re.compile(r"<li><code>([a-z0-9]{5}-[a-z0-9]{5})</code></li>")


def code(secret: str, moment: datetime) -> str:
    return pyotp.TOTP(secret).at(moment.replace(tzinfo=UTC))


def enrol(client, moment: datetime) -> tuple[str, list[str]]:
    page = client.get("/app/account/two-factor").get_data(as_text=True)
    assert "<svg" in page  # the QR code, drawn by the server
    secret = SECRET_RE.search(page).group(1)
    done = client.post("/app/account/two-factor/confirm",
                       data={"csrf_token": csrf(client, "/app/account/two-factor"), "code": code(secret, moment)})
    assert done.status_code == 200, done.get_data(as_text=True)[:500]
    recovery = RECOVERY_RE.findall(done.get_data(as_text=True))
    assert len(recovery) == 10
    return secret, recovery


def logout(client):
    client.post("/app/logout", data={"csrf_token": csrf(client, "/app/api-keys")})


def send_code(client, value):
    return client.post("/app/login/code", data={"csrf_token": csrf(client, "/app/login/code"), "code": value})


def test_enrol_then_log_in_with_a_code_and_no_session_before_it(app, portal_account):
    with freeze_time(NOW) as clock:
        client = app.test_client()
        login(client)
        secret, recovery = enrol(client, NOW)
        page = client.get("/app/account/two-factor").get_data(as_text=True)
        assert "Two-factor login is on" in page and not any(c in page for c in recovery)  # shown once
        logout(client)
        clock.tick(timedelta(seconds=60))
        first = login(client)
        assert first.status_code == 302 and first.headers["Location"].endswith("/app/login/code")
        assert client.get("/app/api-keys").status_code == 302  # between the steps: no session
        assert client.get("/app/login/code").status_code == 200
        wrong = send_code(client, "000000" if code(secret, NOW + timedelta(seconds=60)) != "000000" else "111111")
        assert wrong.status_code == 401 and "wrong or was used" in wrong.get_data(as_text=True)
        done = send_code(client, code(secret, NOW + timedelta(seconds=60)))
        assert done.status_code == 302 and done.headers["Location"].endswith("/app/api-keys")
        assert client.get("/app/api-keys").status_code == 200


def test_a_code_used_once_is_refused_within_its_window(app, portal_account):
    with freeze_time(NOW) as clock:
        client = app.test_client()
        login(client)
        secret, _ = enrol(client, NOW)
        logout(client)
        clock.tick(timedelta(seconds=30))
        used = code(secret, NOW + timedelta(seconds=30))
        login(client)
        assert send_code(client, used).status_code == 302
        logout(client)
        login(client)
        assert send_code(client, used).status_code == 401


def test_the_code_step_expires_and_needs_the_password_again(app, portal_account):
    with freeze_time(NOW) as clock:
        client = app.test_client()
        login(client)
        secret, _ = enrol(client, NOW)
        logout(client)
        login(client)
        clock.tick(timedelta(minutes=6))
        assert client.get("/app/login/code").status_code == 302
        response = client.post("/app/login/code", data={"csrf_token": csrf(client, "/app/login"),
                                                        "code": code(secret, NOW + timedelta(minutes=6))})
        assert response.status_code == 302 and response.headers["Location"].endswith("/app/login")
        assert client.get("/app/api-keys").status_code == 302


def test_codes_are_throttled_like_passwords(app, portal_account):
    with freeze_time(NOW) as clock:
        client = app.test_client()
        login(client)
        secret, _ = enrol(client, NOW)
        logout(client)
        clock.tick(timedelta(seconds=30))
        login(client)
        for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT):
            assert send_code(client, "12345x").status_code == 401
        blocked = send_code(client, code(secret, NOW + timedelta(seconds=30)))
        assert blocked.status_code == 429 and "Retry-After" in blocked.headers
        assert client.get("/app/api-keys").status_code == 302


def test_each_recovery_code_logs_in_once(app, portal_account):
    with freeze_time(NOW):
        client = app.test_client()
        login(client)
        _, recovery = enrol(client, NOW)
        logout(client)
        login(client)
        assert send_code(client, recovery[3]).status_code == 302
        logout(client)
        login(client)
        assert send_code(client, recovery[3]).status_code == 401
        assert send_code(client, recovery[4]).status_code == 302
        assert "Recovery codes left: 8" in client.get("/app/account/two-factor").get_data(as_text=True)


def test_turning_it_off_needs_a_current_code(app, portal_account):
    with freeze_time(NOW) as clock:
        client = app.test_client()
        login(client)
        secret, _ = enrol(client, NOW)
        clock.tick(timedelta(seconds=60))
        token = csrf(client, "/app/account/two-factor")
        refused = client.post("/app/account/two-factor/disable", data={"csrf_token": token, "code": "99999x"})
        assert refused.status_code == 400
        done = client.post("/app/account/two-factor/disable",
                           data={"csrf_token": token, "code": code(secret, NOW + timedelta(seconds=60))})
        assert done.status_code == 302
        with db.connection_context():
            assert PortalUser.get(PortalUser.email == "ops@acme.example").totp_enabled_at is None


def test_a_required_second_factor_sends_users_to_enrol_before_anything_else(app, portal_account):
    with freeze_time(NOW):
        client = app.test_client()
        login(client)
        token = csrf(client, "/app/settings")
        assert client.post("/app/settings", data={"csrf_token": token, "require_2fa": "y",
                                                   "result_retention_days": "90"}).status_code == 302
        with db.connection_context():
            assert Customer.get_by_id(portal_account.id).require_2fa is True
        for path in ("/app/api-keys", "/app/users", "/app/settings"):
            response = client.get(path)
            assert response.status_code == 302 and response.headers["Location"].endswith("/app/account/two-factor")
        page = client.get("/app/account/two-factor").get_data(as_text=True)
        assert "requires two-factor login" in page
        enrol(client, NOW)
        assert client.get("/app/api-keys").status_code == 200
        assert "cannot be turned off" in client.get("/app/account/two-factor").get_data(as_text=True)


def test_the_operator_requires_it_from_the_cli(app, portal_account):
    result = cli(app, "customers", "settings", portal_account.id, "--require-2fa", "on", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["settings"]["require_2fa"] is True
    shown = [line.split() for line in cli(app, "customers", "settings", portal_account.id).output.splitlines()]
    assert ["require", "2fa", "on"] in shown
    client = app.test_client()
    login(client)
    assert client.get("/app/api-keys").headers["Location"].endswith("/app/account/two-factor")
    assert cli(app, "customers", "settings", portal_account.id, "--require-2fa", "off").exit_code == 0
    assert client.get("/app/api-keys").status_code == 200


def test_role_and_two_factor_changes_and_refusals_are_json_log_lines_with_the_user_id_only(app, portal_account,
                                                                                           caplog):
    from app.plumbing.logging_setup import JsonFormatter
    with freeze_time(NOW) as clock, caplog.at_level(logging.INFO):
        client = app.test_client()
        login(client)
        link_page = client.post("/app/users", data={"csrf_token": csrf(client, "/app/users"),
                                                    "email": "dev@acme.example", "role": "viewer"})
        assert link_page.status_code == 200
        with db.connection_context():
            owner = PortalUser.get(PortalUser.email == "ops@acme.example")
            dev = PortalUser.get(PortalUser.email == "dev@acme.example")
        token = csrf(client, "/app/users")
        client.post(f"/app/users/{dev.id}/role", data={f"{dev.id}-csrf_token": token, f"{dev.id}-role": "admin"})
        secret, _ = enrol(client, NOW)
        clock.tick(timedelta(seconds=30))
        client.post("/app/account/two-factor/disable", data={"csrf_token": csrf(client, "/app/account/two-factor"),
                                                             "code": code(secret, NOW + timedelta(seconds=30))})
        client.post(f"/app/users/{dev.id}/state", data={"csrf_token": token, "disabled": "1"})
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records
             if r.name.startswith(("app.accounts", "app.portal"))]
    messages = [line["message"] for line in lines]
    assert any(f"{dev.id} added with role viewer by {owner.id}" in m for m in messages)
    assert any(f"{dev.id} role changed from viewer to admin by {owner.id}" in m for m in messages)
    assert any(f"{owner.id}: two-factor login enabled" in m for m in messages)
    assert any(f"{owner.id}: two-factor login disabled" in m for m in messages)
    assert any(f"{dev.id} disabled by {owner.id}" in m for m in messages)
    assert not any("@" in m for m in messages)  # ids, never e-mail addresses
