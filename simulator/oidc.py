"""A stand-in OpenID Connect provider, for development and QA only (never for production).

It lets ``make run`` and tests sign in to the portal by single sign-on (D32) without a real
identity provider. Its issuer is ``<simulator URL>/_sim/oidc``, as the request reached it:

- ``GET /_sim/oidc/.well-known/openid-configuration``: the discovery document.
- ``GET /_sim/oidc/jwks``: the public key ID tokens are signed with (RS256). The key pair is made
  in memory at the first use and lost when the simulator stops: a provider's answers from an
  earlier run no longer verify, as after a real provider's key rotation.
- ``GET /_sim/oidc/authorize``: the authorization code flow with PKCE. The request must name a
  known client, one of its redirect URIs exactly, ``response_type=code``, scope ``openid``, a
  ``state``, a ``nonce`` and an S256 ``code_challenge``. An unknown client or redirect URI is
  answered here (400, never redirected); anything else wrong goes back to the client as
  ``error=invalid_request`` with its ``state``. It shows a page with the demo users to pick
  (``DEMO_USERS``, and the ``login_hint``'s e-mail, verified, when it is another); with
  ``sim_user=<name or e-mail>`` it signs that user in at once (scenarios, tests). No password:
  whoever reaches the page is whoever they pick.
- ``POST /_sim/oidc/token``: a code (once, within ``CODE_LIFETIME`` seconds) for an ID token, the
  client authenticated by ``client_secret_basic`` or ``client_secret_post``, the ``redirect_uri``
  the same as at the authorization and the ``code_verifier`` the one of the challenge. The ID
  token (signed by joserfc) has ``iss``, ``sub``, ``aud``, ``exp``, ``iat``, ``nonce``,
  ``email``, ``email_verified``, ``name`` and ``groups``.
- ``POST /_sim/oidc/clients/<client_id>`` ``{"secret", "redirect_uris": [...]}``: registers (or
  replaces) a client, for tests and scenarios; ``SIM_OIDC_CLIENTS`` (JSON ``{client_id:
  {"secret", "redirect_uris"}}``, from the settings or the environment) registers clients at start
  (``make run``'s demo SSO customer).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import unquote_plus, urlencode

from flask import Blueprint, current_app, jsonify, redirect, render_template_string, request
from joserfc import jwt
from joserfc.jwk import RSAKey

PREFIX = "/_sim/oidc"
CODE_LIFETIME = 60  # seconds from the redirect back to the token request
ID_TOKEN_LIFETIME = 300
KEY_ID = "sim-oidc-1"

# The people the page offers. ``groups`` is the claim a customer's --role-claim can map
# (``make run``'s demo SSO customer: scan-admins -> admin, scan-devs -> developer).
DEMO_USERS = {
    "jane": {"email": "jane@sso.example", "email_verified": True, "name": "Jane (admin)",
             "groups": ["scan-admins"]},
    "sam": {"email": "sam@sso.example", "email_verified": True, "name": "Sam (developer)",
            "groups": ["scan-devs"]},
    "val": {"email": "val@sso.example", "email_verified": True, "name": "Val (viewer)", "groups": []},
    "una": {"email": "una@sso.example", "email_verified": False, "name": "Una (e-mail not verified)",
            "groups": []},
}

oidc_bp = Blueprint("sim_oidc", __name__, url_prefix=PREFIX)


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str
    user: dict
    expires: float


@dataclass
class OidcState:
    """One simulator's provider: its clients, its key (made at the first use) and its codes."""

    clients: dict = field(default_factory=dict)
    codes: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _key: RSAKey | None = None

    def key(self) -> RSAKey:
        with self.lock:
            if self._key is None:
                self._key = RSAKey.generate_key(2048, parameters={"kid": KEY_ID, "use": "sig", "alg": "RS256"},
                                                private=True)
            return self._key


def init_app(app) -> None:
    raw = app.config.get("SIM_OIDC_CLIENTS") or os.environ.get("SIM_OIDC_CLIENTS") or "{}"
    clients = json.loads(raw) if isinstance(raw, str) else dict(raw)
    state = OidcState()
    for client_id, client in clients.items():
        state.clients[client_id] = _client(client)
    app.extensions["sim_oidc"] = state


def _client(body) -> dict:
    if not isinstance(body, dict) or not isinstance(body.get("secret"), str) or not body["secret"]:
        raise ValueError("a client needs a non-empty 'secret'")
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) and u for u in uris):
        raise ValueError("a client needs 'redirect_uris', a non-empty list of URLs")
    return {"secret": body["secret"], "redirect_uris": list(uris)}


def _state() -> OidcState:
    return current_app.extensions["sim_oidc"]


def issuer() -> str:
    return request.host_url.rstrip("/") + PREFIX


def _error(status: int, code: str, message: str):
    return jsonify({"error": code, "error_description": message}), status


@oidc_bp.get("/.well-known/openid-configuration")
def discovery():
    base = issuer()
    return jsonify({
        "issuer": base,
        "authorization_endpoint": f"{base}/authorize",
        "token_endpoint": f"{base}/token",
        "jwks_uri": f"{base}/jwks",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid", "email", "profile"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
        "claims_supported": ["iss", "sub", "aud", "exp", "iat", "nonce", "email", "email_verified", "name",
                             "groups"],
    })


@oidc_bp.get("/jwks")
def jwks():
    return jsonify({"keys": [_state().key().as_dict(private=False)]})


@oidc_bp.post("/clients/<client_id>")
def register_client(client_id: str):
    try:
        client = _client(request.get_json(silent=True))
    except ValueError as exc:
        return _error(400, "invalid_client_metadata", str(exc))
    state = _state()
    with state.lock:
        created = client_id not in state.clients
        state.clients[client_id] = client
    return jsonify({"client_id": client_id, "redirect_uris": client["redirect_uris"]}), 201 if created else 200


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Simulated sign-in</title></head>
<body style="font-family: sans-serif; max-width: 36em; margin: 3em auto">
<h1>Simulated identity provider</h1>
<p>A stand-in for a customer's OpenID provider (development and QA only). Sign in to
<b>{{ client_id }}</b> as:</p>
{% for name, user in users %}
<form method="post" action="{{ action }}" style="margin: .5em 0">
  {% for key, value in params %}<input type="hidden" name="{{ key }}" value="{{ value }}">{% endfor %}
  <button type="submit" name="sim_user" value="{{ name }}">{{ user.email }}</button> {{ user.name }}
</form>
{% endfor %}
</body></html>
"""


@oidc_bp.route("/authorize", methods=["GET", "POST"])
def authorize():
    params = request.values.to_dict()
    client = _state().clients.get(params.get("client_id", ""))
    redirect_uri = params.get("redirect_uri", "")
    if client is None:
        return _error(400, "invalid_client", "unknown client_id")
    if redirect_uri not in client["redirect_uris"]:
        return _error(400, "invalid_request", "redirect_uri is not one of the client's")
    problem = _request_problem(params)
    if problem:
        return _back(redirect_uri, params.get("state"), error="invalid_request", error_description=problem)
    choices = _choices(params.get("login_hint"))
    picked = params.get("sim_user")
    if not picked:
        shown = [(k, v) for k, v in params.items() if k != "sim_user"]
        return render_template_string(_PAGE, client_id=params["client_id"], users=list(choices.items()),
                                      params=shown, action=f"{PREFIX}/authorize")
    user = choices.get(picked) or next((u for u in choices.values() if u["email"] == picked.lower()), None)
    if user is None:
        return _back(redirect_uri, params["state"], error="access_denied", error_description="unknown sim_user")
    code = secrets.token_urlsafe(24)
    state = _state()
    with state.lock:
        now = time.time()
        for old in [c for c, g in state.codes.items() if g.expires < now]:
            del state.codes[old]
        state.codes[code] = _Grant(params["client_id"], redirect_uri, params["code_challenge"], params["nonce"],
                                   user, now + CODE_LIFETIME)
    return _back(redirect_uri, params["state"], code=code)


def _request_problem(params: dict) -> str | None:
    if params.get("response_type") != "code":
        return "response_type must be code"
    if "openid" not in params.get("scope", "").split():
        return "scope must include openid"
    for name in ("state", "nonce", "code_challenge"):
        if not params.get(name):
            return f"{name} is required"
    if params.get("code_challenge_method") != "S256":
        return "code_challenge_method must be S256"
    return None


def _choices(login_hint: str | None) -> dict:
    choices = dict(DEMO_USERS)
    hint = (login_hint or "").strip().lower()
    if "@" in hint and hint not in {u["email"] for u in choices.values()}:
        choices = {hint: {"email": hint, "email_verified": True, "name": "the e-mail typed", "groups": []},
                   **choices}
    return choices


def _back(redirect_uri: str, state: str | None, **answer):
    if state:
        answer["state"] = state
    separator = "&" if "?" in redirect_uri else "?"
    return redirect(f"{redirect_uri}{separator}{urlencode(answer)}", code=302)


@oidc_bp.post("/token")
def token():
    client_id, secret = _client_credentials()
    state = _state()
    client = state.clients.get(client_id or "")
    if client is None or not hmac.compare_digest((secret or "").encode(), client["secret"].encode()):
        return _error(401, "invalid_client", "client authentication failed")
    form = request.form
    if form.get("grant_type") != "authorization_code":
        return _error(400, "unsupported_grant_type", "only authorization_code")
    with state.lock:
        grant = state.codes.pop(form.get("code", ""), None)  # once, whatever follows
    if grant is None or grant.expires < time.time() or grant.client_id != client_id:
        return _error(400, "invalid_grant", "unknown, used or expired code")
    if form.get("redirect_uri") != grant.redirect_uri:
        return _error(400, "invalid_grant", "redirect_uri differs from the authorization's")
    verifier = form.get("code_verifier", "")
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    if not verifier or not hmac.compare_digest(challenge.encode(), grant.challenge.encode()):
        return _error(400, "invalid_grant", "code_verifier does not match the code_challenge")
    now = int(time.time())
    user = grant.user
    claims = {"iss": issuer(), "sub": "sim-" + hashlib.sha256(user["email"].encode()).hexdigest()[:16],
              "aud": client_id, "exp": now + ID_TOKEN_LIFETIME, "iat": now, "nonce": grant.nonce,
              "email": user["email"], "email_verified": user["email_verified"], "name": user["name"],
              "groups": user["groups"]}
    id_token = jwt.encode({"alg": "RS256", "kid": KEY_ID}, claims, state.key())
    response = jsonify({"access_token": secrets.token_urlsafe(24), "token_type": "Bearer",
                        "expires_in": ID_TOKEN_LIFETIME, "scope": "openid email profile", "id_token": id_token})
    response.headers["Cache-Control"] = "no-store"
    return response


def _client_credentials() -> tuple[str | None, str | None]:
    """``client_secret_basic`` (id and secret form-encoded, as RFC 6749 section 2.3.1 says) or ``client_secret_post``."""
    auth = request.authorization
    if auth is not None and auth.type == "basic":
        return unquote_plus(auth.username or ""), unquote_plus(auth.password or "")
    return request.form.get("client_id"), request.form.get("client_secret")
