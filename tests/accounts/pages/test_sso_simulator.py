"""Portal single sign-on (D32) through the simulator's stand-in OpenID provider (``simulator.oidc``,
what ``make run`` and QA use): the served portal and the simulator over real HTTP, a browser's
round followed with ``requests``; and the service's own checks refusing the simulator's ID token
when its nonce or its signature is wrong."""
from __future__ import annotations

import base64
import html
import json
import re
from urllib.parse import urljoin

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import RSAKey

from app.accounts import sso
from app.accounts.models import PortalSession, PortalUser
from app.extensions import db
from tests import oidc_provider as op
from tests.portal.helpers import CSRF_RE

CLIENT_ID = "scan-portal-sim"
SECRET = "sim-client-secret-for-tests"


@pytest.fixture
def sim_sso(served_app, simulator, make_customer):
    """A customer signing in sso.example through the simulator's provider, its client registered
    there with the served portal's callback; groups scan-admins -> admin, scan-devs -> developer."""
    callback = f"{served_app.url}/app/login/sso/callback"
    requests.post(f"{simulator.url}/_sim/oidc/clients/{CLIENT_ID}",
                  json={"secret": SECRET, "redirect_uris": [callback]}, timeout=5).raise_for_status()
    acct = make_customer(tier="business", credits=10)
    with db.connection_context():
        sso.configure(acct.id, issuer=f"{simulator.url}/_sim/oidc", client_id=CLIENT_ID, client_secret=SECRET,
                      domains="sso.example", role_claim="groups", role_map="scan-admins=admin,scan-devs=developer")
    return acct


def to_provider(browser: requests.Session, portal: str, email: str) -> str:
    """The login form with the e-mail alone (the SSO button): the provider's authorization URL."""
    page = browser.get(f"{portal}/app/login", timeout=10)
    token = CSRF_RE.search(page.text).group(1)
    answer = browser.post(f"{portal}/app/login", data={"email": email, "password": "", "sso": "1",
                                                       "csrf_token": token, "next": ""}, timeout=10)
    assert answer.status_code == 200, answer.text[:300]
    return html.unescape(re.search(r'id="sso-continue" href="([^"]+)"', answer.text).group(1))


def pick_at_provider(browser: requests.Session, authorization_url: str, email: str) -> requests.Response:
    """The simulator's page: the button of ``email`` posted, every redirect after it followed."""
    page = browser.get(authorization_url, timeout=10)
    assert page.status_code == 200 and "Simulated identity provider" in page.text
    form = next(f for f in re.findall(r"<form .*?</form>", page.text, re.DOTALL) if f">{email}</button>" in f)
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))
    fields = {k: html.unescape(v) for k, v in fields.items()}
    action = html.unescape(re.search(r'action="([^"]+)"', form).group(1))
    return browser.post(urljoin(authorization_url, action), data=fields, timeout=10)


def test_sign_in_through_the_simulators_provider_end_to_end(served_app, simulator, sim_sso):
    browser = requests.Session()
    url = to_provider(browser, served_app.url, "jane@sso.example")
    assert url.startswith(f"{simulator.url}/_sim/oidc/authorize?")
    signed_in = pick_at_provider(browser, url, "jane@sso.example")
    assert signed_in.status_code == 200 and signed_in.url == f"{served_app.url}/app/api-keys"
    assert "jane@sso.example (admin)" in signed_in.text
    with db.connection_context():
        jane = PortalUser.get(PortalUser.email == "jane@sso.example")
        assert jane.customer_id == sim_sso.id and jane.role == "admin" and jane.provisioned_by == "sso"
        assert PortalSession.select().where(PortalSession.user == jane.id).count() == 1


def test_the_login_hints_email_signs_in_with_the_default_role(served_app, sim_sso):
    browser = requests.Session()
    url = to_provider(browser, served_app.url, "Kim@SSO.example")
    assert pick_at_provider(browser, url, "kim@sso.example").url == f"{served_app.url}/app/api-keys"
    with db.connection_context():
        assert PortalUser.get(PortalUser.email == "kim@sso.example").role == "viewer"


def test_an_unverified_email_at_the_simulator_is_refused(served_app, sim_sso):
    browser = requests.Session()
    url = to_provider(browser, served_app.url, "una@sso.example")
    refused = pick_at_provider(browser, url, "una@sso.example")
    assert refused.status_code == 401 and "Single sign-on did not succeed" in refused.text
    with db.connection_context():
        assert PortalUser.get_or_none(PortalUser.email == "una@sso.example") is None


def simulator_token(app, served_app, sim_sso, user="sam"):
    """A real round up to the provider's token answer: the pending sign-in the portal kept, and the
    token endpoint's answer to the code (as ``sso.finish`` would get it)."""
    with app.test_request_context(base_url=served_app.url), db.connection_context():
        begun = sso.begin(f"{user}@sso.example", f"{served_app.url}/app/login/sso/callback")
    back = requests.get(begun.url + f"&sim_user={user}", allow_redirects=False, timeout=10)
    assert back.status_code == 302
    answer = op.query(back.headers["Location"])
    assert answer["state"] == begun.pending["state"]
    pending = begun.pending
    token = requests.post(f"{sim_sso_issuer(sim_sso)}/token", auth=(CLIENT_ID, SECRET), timeout=10, data={
        "grant_type": "authorization_code", "code": answer["code"], "redirect_uri": pending["redirect_uri"],
        "code_verifier": pending["verifier"]}).json()
    return pending, token


def sim_sso_issuer(acct) -> str:
    with db.connection_context():
        return sso.settings(acct.id).issuer


def test_the_simulators_id_token_passes_the_services_checks(app, served_app, sim_sso):
    pending, token = simulator_token(app, served_app, sim_sso)
    with app.app_context(), db.connection_context():
        claims = sso.check_id_token(sso.settings(sim_sso.id), token, pending["nonce"])
    assert claims["email"] == "sam@sso.example" and claims["aud"] == CLIENT_ID
    assert claims["iss"] == sim_sso_issuer(sim_sso) and claims["email_verified"] is True


def test_a_wrong_nonce_is_refused(app, served_app, sim_sso):
    pending, token = simulator_token(app, served_app, sim_sso)
    with app.app_context(), db.connection_context(), pytest.raises(sso.SsoRefused) as refused:
        sso.check_id_token(sso.settings(sim_sso.id), token, "another-sign-ins-nonce")
    assert refused.value.reason == "id_token_nonce"


def test_a_token_with_a_wrong_signature_is_refused(app, served_app, sim_sso):
    pending, token = simulator_token(app, served_app, sim_sso)
    header, payload, signature = token["id_token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    # the simulator's signature over claims changed (another e-mail), and all its claims signed by
    # a key of the same kid that the simulator's JWKS does not hold
    changed = base64.urlsafe_b64encode(json.dumps(dict(claims, email="jane@sso.example")).encode()).rstrip(b"=")
    forged_key = RSAKey.generate_key(2048, parameters={"kid": "sim-oidc-1"}, private=True)
    forgeries = [f"{header}.{changed.decode()}.{signature}",
                 jwt.encode({"alg": "RS256", "kid": "sim-oidc-1"}, claims, forged_key)]
    with app.app_context(), db.connection_context():
        found = sso.settings(sim_sso.id)
        for forged in forgeries:
            with pytest.raises(sso.SsoRefused) as refused:
                sso.check_id_token(found, dict(token, id_token=forged), pending["nonce"])
            assert refused.value.reason == "id_token_bad_signature", refused.value.reason
        assert sso.check_id_token(found, token, pending["nonce"])["email"] == "sam@sso.example"
