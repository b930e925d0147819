"""The operator's single sign-on commands (D32): ``customers sso`` (the secret from standard input,
stored encrypted, never printed) and ``users reset-login`` (the emergency door)."""
from __future__ import annotations

import json

from app.accounts import admin, portal_users
from app.accounts.models import CustomerSso, PortalUser
from app.extensions import db
from app.plumbing.crypto import decrypt_secret
from tests.portal.helpers import PASSWORD

SECRET = "client-secret-never-printed-0123456789"


def run(app, *args, input=None):
    return app.test_cli_runner().invoke(args=list(args), input=input)


def sso_args(customer_id, *extra):
    return ["customers", "sso", customer_id, "--issuer", "https://idp.acme.example/", "--client-id", "portal",
            "--client-secret-stdin", "--domains", "acme.example,Acme.test", *extra]


def test_customers_sso_sets_the_provider_and_never_prints_the_secret(app, account):
    result = run(app, *sso_args(account.id, "--role-claim", "groups", "--role-map", "admins=admin,devs=developer",
                                "--required", "--json"), input=SECRET + "\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output.strip().splitlines()[-1])
    assert data["issuer"] == "https://idp.acme.example" and data["domains"] == ["acme.example", "acme.test"]
    assert data["role_map"] == ["admins=admin", "devs=developer"] and data["required"] is True
    assert SECRET not in result.output
    with db.connection_context():
        stored = CustomerSso.get_by_id(account.id).client_secret_enc
    assert SECRET not in stored and decrypt_secret(stored) == SECRET
    shown = run(app, "customers", "sso", account.id)
    assert shown.exit_code == 0 and "never shown" in shown.output and SECRET not in shown.output
    assert "/app/login/sso/callback" in shown.output


def test_customers_sso_refusals_are_one_line_and_change_nothing(app, account):
    partial = run(app, "customers", "sso", account.id, "--issuer", "https://idp.example")
    assert partial.exit_code == 1 and "go together" in partial.output
    bad = run(app, *sso_args(account.id, "--role-map", "x=root"), input=SECRET + "\n")
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    missing = run(app, "customers", "sso", account.id)
    assert missing.exit_code == 1 and "has no single sign-on" in missing.output
    removed = run(app, "customers", "sso", account.id, "--remove")
    assert removed.exit_code == 0 and "was not set" in removed.output


def test_users_reset_login_opens_password_sign_in_for_a_day_under_required_sso(app, account):
    with db.connection_context():
        admin.create_user(account.id, "ops@acme.example", PASSWORD)
    assert run(app, *sso_args(account.id, "--required"), input=SECRET + "\n").exit_code == 0
    result = run(app, "users", "reset-login", "ops@acme.example", "--password-stdin", "--json",
                 input="a new long password\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output.strip().splitlines()[-1])
    assert data["password_login_until"] and "a new long password" not in result.output
    with db.connection_context():
        assert PortalUser.get(PortalUser.email == "ops@acme.example").password_login_until is not None
        assert portal_users.authenticate("ops@acme.example", "a new long password", "10.0.0.1")
