"""Portal roles (D21): every portal page and form, walked by every role.

The walk is parametrized from the portal's url_map, so a page added later is walked too:
a role without the view's permission gets a 403 and the database is exactly as before;
a role with it is not refused. A view that declares no permission stops the app at start.
"""
from __future__ import annotations

import logging

import pytest
from flask import Blueprint, Flask

from app.accounts import admin
from app.accounts import portal_roles as roles
from app.accounts.models import PortalUser
from app.activity.models import ActivityEntry
from app.blueprints import portal_blueprint
from app.extensions import db
from app.portal import security
from app.tables import ALL_MODELS
from tests.portal.helpers import CSRF_RE, PASSWORD

PUBLIC_ENDPOINTS = {"portal.login", "portal.logout", "portal.login_code", "portal.set_password",
                    "portal.sso_callback"}
# What D21 gives each view, written here a second time on purpose: a view declared with the
# wrong permission (or a new view nobody gave a role) fails below, not in production.
EXPECTED = {
    "portal.home": roles.READ, "portal.keys": roles.READ, "portal.key_page": roles.READ,
    "portal.scans": roles.READ, "portal.scan_page": roles.READ, "portal.batch_page": roles.READ,
    "portal.usage": roles.READ, "portal.ledger_csv": roles.READ, "portal.sources": roles.READ,
    "portal.activity_log": roles.READ, "portal.activity_csv": roles.READ,
    "portal.watches": roles.READ, "portal.add_watch": roles.SCANS, "portal.import_watches": roles.SCANS,
    "portal.pause_watch": roles.SCANS, "portal.resume_watch": roles.SCANS, "portal.end_watch": roles.SCANS,
    "portal.erase_scan": roles.SCANS, "portal.finding_feedback": roles.SCANS, "portal.rerun_scan": roles.SCANS, "portal.save_access": roles.KEY_ACCESS,
    "portal.save_webhook": roles.WEBHOOKS, "portal.new_secret": roles.WEBHOOKS, "portal.roll_secret": roles.WEBHOOKS,
    "portal.switch_secret": roles.WEBHOOKS, "portal.reveal_secret": roles.WEBHOOKS,
    "portal.test_event": roles.WEBHOOKS, "portal.redeliver": roles.DELIVERIES,
    "portal.add_endpoint": roles.ENDPOINTS, "portal.update_endpoint": roles.ENDPOINTS,
    "portal.set_endpoint_enabled": roles.ENDPOINTS, "portal.delete_endpoint": roles.ENDPOINTS,
    "portal.roll_endpoint_secret": roles.ENDPOINTS, "portal.switch_endpoint_secret": roles.ENDPOINTS,
    "portal.two_factor": roles.ACCOUNT, "portal.two_factor_confirm": roles.ACCOUNT,
    "portal.two_factor_disable": roles.ACCOUNT,
    "portal.users": roles.USERS, "portal.invite_user": roles.USERS, "portal.user_role": roles.USERS,
    "portal.user_state": roles.USERS, "portal.user_link": roles.USERS, "portal.settings": roles.SETTINGS,
    "portal.single_sign_on": roles.SSO,
    **dict.fromkeys(PUBLIC_ENDPOINTS, security.PUBLIC),
}


def portal_routes() -> list[tuple[str, str, str]]:
    """(endpoint, method, rule) of every portal view but the public ones, read from a Flask url_map."""
    bare = Flask(__name__)
    bare.register_blueprint(portal_blueprint())
    routes = []
    for rule in bare.url_map.iter_rules():
        if rule.endpoint.startswith("portal.") and rule.endpoint != "portal.static" \
                and getattr(bare.view_functions[rule.endpoint], "portal_permission", None) != security.PUBLIC:
            routes += [(rule.endpoint, method, rule.rule) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return sorted(routes)


ROUTES = portal_routes()


@pytest.fixture
def walk(portal_account, role_clients):
    """The portal's account with one user of each role (each with its own logged-in client), and a
    further user (a viewer) for the users' forms to act on."""
    with db.connection_context():
        target = admin.create_user(portal_account.id, "target@acme.example", PASSWORD)
        PortalUser.update(role=roles.VIEWER).where(PortalUser.id == target.id).execute()
    return portal_account, target, role_clients(portal_account)


def url_for_rule(rule: str, acct, target) -> str:
    values = {"key_id": acct.key.id, "user_id": target.id, "delivery_id": "dlv_walk", "scan_id": "scan_walk", "finding_id": "fnd_walk",
              "bulk_id": "bulk_walk", "watch_id": "wch_walk", "token": "walk-token", "endpoint_id": "ep_walk"}
    for name, value in values.items():
        rule = rule.replace(f"<{name}>", value)
    assert "<" not in rule, f"the walk has no value for a parameter of {rule}: add one to url_for_rule"
    return rule


def form_data(token: str, target) -> dict:
    """A plausible, valid body for every portal form: a refusal must not hide behind a bad form."""
    return {"csrf_token": token, f"{target.id}-csrf_token": token, f"{target.id}-role": "admin",
            "url": "https://example.com/hooks", "secret": "", "payload": "thin", "overlap_hours": "0",
            "confirm": "yes", "email": "walk@acme.example", "role": "admin", "disabled": "1", "code": "123456",
            "require_2fa": "y", "result_retention_days": "90", "password": "a long new password",
            "start": "2026-11-01", "end": "2026-11-02"}


def snapshot() -> dict:
    """Every table but the activity log, which records the refusal itself (checked apart)."""
    with db.connection_context():
        return {model.__name__: sorted(map(repr, model.select().tuples())) for model in ALL_MODELS
                if model is not ActivityEntry}


def refusals_logged(user_email: str) -> int:
    with db.connection_context():
        return ActivityEntry.select().where((ActivityEntry.user_email == user_email)
                                            & (ActivityEntry.status == 403)).count()


def csrf_token(client) -> str:
    page = client.get("/app/api-keys").get_data(as_text=True)
    match = CSRF_RE.search(page)
    assert match, page[:300]
    return match.group(1)


def test_every_portal_view_declares_the_permission_d21_gives_it():
    bare = Flask(__name__)
    bare.register_blueprint(portal_blueprint())
    security.check_declared(bare)
    declared = {endpoint: view.portal_permission for endpoint, view in bare.view_functions.items()
                if endpoint.startswith("portal.") and endpoint != "portal.static"}
    unlisted = sorted(set(declared) - set(EXPECTED))
    assert not unlisted, f"portal views without a role in EXPECTED (give them one per D21): {unlisted}"
    assert declared == {e: p for e, p in EXPECTED.items() if e in declared}


def test_the_app_refuses_to_start_with_a_portal_view_that_declares_nothing():
    bp = Blueprint("portal", __name__, url_prefix="/app")

    @bp.get("/declared")
    @security.requires(roles.READ)
    def declared():
        return "ok"

    @bp.get("/forgotten")
    def forgotten():
        return "ok"

    bare = Flask(__name__)
    bare.register_blueprint(bp)
    with pytest.raises(RuntimeError, match=r"portal\.forgotten declares no role"):
        security.check_declared(bare)


@pytest.mark.parametrize("endpoint, method, rule", ROUTES, ids=[f"{m} {r}" for _, m, r in ROUTES])
def test_each_role_through_each_portal_view(walk, app, endpoint, method, rule, caplog):
    acct, target, clients = walk
    permission = app.view_functions[endpoint].portal_permission
    path = url_for_rule(rule, acct, target)
    for role in sorted(roles.ROLES, key=lambda r: roles.allows(r, permission)):  # refused roles first
        client = clients[role]
        data = form_data(csrf_token(client), target) if method == "POST" else None
        before, logged = snapshot(), refusals_logged(f"{role}@acme.example")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="app.portal.security"):
            response = client.open(path, method=method, data=data)
        if roles.allows(role, permission):
            assert response.status_code != 403, f"{role} refused {method} {path}"
        else:
            assert response.status_code == 403, f"{role} was not refused {method} {path}"
            assert "Not allowed" in response.get_data(as_text=True)
            assert snapshot() == before, f"{role}'s refused {method} {path} changed the database"
            if method == "POST":  # an action refused is in the activity log (pages read are not logged)
                assert refusals_logged(f"{role}@acme.example") == logged + 1
            refusal = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
            assert refusal and f"role {role}" in refusal[0] and "@" not in refusal[0]  # the user's id, no e-mail


def test_pages_show_only_what_the_role_may_do(walk):
    acct, _, clients = walk
    key_page = {role: clients[role].get(f"/app/api-keys/{acct.key.id}").get_data(as_text=True)
                for role in roles.ROLES}
    assert "Save webhook" not in key_page[roles.VIEWER] and "Send test event" not in key_page[roles.VIEWER]
    assert all("Save webhook" in key_page[r] for r in (roles.DEVELOPER, roles.ADMIN, roles.OWNER))
    nav = {role: clients[role].get("/app/api-keys").get_data(as_text=True) for role in roles.ROLES}
    assert 'href="/app/users"' in nav[roles.OWNER] and 'href="/app/settings"' in nav[roles.OWNER]
    assert not any('href="/app/users"' in nav[r] or 'href="/app/settings"' in nav[r]
                   for r in (roles.ADMIN, roles.DEVELOPER, roles.VIEWER))
    assert all('href="/app/account/two-factor"' in page for page in nav.values())
