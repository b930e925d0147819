"""Portal sign-in through a customer's OpenID Connect provider (D32).

An operator sets it up (``customers sso ID ...``): the provider's issuer, the portal's client
at it (id, and a secret kept Fernet-encrypted like webhook secrets, ``crypto.encrypt_secret``,
shown never again), the e-mail domains it signs in (each belongs to one customer at most), the
role a new user gets and, optionally, the ID token's claim whose values map to portal roles.

A sign-in is the authorization code flow with PKCE (S256), ``state`` and ``nonce``, all by
Authlib: the provider's discovery document (``ISSUER/.well-known/openid-configuration``) gives
the endpoints and the JWKS; the ID token's signature is checked against that JWKS and its
``iss`` (the configured issuer), ``aud`` (our client id), ``exp``, ``iat`` and ``nonce``
(ours) by Authlib's ``CodeIDToken``; ``email_verified`` must be true and the e-mail of one of
the customer's domains. The user is made at the first sign-in with the mapped role, and the
role follows the provider at every sign-in after (never leaving the customer without an
enabled owner). With ``required``, password sign-in (and so the TOTP step after it) is refused
for the customer's users (``portal_users.password_login_allowed``), but for one an operator
opened the emergency door to (``users reset-login``).

What a refusal logs is its reason and the customer, never an e-mail, a code or a token.
No flask here: the portal keeps the pending sign-in in its signed session and passes the
provider's answer in.
"""
from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client.sync_app import BaseApp, OAuth2Mixin
from authlib.integrations.base_client.sync_openid import OpenIDMixin
from authlib.integrations.requests_client import OAuth2Session
from joserfc.errors import JoseError
from requests import RequestException

from app.accounts import portal_roles, portal_users
from app.accounts.admin import get_customer
from app.accounts.models import CustomerSso, PortalUser
from app.accounts.statements import sso as sso_store
from app.accounts.statements import users
from app.plumbing import runtime
from app.plumbing.crypto import decrypt_secret, encrypt_secret
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import new_id, utcnow

log = logging.getLogger(__name__)
# Authlib logs the PKCE verifier (and OAuth 1 request tokens) at DEBUG: never, whatever LOG_LEVEL says.
logging.getLogger("authlib").setLevel(logging.INFO)

SCOPE = "openid email profile"
HTTP_TIMEOUT = 10  # seconds for each call to the provider (discovery, JWKS, token)
CLOCK_LEEWAY = 60  # seconds of clock difference allowed on exp and iat
PENDING_LIFETIME = 600  # seconds from the redirect to the provider to its answer
EMERGENCY_HOURS = 24  # users reset-login: password sign-in allowed this long
PROVISIONED_BY_SSO = "sso"
MAX_DOMAINS = 50
_DOMAIN = re.compile(r"(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")


class SsoRefused(Exception):
    """A sign-in the provider's answer does not allow; ``reason`` names the check that failed (for
    logs and tests: no personal data in it)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class NotConfigured(AccountError):
    def __init__(self):
        super().__init__("no single sign-on is set up for this e-mail")


# --- the operator's settings ----------------------------------------------------------------


def _production() -> bool:
    return runtime.config.get("APP_ENV") == "production"


def check_issuer(issuer: str) -> str:
    """An issuer URL: ``https`` (``http`` outside production only, for tests and ``make run``),
    with a host and no query or fragment; kept as given but for a trailing slash."""
    issuer = (issuer or "").strip()
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise AccountError("the issuer must be an https URL without query or fragment")
    if parts.scheme == "http" and _production():
        raise AccountError("the issuer must use https in production")
    if len(issuer) > 2048:
        raise AccountError("the issuer must have at most 2048 characters")
    return issuer.rstrip("/")


def check_domains(text: str) -> list[str]:
    domains = sorted({d.strip().lower().rstrip(".") for d in (text or "").split(",") if d.strip()})
    if not domains:
        raise AccountError("give at least one e-mail domain (--domains a.com[,b.com])")
    if len(domains) > MAX_DOMAINS:
        raise AccountError(f"at most {MAX_DOMAINS} domains")
    for domain in domains:
        if not _DOMAIN.fullmatch(domain):
            raise AccountError(f"{domain[:100]!r} is not an e-mail domain")
    return domains


def check_role_map(text: str | None) -> list[str]:
    """``value=role,...`` as a list of ``value=role`` (each role a portal role)."""
    pairs = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        value, sep, role = item.rpartition("=")
        if not sep or not value.strip():
            raise AccountError("--role-map takes value=role pairs separated by commas")
        portal_roles.check_role(role.strip())
        pairs.append(f"{value.strip()}={role.strip()}")
    return pairs


def configure(customer_id: str, *, issuer: str, client_id: str, client_secret: str, domains: str,
              default_role: str = portal_roles.VIEWER, role_claim: str | None = None,
              role_map: str | None = None, required: bool = False) -> CustomerSso:
    """Set (or replace) the customer's single sign-on; the secret is stored encrypted only."""
    get_customer(customer_id)
    issuer = check_issuer(issuer)
    client_id = (client_id or "").strip()
    if not client_id or len(client_id) > 500:
        raise AccountError("--client-id must have 1 to 500 characters")
    if not client_secret or len(client_secret) > 2000:
        raise AccountError("the client secret (on standard input) must have 1 to 2000 characters")
    found = check_domains(domains)
    portal_roles.check_role(default_role)
    pairs = check_role_map(role_map)
    role_claim = (role_claim or "").strip() or None
    if bool(pairs) != bool(role_claim):
        raise AccountError("--role-claim and --role-map go together")
    with transaction():
        users.lock_customer(customer_id)
        taken = [(c, d) for c, d in sso_store.owners_of(found) if c != customer_id]
        if taken:
            raise AccountError(f"domain {taken[0][1]} signs in another customer already")
        sso_store.put(customer_id, issuer=issuer, client_id=client_id,
                       client_secret_enc=encrypt_secret(client_secret), domains=found,
                       default_role=default_role, role_claim=role_claim, role_map=pairs or None,
                       required=required)
    log.info("single sign-on of %s set (%d domains, required %s)", customer_id, len(found), required)
    return settings(customer_id)


def settings(customer_id: str) -> CustomerSso:
    found = sso_store.get(customer_id)
    if found is None:
        raise AccountError(f"customer {customer_id} has no single sign-on")
    return found


def settings_or_none(customer_id: str) -> CustomerSso | None:
    return sso_store.get(customer_id)


def remove(customer_id: str) -> bool:
    get_customer(customer_id)
    removed = bool(sso_store.delete(customer_id))
    if removed:
        log.info("single sign-on of %s removed", customer_id)
    return removed


def settings_dict(found: CustomerSso) -> dict:
    """What may be shown of the settings: everything but the secret."""
    return {"customer_id": found.customer_id, "issuer": found.issuer, "client_id": found.client_id,
            "client_secret": "set (never shown)", "domains": list(found.domains),
            "default_role": found.default_role, "role_claim": found.role_claim,
            "role_map": list(found.role_map or []), "required": bool(found.required),
            "redirect_path": "/app/login/sso/callback"}


def for_email(email: str) -> CustomerSso | None:
    """The settings that sign in ``email`` (by its domain), or None."""
    _, _, domain = portal_users.normalize_email(email).rpartition("@")
    return sso_store.by_domain(domain) if domain else None


# --- the sign-in ----------------------------------------------------------------------------


class _Provider(OpenIDMixin, OAuth2Mixin, BaseApp):
    """Authlib's OpenID Connect client without a web framework: discovery, PKCE, the token
    request and the ID token's checks are Authlib's; the pending state is ours to keep."""

    client_cls = OAuth2Session


def _provider(found: CustomerSso) -> _Provider:
    secret = decrypt_secret(found.client_secret_enc)
    if not secret:  # SECRET_KEY changed without setting the secret again
        raise SsoRefused("client_secret_unreadable")
    return _Provider(None, name=found.customer_id, client_id=found.client_id, client_secret=secret,
                     server_metadata_url=f"{found.issuer}/.well-known/openid-configuration",
                     client_kwargs={"scope": SCOPE, "code_challenge_method": "S256",
                                    "default_timeout": HTTP_TIMEOUT})


def _metadata(provider: _Provider, found: CustomerSso) -> dict:
    try:
        metadata = provider.load_server_metadata()
    except (RequestException, ValueError) as exc:
        log.warning("single sign-on of %s: discovery failed (%s)", found.customer_id, type(exc).__name__)
        raise SsoRefused("discovery") from None
    # OpenID Connect Discovery 1.0 §4.3: the document's issuer is exactly the one asked.
    if metadata.get("issuer", "").rstrip("/") != found.issuer:
        raise SsoRefused("discovery_issuer")
    for endpoint in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(metadata.get(endpoint), str):
            raise SsoRefused("discovery")
        if _production() and urlsplit(metadata[endpoint]).scheme != "https":
            raise SsoRefused("discovery_insecure")
    return metadata


@dataclass(frozen=True)
class Redirect:
    url: str  # where the browser goes: the provider's authorization endpoint
    pending: dict  # what the portal keeps until the answer (signed session; no secret of the customer's)


def begin(email: str, redirect_uri: str) -> Redirect:
    """Start a sign-in for ``email``: the provider's URL with a fresh ``state``, ``nonce`` and PKCE
    challenge, and the pending sign-in to keep (its verifier never leaves the browser's session)."""
    found = for_email(email)
    if found is None:
        raise NotConfigured()
    provider = _provider(found)
    _metadata(provider, found)
    made = provider.create_authorization_url(redirect_uri=redirect_uri,
                                             login_hint=portal_users.normalize_email(email))
    pending = {"customer": found.customer_id, "state": made["state"], "nonce": made["nonce"],
               "verifier": made["code_verifier"], "redirect_uri": redirect_uri,
               "at": int(utcnow().timestamp())}
    return Redirect(made["url"], pending)


def _pending_valid(pending) -> bool:
    if not isinstance(pending, dict):
        return False
    if not all(isinstance(pending.get(k), str) and pending.get(k)
               for k in ("customer", "state", "nonce", "verifier", "redirect_uri")):
        return False
    at = pending.get("at")
    return isinstance(at, int) and 0 <= int(utcnow().timestamp()) - at <= PENDING_LIFETIME


def finish(pending, answer: dict) -> PortalUser:
    """The user the provider's answer (the callback's query: ``state``, ``code`` or ``error``)
    signs in, for the sign-in ``pending`` began; ``SsoRefused`` otherwise."""
    if not _pending_valid(pending):
        raise SsoRefused("no_pending_sign_in")
    state = answer.get("state")
    if not isinstance(state, str) or not hmac.compare_digest(state.encode(), pending["state"].encode()):
        raise SsoRefused("state")
    if answer.get("error"):
        raise SsoRefused("provider_error")
    code = answer.get("code")
    if not isinstance(code, str) or not code or len(code) > 2000:
        raise SsoRefused("no_code")
    found = sso_store.get(pending["customer"])
    if found is None:
        raise SsoRefused("not_configured")
    provider = _provider(found)
    _metadata(provider, found)
    try:
        token = provider.fetch_access_token(redirect_uri=pending["redirect_uri"], code=code,
                                            code_verifier=pending["verifier"])
    except (AuthlibBaseError, RequestException, ValueError) as exc:
        # a code used before, expired, or not ours: the provider refuses it (invalid_grant)
        log.warning("single sign-on of %s: token request refused (%s)", found.customer_id, type(exc).__name__)
        raise SsoRefused("code") from None
    claims = check_id_token(found, token, pending["nonce"], provider=provider)
    return sign_in(found, claims)


def check_id_token(found: CustomerSso, token: dict, nonce: str, *, provider: _Provider | None = None) -> dict:
    """The ID token's claims once its signature (against the issuer's JWKS), ``iss``, ``aud``,
    ``exp``, ``iat``, ``nonce`` and ``email_verified`` hold; ``SsoRefused`` naming the first that fails."""
    provider = provider or _provider(found)
    _metadata(provider, found)
    if not isinstance(token, dict) or not isinstance(token.get("id_token"), str):
        raise SsoRefused("no_id_token")
    try:
        claims = provider.parse_id_token(token, nonce, leeway=CLOCK_LEEWAY, claims_options={
            # Authlib checks ``aud`` only when told to (else only ``azp``): the token must be ours.
            "iss": {"essential": True, "values": [found.issuer, found.issuer + "/"]},
            "aud": {"essential": True, "values": [found.client_id]}})
    except JoseError as exc:
        reason = f"id_token_{getattr(exc, 'claim', None) or exc.error}"
        log.warning("single sign-on of %s: ID token refused (%s)", found.customer_id, reason)
        raise SsoRefused(reason) from None
    except (AuthlibBaseError, RequestException, ValueError) as exc:
        log.warning("single sign-on of %s: ID token refused (%s)", found.customer_id, type(exc).__name__)
        raise SsoRefused("id_token") from None
    if claims.get("email_verified") not in (True, "true"):
        raise SsoRefused("email_not_verified")
    return dict(claims)


def mapped_role(found: CustomerSso, claims: dict) -> str | None:
    """The role the provider's claim gives (the most powerful of its mapped values), the default
    role when it maps none, or None when no claim is configured (the provider says nothing)."""
    if not found.role_claim:
        return None
    values = claims.get(found.role_claim)
    values = values if isinstance(values, list) else [values]
    table = dict(pair.rpartition("=")[::2] for pair in found.role_map or [])
    roles = {table[v] for v in values if isinstance(v, str) and v in table}
    return next((r for r in portal_roles.ROLES if r in roles), found.default_role)


def sign_in(found: CustomerSso, claims: dict) -> PortalUser:
    """The customer's user of the token's e-mail: made at its first sign-in, its role set from the
    provider's claim at every one."""
    raw = claims.get("email")
    email = portal_users.normalize_email(raw if isinstance(raw, str) else "")
    _, _, domain = email.rpartition("@")
    if not domain or domain not in found.domains or len(email) > 320:
        raise SsoRefused("domain")
    role = mapped_role(found, claims)
    with transaction():
        users.lock_customer(found.customer_id)
        user = users.by_email(email)
        if user is None:
            user = sso_store.insert_provisioned_user(
                user_id=new_id("usr"), customer_id=found.customer_id, email=email,
                password_hash=portal_users.NO_PASSWORD, role=role or found.default_role,
                provisioned_by=PROVISIONED_BY_SSO)
            log.info("portal user %s made by single sign-on of %s with role %s", user.id, found.customer_id,
                     user.role)
        elif user.customer_id != found.customer_id:
            raise SsoRefused("another_customer")
        elif user.disabled:
            raise SsoRefused("disabled")
        elif role and role != user.role:
            _follow_role(found.customer_id, user, role)
    return users.get(user.id)


def _follow_role(customer_id: str, user: PortalUser, role: str) -> None:
    """The provider's role, unless it demotes the customer's last enabled owner (then the user
    stays an owner until another one is)."""
    if user.role != portal_roles.OWNER:
        users.set_role(user.id, role)
        log.info("portal user %s role %s -> %s by single sign-on", user.id, user.role, role)
        return
    try:
        with transaction():  # a savepoint: the check's failure undoes only this change
            users.set_role(user.id, role)
            _keeps_an_owner(customer_id)
    except _KeepOwner:
        log.info("portal user %s stays owner: the provider's role %s would leave %s without one",
                 user.id, role, customer_id)
        return
    log.info("portal user %s role %s -> %s by single sign-on", user.id, user.role, role)


class _KeepOwner(Exception):
    pass


def _keeps_an_owner(customer_id: str) -> None:
    if users.enabled_owner_count(customer_id) < 1:
        raise _KeepOwner()


def emergency_password_login(email: str, password: str) -> tuple[PortalUser, int]:
    """``users reset-login``: a new password, every session ended, and password sign-in allowed for
    ``EMERGENCY_HOURS`` although the customer's single sign-on is required."""
    user, ended = portal_users.reset_password(email, password)
    sso_store.set_password_login_until(user.id, utcnow() + timedelta(hours=EMERGENCY_HOURS))
    log.info("portal user %s: emergency password sign-in opened for %d h", user.id, EMERGENCY_HOURS)
    return users.get(user.id), ended
