"""Portal sign-in through a customer's OpenID provider (D32), against a real, independent one
(npm ``oidc-provider``, tests/oidc_provider.py): the login form's redirect, PKCE, state and nonce,
the ID token checked by its issuer's JWKS, users made and their roles following the provider, and
each refusal."""
from __future__ import annotations

import html
import re

import pytest

from app.accounts import sso
from app.accounts.models import PortalSession, PortalUser
from app.extensions import db
from tests import oidc_provider as op
from tests.portal.helpers import CSRF_RE, PASSWORD, csrf, login

pytestmark = pytest.mark.processes


@pytest.fixture
def sso_account(portal_account, oidc_provider):
    """``portal_account`` (owner ops@acme.example) signing in acme.example through the provider,
    groups scan-admins -> admin, scan-devs -> developer, anything else viewer."""
    with db.connection_context():
        sso.configure(portal_account.id, issuer=oidc_provider.issuer, client_id=op.PORTAL_CLIENT,
                      client_secret=oidc_provider.secrets[op.PORTAL_CLIENT], domains="acme.example",
                      role_claim="groups", role_map="scan-admins=admin,scan-devs=developer")
    return portal_account


def start_sso(client, email, password="", button=False):
    data = {"email": email, "password": password, "csrf_token": csrf(client, "/app/login"), "next": ""}
    if button:
        data["sso"] = "1"
    return client.post("/app/login", data=data)


def provider_url(answer) -> str:
    """Where the portal's answer sends the browser: a page of its own (its CSP's form-action stops a
    form's redirect to another site) that refreshes to the provider, with a link for the same."""
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    text = answer.get_data(as_text=True)
    link = re.search(r'id="sso-continue" href="([^"]+)"', text)
    assert link, text[:500]
    url = html.unescape(link.group(1))
    assert f'<meta http-equiv="refresh" content="0;url={link.group(1)}">' in text
    return url


def sign_in(client, email, account):
    """The whole round: the portal's form, the provider's pages, the callback; the callback's answer."""
    back = op.sign_in_at_provider(provider_url(start_sso(client, email)), account)
    return client.get(op.callback_path(back))


def user(email):
    with db.connection_context():
        return PortalUser.get_or_none(PortalUser.email == email)


def test_an_email_of_an_sso_domain_goes_to_the_provider_with_pkce_state_and_nonce(client, sso_account,
                                                                                  oidc_provider):
    location = provider_url(start_sso(client, "Alice@Acme.example", password="typed anyway"))
    assert location.startswith(oidc_provider.discovery()["authorization_endpoint"])
    params = op.query(location)
    assert params["client_id"] == op.PORTAL_CLIENT and params["response_type"] == "code"
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) >= 43
    assert params["state"] and params["nonce"] and params["redirect_uri"] == op.REDIRECT_URI
    assert "openid" in params["scope"].split()
    # no session before the provider's answer, and no secret of the customer's in the cookie
    with client.session_transaction() as session:
        assert "sid" not in session and session["sso_pending"]["state"] == params["state"]
        assert oidc_provider.secrets[op.PORTAL_CLIENT] not in repr(dict(session))


def test_the_sso_button_sends_the_email_alone(client, sso_account):
    answer = start_sso(client, "dave@acme.example", button=True)
    assert "code_challenge=" in provider_url(answer)


def test_the_first_sign_in_makes_the_user_with_the_mapped_role_and_opens_the_portal(client, sso_account):
    answer = sign_in(client, "alice@acme.example", "alice")
    assert answer.status_code == 302 and answer.headers["Location"].endswith("/app/api-keys")
    made = user("alice@acme.example")
    assert made.customer_id == sso_account.id and made.role == "admin" and made.provisioned_by == "sso"
    assert client.get("/app/api-keys").status_code == 200
    with db.connection_context():
        assert PortalSession.select().where(PortalSession.user == made.id).count() == 1


def test_the_role_follows_the_provider_at_each_sign_in(client, sso_account, app):
    sign_in(client, "alice@acme.example", "alice")
    with db.connection_context():
        PortalUser.update(role="viewer").where(PortalUser.email == "alice@acme.example").execute()
    assert sign_in(app.test_client(), "alice@acme.example", "alice").status_code == 302
    assert user("alice@acme.example").role == "admin"
    sign_in(app.test_client(), "erin@acme.example", "erin")  # a group the map does not name
    assert user("erin@acme.example").role == "viewer"


def test_an_unverified_email_is_refused(client, sso_account):
    answer = sign_in(client, "bob@acme.example", "bob")
    assert answer.status_code == 401
    assert "Single sign-on did not succeed" in answer.get_data(as_text=True)
    assert user("bob@acme.example") is None
    assert client.get("/app/api-keys").status_code == 302  # no session


def test_an_email_of_a_domain_not_configured_is_refused(client, sso_account):
    """The provider vouches for carol@elsewhere.example, a domain this customer does not sign in."""
    answer = sign_in(client, "ops2@acme.example", "carol")
    assert answer.status_code == 401
    assert user("carol@elsewhere.example") is None


def test_a_wrong_state_is_refused(client, sso_account):
    started = start_sso(client, "alice@acme.example")
    back = op.sign_in_at_provider(provider_url(started), "alice")
    forged = back.replace(f"state={op.query(back)['state']}", "state=forged")
    assert client.get(op.callback_path(forged)).status_code == 401
    assert user("alice@acme.example") is None


def test_a_replayed_answer_or_code_is_refused(client, sso_account, app):
    started = start_sso(client, "alice@acme.example")
    with client.session_transaction() as session:
        pending = dict(session["sso_pending"])  # what a thief of the cookie would hold
    back = op.sign_in_at_provider(provider_url(started), "alice")
    assert client.get(op.callback_path(back)).status_code == 302
    # the same answer again in the same browser: the pending sign-in was spent
    assert client.get(op.callback_path(back)).status_code == 401
    # the same answer with the copied pending sign-in (state, nonce, verifier all right): the
    # provider refuses a code used once
    thief = app.test_client()
    with thief.session_transaction() as session:
        session["sso_pending"] = pending
    assert thief.get(op.callback_path(back)).status_code == 401
    with app.app_context(), db.connection_context(), pytest.raises(sso.SsoRefused) as refused:
        sso.finish(pending, op.query(back))
    assert refused.value.reason == "code"


def test_an_unknown_email_without_sso_asks_for_the_password(client, sso_account):
    answer = start_sso(client, "someone@other.example", button=True)
    assert answer.status_code == 400
    assert "No single sign-on is set up for this e-mail" in answer.get_data(as_text=True)
    data = {"email": "someone@other.example", "password": "", "csrf_token": csrf(client, "/app/login")}
    assert client.post("/app/login", data=data).status_code == 400


def test_password_sign_in_is_unchanged_for_other_users(client, portal_account, oidc_provider):
    """A customer without single sign-on: its owner's password works as before."""
    assert login(client).status_code == 302


def test_required_sso_refuses_password_sign_in_but_the_operators_door_opens_it(client, sso_account, app):
    with db.connection_context():
        settings = sso.settings(sso_account.id)
        sso.configure(sso_account.id, issuer=settings.issuer, client_id=op.PORTAL_CLIENT,
                      client_secret=sso_secret(app), domains="acme.example,acme.test", required=True)
    # ops@acme.example is of an SSO domain: its form goes to the provider, password or not
    assert "code_challenge" in provider_url(login(client))
    with db.connection_context():
        from app.accounts import admin
        admin.create_user(sso_account.id, "contractor@outside.example", PASSWORD, role="developer")
    refused = login(client, email="contractor@outside.example")
    assert refused.status_code == 403
    assert "single sign-on only" in refused.get_data(as_text=True)
    with db.connection_context():
        sso.emergency_password_login("contractor@outside.example", PASSWORD + "!")
    assert login(app.test_client(), email="contractor@outside.example", password=PASSWORD + "!").status_code == 302


def sso_secret(app):
    from app.plumbing.crypto import decrypt_secret
    with app.app_context(), db.connection_context():
        return decrypt_secret(sso.settings_or_none(PortalUser.select().first().customer_id).client_secret_enc)


def test_the_login_page_shows_the_sso_button(client):
    page = client.get("/app/login").get_data(as_text=True)
    assert 'name="sso"' in page and "Sign in with SSO" in page
    assert CSRF_RE.search(page)


def test_admins_see_the_settings_without_the_secret_and_owners_see_who_sso_made(client, sso_account, app,
                                                                                 oidc_provider, role_clients):
    sign_in(client, "dave@acme.example", "dave")
    clients = role_clients(sso_account)
    page = clients["admin"].get("/app/single-sign-on")
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and oidc_provider.issuer in text and op.PORTAL_CLIENT in text
    assert "never shown again" in text and oidc_provider.secrets[op.PORTAL_CLIENT] not in text
    assert "http://localhost/app/login/sso/callback" in text and "acme.example" in text
    assert clients["developer"].get("/app/single-sign-on").status_code == 403
    users_page = clients["owner"].get("/app/users").get_data(as_text=True)
    row = users_page[users_page.index("dave@acme.example"):][:600]
    assert ">SSO</span>" in row and "invited" not in row


def test_a_user_signed_in_by_sso_is_not_sent_to_enrol_a_second_factor(client, sso_account):
    """The customer requires two-factor login; its provider owns the factors of its domains' users,
    while a user outside them (a password user) still enrols first."""
    with db.connection_context():
        from app.accounts import admin, two_factor
        two_factor.set_required(sso_account.id, True, by="test")
        admin.create_user(sso_account.id, "contractor@outside.example", PASSWORD, role="developer")
    sign_in(client, "alice@acme.example", "alice")
    assert client.get("/app/api-keys").status_code == 200
    contractor = client.application.test_client()
    assert login(contractor, email="contractor@outside.example").status_code == 302
    assert contractor.get("/app/api-keys").headers["Location"].endswith("/app/account/two-factor")
