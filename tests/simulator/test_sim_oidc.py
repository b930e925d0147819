"""The simulator's stand-in OpenID provider (``simulator.oidc``): discovery and JWKS, the checks of
an authorization request (client, redirect URI, state, nonce, PKCE S256) and of the token request
(client secret, code once, redirect URI, verifier), and the signed ID token's claims."""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from simulator.app import create_sim_app

CLIENT, SECRET = "portal", "s3cret"
CALLBACK = "http://portal.test/app/login/sso/callback"
ISSUER = "http://localhost/_sim/oidc"


@pytest.fixture
def client():
    app = create_sim_app({"SIM_OIDC_CLIENTS": json.dumps({CLIENT: {"secret": SECRET, "redirect_uris": [CALLBACK]}})})
    return app.test_client()


def pkce():
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def authorize_params(challenge, **changes):
    params = {"response_type": "code", "client_id": CLIENT, "redirect_uri": CALLBACK, "scope": "openid email",
              "state": "st-1", "nonce": "n-1", "code_challenge": challenge, "code_challenge_method": "S256"}
    params.update(changes)
    return {k: v for k, v in params.items() if v is not None}


def answer_of(response) -> dict:
    assert response.status_code == 302, response.get_data(as_text=True)
    location = response.headers["Location"]
    assert location.startswith(CALLBACK + "?")
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def code_for(client, user="jane", **changes):
    verifier, challenge = pkce()
    answer = answer_of(client.get("/_sim/oidc/authorize", query_string=authorize_params(challenge, sim_user=user,
                                                                                        **changes)))
    return answer, verifier


def token_request(client, code, verifier, secret=SECRET, redirect_uri=CALLBACK):
    auth = base64.b64encode(f"{CLIENT}:{secret}".encode()).decode()
    return client.post("/_sim/oidc/token", headers={"Authorization": f"Basic {auth}"}, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier})


def test_discovery_names_the_endpoints_under_the_issuer_and_the_jwks_has_a_public_key(client):
    found = client.get("/_sim/oidc/.well-known/openid-configuration").get_json()
    assert found["issuer"] == ISSUER and found["token_endpoint"] == f"{ISSUER}/token"
    assert found["code_challenge_methods_supported"] == ["S256"]
    keys = client.get("/_sim/oidc/jwks").get_json()["keys"]
    assert len(keys) == 1 and keys[0]["kty"] == "RSA" and "d" not in keys[0] and keys[0]["kid"] == "sim-oidc-1"


def test_the_page_offers_the_demo_users_and_the_login_hints_email(client):
    _, challenge = pkce()
    page = client.get("/_sim/oidc/authorize", query_string=authorize_params(challenge, login_hint="Kim@SSO.example"))
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and "jane@sso.example" in text and "kim@sso.example" in text
    # each user's form carries the request on, so that picking one is the same request
    assert text.count('name="code_challenge" value="' + challenge) == text.count("<form") == 5
    assert 'name="sim_user" value="kim@sso.example"' in text


def test_a_code_gives_a_signed_id_token_with_the_claims(client):
    answer, verifier = code_for(client, "sam")
    assert answer["state"] == "st-1"
    token = token_request(client, answer["code"], verifier)
    assert token.status_code == 200 and token.headers["Cache-Control"] == "no-store"
    keys = KeySet.import_key_set(client.get("/_sim/oidc/jwks").get_json())
    claims = jwt.decode(token.get_json()["id_token"], keys, algorithms=["RS256"]).claims
    assert claims["iss"] == ISSUER and claims["aud"] == CLIENT and claims["nonce"] == "n-1"
    assert claims["email"] == "sam@sso.example" and claims["email_verified"] is True
    assert claims["groups"] == ["scan-devs"] and 0 < claims["exp"] - time.time() <= 300
    assert abs(claims["iat"] - time.time()) < 5


@pytest.mark.parametrize("change", [{"client_id": "someone-else"}, {"redirect_uri": "http://evil.test/cb"}])
def test_an_unknown_client_or_redirect_uri_is_answered_here_never_redirected(client, change):
    _, challenge = pkce()
    answer = client.get("/_sim/oidc/authorize", query_string=authorize_params(challenge, sim_user="jane", **change))
    assert answer.status_code == 400 and "Location" not in answer.headers


@pytest.mark.parametrize("change, problem", [
    ({"state": None}, "state is required"),
    ({"nonce": None}, "nonce is required"),
    ({"code_challenge": None}, "code_challenge is required"),
    ({"code_challenge_method": "plain"}, "code_challenge_method must be S256"),
    ({"scope": "email"}, "scope must include openid"),
    ({"response_type": "token"}, "response_type must be code"),
])
def test_a_request_without_state_nonce_or_s256_goes_back_with_an_error_and_no_code(client, change, problem):
    _, challenge = pkce()
    answer = answer_of(client.get("/_sim/oidc/authorize",
                                  query_string=authorize_params(challenge, sim_user="jane", **change)))
    assert answer["error"] == "invalid_request" and answer["error_description"] == problem and "code" not in answer


def test_the_token_request_checks_the_secret_the_verifier_the_redirect_uri_and_uses_a_code_once(client):
    answer, verifier = code_for(client)
    assert token_request(client, answer["code"], verifier, secret="wrong").status_code == 401
    answer, verifier = code_for(client)
    refused = token_request(client, answer["code"], pkce()[0])
    assert refused.status_code == 400 and refused.get_json()["error"] == "invalid_grant"
    assert token_request(client, answer["code"], verifier).status_code == 400  # spent by the refusal
    answer, verifier = code_for(client)
    assert token_request(client, answer["code"], verifier, redirect_uri=CALLBACK + "x").status_code == 400
    answer, verifier = code_for(client)
    assert token_request(client, answer["code"], verifier).status_code == 200
    assert token_request(client, answer["code"], verifier).get_json()["error"] == "invalid_grant"


def test_clients_can_be_registered_at_run_time(client):
    made = client.post("/_sim/oidc/clients/qa", json={"secret": "x", "redirect_uris": [CALLBACK]})
    assert made.status_code == 201
    assert client.post("/_sim/oidc/clients/qa", json={"secret": "x"}).status_code == 400
    _, challenge = pkce()
    answer = answer_of(client.get("/_sim/oidc/authorize",
                                  query_string=authorize_params(challenge, client_id="qa", sim_user="val")))
    assert answer["code"]
