"""sso: a customer's OpenID Connect settings and the checks of a sign-in (D32), the ID token
checked against a real provider's discovery document and JWKS (npm ``oidc-provider``,
tests/oidc_provider.py). Tokens are minted here with the provider's own signing key (or none, or
another), so that each check is seen to refuse what it must and nothing else."""
from __future__ import annotations

import base64
import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from app.accounts import admin, portal_users, sso
from app.accounts.models import CustomerSso, PortalUser
from app.accounts.portal_users import SsoRequired
from app.plumbing import runtime
from app.plumbing.errors import AccountError
from tests import oidc_provider as op

pytestmark = pytest.mark.processes
NONCE = "n-0S6_WzA2Mj"
PASSWORD = "correct horse battery"


@pytest.fixture
def customer(conn):
    return admin.create_customer("Acme", "enterprise")


@pytest.fixture
def settings(customer, oidc_provider):
    return sso.configure(customer.id, issuer=oidc_provider.issuer, client_id=op.PORTAL_CLIENT,
                         client_secret=oidc_provider.secrets[op.PORTAL_CLIENT], domains="acme.example, Acme.TEST",
                         role_claim="groups", role_map="scan-admins=admin,scan-devs=developer,ops=owner")


def claims(provider, **changes) -> dict:
    now = int(time.time())
    found = {"iss": provider.issuer, "sub": "alice", "aud": op.PORTAL_CLIENT, "iat": now, "exp": now + 300,
             "nonce": NONCE, "email": "alice@acme.example", "email_verified": True, "groups": ["scan-devs"]}
    found.update(changes)
    return {k: v for k, v in found.items() if v is not None}


def signed(provider, key=None, **changes) -> dict:
    key = key or provider.key
    token = jwt.encode({"alg": "RS256", "kid": key.kid}, claims(provider, **changes), key)
    return {"access_token": "at", "token_type": "Bearer", "id_token": token}


def unsigned(provider, **changes) -> dict:
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return {"access_token": "at", "token_type": "Bearer",
            "id_token": f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims(provider, **changes))}."}


def reason(settings, token, nonce=NONCE) -> str:
    with pytest.raises(sso.SsoRefused) as refused:
        sso.check_id_token(settings, token, nonce)
    return refused.value.reason


# --- the ID token -------------------------------------------------------------------------------


def test_a_token_signed_by_the_issuers_key_with_the_right_claims_passes(settings, oidc_provider):
    found = sso.check_id_token(settings, signed(oidc_provider), NONCE)
    assert found["email"] == "alice@acme.example" and found["aud"] == op.PORTAL_CLIENT


def test_a_token_of_another_audience_is_refused(settings, oidc_provider):
    assert reason(settings, signed(oidc_provider, aud=op.OTHER_CLIENT)) == "id_token_aud"
    # naming us as the authorized party does not make another's token ours (Authlib alone checks azp only)
    assert reason(settings, signed(oidc_provider, aud=op.OTHER_CLIENT, azp=op.PORTAL_CLIENT)) == "id_token_aud"
    assert sso.check_id_token(settings, signed(oidc_provider, aud=[op.PORTAL_CLIENT]), NONCE)


def test_an_expired_token_is_refused(settings, oidc_provider):
    past = int(time.time()) - 3600
    assert reason(settings, signed(oidc_provider, iat=past - 300, exp=past)) == "id_token_exp"


def test_an_unsigned_token_is_refused(settings, oidc_provider):
    assert reason(settings, unsigned(oidc_provider)).startswith("id_token")


def test_a_token_signed_by_another_key_is_refused(settings, oidc_provider):
    stranger = RSAKey.generate_key(2048, parameters={"kid": oidc_provider.key.kid}, private=True)
    assert reason(settings, signed(oidc_provider, key=stranger)).startswith("id_token")


def test_a_token_of_another_issuer_or_nonce_or_without_expiry_is_refused(settings, oidc_provider):
    assert reason(settings, signed(oidc_provider, iss="http://127.0.0.1:1")) == "id_token_iss"
    assert reason(settings, signed(oidc_provider), nonce="another") == "id_token_nonce"
    assert reason(settings, signed(oidc_provider, exp=None)) == "id_token_exp"


def test_an_unverified_email_is_refused(settings, oidc_provider):
    assert reason(settings, signed(oidc_provider, email_verified=False)) == "email_not_verified"
    assert reason(settings, signed(oidc_provider, email_verified=None)) == "email_not_verified"


def test_the_real_providers_discovery_document_names_its_issuer(settings, oidc_provider):
    """A discovery document whose issuer is not the one configured is refused (Discovery 1.0 §4.3)."""
    CustomerSso.update(issuer=oidc_provider.issuer.replace("127.0.0.1", "localhost")).execute()
    found = sso.settings(settings.customer_id)
    with pytest.raises(sso.SsoRefused) as refused:
        sso.begin("alice@acme.example", op.REDIRECT_URI)
    assert refused.value.reason == "discovery_issuer"
    assert reason(found, signed(oidc_provider)) == "discovery_issuer"


# --- users made and their roles -----------------------------------------------------------------


def test_the_first_sign_in_makes_the_user_and_the_role_follows_the_claim(settings, oidc_provider):
    user = sso.sign_in(settings, claims(oidc_provider, email="Alice@ACME.example"))
    assert (user.email, user.role, user.provisioned_by, user.customer_id) == (
        "alice@acme.example", "developer", "sso", settings.customer_id)
    assert user.password_hash == portal_users.NO_PASSWORD
    assert sso.sign_in(settings, claims(oidc_provider, groups=["scan-devs", "scan-admins"])).role == "admin"
    assert sso.sign_in(settings, claims(oidc_provider, groups="nothing-mapped")).role == "viewer"


def test_without_a_role_claim_new_users_get_the_default_and_keep_their_role(customer, oidc_provider):
    found = sso.configure(customer.id, issuer=oidc_provider.issuer, client_id=op.PORTAL_CLIENT,
                          client_secret="s", domains="acme.example", default_role="developer")
    assert sso.sign_in(found, claims(oidc_provider)).role == "developer"
    PortalUser.update(role="admin").execute()
    assert sso.sign_in(found, claims(oidc_provider)).role == "admin"


def test_the_provider_never_demotes_the_last_enabled_owner(settings, oidc_provider):
    assert sso.sign_in(settings, claims(oidc_provider, groups=["ops"])).role == "owner"
    assert sso.sign_in(settings, claims(oidc_provider, groups=["scan-devs"])).role == "owner"
    admin.create_user(settings.customer_id, "boss@acme.example", PASSWORD)  # another owner
    assert sso.sign_in(settings, claims(oidc_provider, groups=["scan-devs"])).role == "developer"


def test_another_domain_another_customers_user_or_a_disabled_user_is_refused(settings, oidc_provider):
    other = admin.create_customer("Other", "business")
    admin.create_user(other.id, "mallory@acme.test", PASSWORD)
    for email, why in (("carol@elsewhere.example", "domain"), ("mallory@acme.test", "another_customer")):
        with pytest.raises(sso.SsoRefused) as refused:
            sso.sign_in(settings, claims(oidc_provider, email=email))
        assert refused.value.reason == why
    user = sso.sign_in(settings, claims(oidc_provider))
    portal_users.set_disabled(user.email, True)
    with pytest.raises(sso.SsoRefused, match="disabled"):
        sso.sign_in(settings, claims(oidc_provider))


# --- the operator's settings --------------------------------------------------------------------


def test_the_client_secret_is_encrypted_at_rest_and_never_shown(settings, oidc_provider):
    secret = oidc_provider.secrets[op.PORTAL_CLIENT]
    row = CustomerSso.get_by_id(settings.customer_id)
    assert secret not in row.client_secret_enc and row.client_secret_enc.startswith("gAAAA")
    shown = sso.settings_dict(row)
    assert secret not in json.dumps(shown) and shown["client_secret"] == "set (never shown)"
    assert shown["domains"] == ["acme.example", "acme.test"] and shown["role_map"][0] == "scan-admins=admin"


def test_a_domain_signs_in_one_customer_only(settings, oidc_provider):
    other = admin.create_customer("Other", "business")
    with pytest.raises(AccountError, match=r"acme\.test signs in another customer"):
        sso.configure(other.id, issuer=oidc_provider.issuer, client_id="x", client_secret="s",
                      domains="other.example,acme.test")
    assert sso.for_email("bob@ACME.test").customer_id == settings.customer_id
    assert sso.for_email("bob@other.example") is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"issuer": "ftp://idp.example"}, "https URL"),
    ({"issuer": "https://idp.example/?x=1"}, "https URL"),
    ({"domains": ""}, "at least one"),
    ({"domains": "not a domain"}, "not an e-mail domain"),
    ({"default_role": "root"}, "role must be one of"),
    ({"role_claim": "groups", "role_map": "admins=superuser"}, "role must be one of"),
    ({"role_claim": "groups", "role_map": "admins"}, "value=role"),
    ({"role_claim": "groups"}, "go together"),
    ({"client_secret": ""}, "client secret"),
])
def test_bad_settings_are_refused_and_nothing_is_saved(customer, changes, message):
    args = {"issuer": "https://idp.example", "client_id": "x", "client_secret": "s", "domains": "acme.example",
            **changes}
    with pytest.raises(AccountError, match=message):
        sso.configure(customer.id, **args)
    assert sso.settings_or_none(customer.id) is None


def test_an_http_issuer_is_refused_in_production(customer, monkeypatch):
    monkeypatch.setitem(runtime.config, "APP_ENV", "production")
    with pytest.raises(AccountError, match="https in production"):
        sso.configure(customer.id, issuer="http://idp.example", client_id="x", client_secret="s",
                      domains="acme.example")
    monkeypatch.setitem(runtime.config, "APP_ENV", "test")
    assert sso.configure(customer.id, issuer="http://idp.example/", client_id="x", client_secret="s",
                         domains="acme.example").issuer == "http://idp.example"


def test_required_refuses_password_and_totp_sign_in_but_for_the_emergency_door(customer, oidc_provider):
    admin.create_user(customer.id, "ops@acme.example", PASSWORD)
    assert portal_users.authenticate("ops@acme.example", PASSWORD, "10.0.0.1").email == "ops@acme.example"
    sso.configure(customer.id, issuer=oidc_provider.issuer, client_id="x", client_secret="s",
                  domains="acme.example", required=True)
    with pytest.raises(SsoRequired):
        portal_users.authenticate("ops@acme.example", PASSWORD, "10.0.0.1")
    from app.accounts import two_factor
    with pytest.raises(SsoRequired):
        two_factor.verify_login(portal_users.get_user("ops@acme.example").id, "123456", "10.0.0.1")
    user, _ = sso.emergency_password_login("ops@acme.example", PASSWORD + "!")
    assert user.password_login_until is not None
    assert portal_users.authenticate("ops@acme.example", PASSWORD + "!", "10.0.0.1").id == user.id


def test_no_secret_reaches_the_log_even_at_debug(settings, oidc_provider, caplog):
    """Authlib writes the PKCE verifier at DEBUG; the service keeps its logger above that."""
    import logging
    with caplog.at_level(logging.DEBUG):
        pending = sso.begin("alice@acme.example", op.REDIRECT_URI).pending
        with pytest.raises(sso.SsoRefused):
            sso.finish(pending, {"state": pending["state"], "code": "not-a-code"})
    text = caplog.text
    assert pending["verifier"] not in text and oidc_provider.secrets[op.PORTAL_CLIENT] not in text
    assert "alice@acme.example" not in text


def test_an_unreachable_provider_refuses_the_sign_in_without_a_trace(customer):
    sso.configure(customer.id, issuer=f"http://127.0.0.1:{op.free_port()}", client_id="x", client_secret="s",
                  domains="acme.example")
    with pytest.raises(sso.SsoRefused) as refused:
        sso.begin("alice@acme.example", op.REDIRECT_URI)
    assert refused.value.reason == "discovery"
