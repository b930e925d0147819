"""The owners' users page (D21): add a user with a role and a one-time set-password link shown
once (24 h, single use), change roles, disable users (their sessions end), keep an owner."""
from __future__ import annotations

import re
from datetime import datetime, timedelta

from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import PortalUser
from app.extensions import db
from tests.portal.helpers import PASSWORD, csrf, login

NOW = datetime(2026, 11, 22, 9, 0, 0)
LINK_RE = re.compile(r'<code id="password-link">https?://[^/]+(/app/set-password/[^<]+)</code>')


def user(email: str) -> PortalUser:
    with db.connection_context():
        return PortalUser.get(PortalUser.email == email)


def invite(client, email="dev@acme.example", role="developer"):
    return client.post("/app/users", data={"csrf_token": csrf(client, "/app/users"), "email": email, "role": role})


def set_password(client, path, password="a brand new password"):
    return client.post(path, data={"csrf_token": csrf(client, path), "password": password, "confirm": password})


def test_an_owner_adds_a_user_who_sets_a_password_once_and_logs_in(app, portal_account):
    with freeze_time(NOW):
        owner = app.test_client()
        login(owner)
        added = invite(owner)
        assert added.status_code == 200
        page = added.get_data(as_text=True)
        link = LINK_RE.search(page).group(1)
        assert "shown only now" in page
        assert user("dev@acme.example").role == "developer"
        assert link.split("/")[-1] not in user("dev@acme.example").password_token_digest  # a digest only
        assert link not in owner.get("/app/users").get_data(as_text=True)  # shown once
        newcomer = app.test_client()
        assert newcomer.get(link).status_code == 200
        done = set_password(newcomer, link)
        assert done.status_code == 302 and done.headers["Location"].endswith("/app/login")
        assert newcomer.get(link).status_code == 404  # single use
        assert "not valid" in newcomer.get(link).get_data(as_text=True)
        assert login(newcomer, email="dev@acme.example", password="a brand new password").status_code == 302
        assert "(developer)" in newcomer.get("/app/api-keys").get_data(as_text=True)


def test_a_link_works_for_24_hours_only(app, portal_account):
    with freeze_time(NOW) as clock:
        owner = app.test_client()
        login(owner)
        link = LINK_RE.search(invite(owner).get_data(as_text=True)).group(1)
        clock.tick(timedelta(hours=24, seconds=1))
        newcomer = app.test_client()
        assert newcomer.get(link).status_code == 404
        with db.connection_context():
            before = PortalUser.get(PortalUser.email == "dev@acme.example").password_hash
        assert newcomer.post(link, data={"password": "a brand new password", "confirm": "a brand new password"}
                             ).status_code in (400, 404)
        assert user("dev@acme.example").password_hash == before


def test_the_last_owner_cannot_demote_or_disable_themselves(app, portal_account):
    client = app.test_client()
    login(client)
    me = user("ops@acme.example")
    token = csrf(client, "/app/users")
    demote = client.post(f"/app/users/{me.id}/role", data={f"{me.id}-csrf_token": token, f"{me.id}-role": "admin"})
    assert demote.status_code == 400 and "at least one enabled owner" in demote.get_data(as_text=True)
    disable = client.post(f"/app/users/{me.id}/state", data={"csrf_token": token, "disabled": "1"})
    assert disable.status_code == 400
    me = user("ops@acme.example")
    assert me.role == "owner" and not me.disabled


def test_an_owner_changes_roles_and_disables_a_user_whose_session_ends(app, portal_account):
    owner = app.test_client()
    login(owner)
    link = LINK_RE.search(invite(owner, role="viewer").get_data(as_text=True)).group(1)
    other = app.test_client()
    set_password(other, link)
    login(other, email="dev@acme.example", password="a brand new password")
    dev = user("dev@acme.example")
    token = csrf(owner, "/app/users")
    promoted = owner.post(f"/app/users/{dev.id}/role", data={f"{dev.id}-csrf_token": token, f"{dev.id}-role": "admin"})
    assert promoted.status_code == 302 and user("dev@acme.example").role == "admin"
    assert "(admin)" in other.get("/app/api-keys").get_data(as_text=True)  # in force at once
    assert owner.post(f"/app/users/{dev.id}/state", data={"csrf_token": token, "disabled": "1"}).status_code == 302
    assert user("dev@acme.example").disabled
    assert other.get("/app/api-keys").status_code == 302  # back to the login
    assert login(other, email="dev@acme.example", password="a brand new password").status_code == 401
    assert owner.post(f"/app/users/{dev.id}/state", data={"csrf_token": token, "disabled": "0"}).status_code == 302
    assert not user("dev@acme.example").disabled


def test_another_customers_user_is_not_found(app, portal_account, make_customer):
    stranger_account = make_customer()
    with db.connection_context():
        stranger = admin.create_user(stranger_account.id, "x@other.example", PASSWORD)
    client = app.test_client()
    login(client)
    token = csrf(client, "/app/users")
    assert client.post(f"/app/users/{stranger.id}/state", data={"csrf_token": token, "disabled": "1"}
                       ).status_code == 404
    assert not user("x@other.example").disabled


def test_forms_of_the_users_page_need_their_csrf_token(app, portal_account):
    client = app.test_client()
    login(client)
    assert client.post("/app/users", data={"email": "dev@acme.example", "role": "viewer"}).status_code == 400
    with db.connection_context():
        assert PortalUser.get_or_none(PortalUser.email == "dev@acme.example") is None


def user_row(client, user_id: str):
    return re.search(rf'<tr id="user-{user_id}">.*?</tr>', client.get("/app/users").get_data(as_text=True), re.DOTALL)


def test_the_users_page_marks_a_user_who_has_not_set_a_password_yet(app, portal_account):
    client = app.test_client()
    login(client)
    link = LINK_RE.search(invite(client).get_data(as_text=True)).group(1)
    dev = user("dev@acme.example")
    row = user_row(client, dev.id)
    assert ">invited<" in row.group(0)
    set_password(app.test_client(), link)
    row = user_row(client, dev.id)
    assert ">active<" in row.group(0)


def test_the_users_page_shows_who_scim_made_and_whether_a_scim_token_is_set_never_the_token(app, portal_account):
    from app.accounts import scim
    owner = app.test_client()
    login(owner)
    page = owner.get("/app/users").get_data(as_text=True)
    assert "No SCIM token is set" in page and ">SCIM</span>" not in page
    with db.connection_context():
        token = scim.issue_token(portal_account.id)
        made = scim.create_user(portal_account.id, {"userName": "idp@acme.example"}, "http://x/scim/v2")
    page = owner.get("/app/users").get_data(as_text=True)
    assert "A SCIM token is set since" in page and token not in page and "scim_" not in page
    row = page[page.index(f'id="user-{made["id"]}"'):]
    assert ">SCIM</span>" in row[:row.index("</tr>")]
    owners_row = page[page.index('id="user-'):]
    assert ">SCIM</span>" not in owners_row[:owners_row.index("</tr>")]  # the owner was not made by SCIM
