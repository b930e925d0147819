"""The portal's entries in the activity log (D20): every action, recorded in one place.

An action is a form POST (login, logout, a key's webhook and secrets, a redelivery...) or a
CSV export; ``record_action`` runs after every portal request and writes one entry for each
action whose user is known: ``g.actor``, set by ``security`` (the logged-in user, the user a
login let in, the user who logged out), else the session's user, for a POST refused before
its view. A refused login has no user to name and is not an entry (the login throttle counts
it). Pages that only show something are not actions. An action that charges (a re-run) has
its entry, built here as every other, written by the service with the charge (D25): a
charge never commits without it, and ``record_action`` does not write it again. The activity
log's rules (``app.activity.entries``) are handed in at start (``install``): the domains' pages
import this module, so it imports no domain.
"""
from __future__ import annotations

import logging
from typing import Any

from flask import g, request

from app.plumbing.installed import Installed
from app.portal import security

log = logging.getLogger(__name__)
# The activity log's rules (``app.activity.entries``: ``call_entry``, ``record_once``), installed at start.
_activity: Installed[Any] = Installed("the portal's activity log")
install = _activity.install

# ``app.extensions``' key of the API calls' action names, as their views declare them (set at start by
# ``app/blueprints.py``: the portal imports nothing of the API's views).
API_ACTIONS = "scan_api.api_actions"

# The name of each portal action; a POST missing here is still recorded, as
# "portal.<view>", so that a new form is never left out of the log.
ACTIONS = {
    "portal.login": "portal.login",
    "portal.logout": "portal.logout",
    "portal.save_webhook": "key.webhook_update",
    "portal.new_secret": "key.secret_generate",
    "portal.roll_secret": "key.secret_roll",
    "portal.switch_secret": "key.secret_switch",
    "portal.reveal_secret": "key.secret_reveal",
    "portal.test_event": "key.test_event",
    "portal.redeliver": "delivery.redeliver",
    "portal.add_endpoint": "endpoint.create",
    "portal.update_endpoint": "endpoint.update",
    "portal.set_endpoint_enabled": "endpoint.enable",
    "portal.delete_endpoint": "endpoint.delete",
    "portal.roll_endpoint_secret": "endpoint.roll_secret",
    "portal.switch_endpoint_secret": "endpoint.switch_secret",
    "portal.ledger_csv": "usage.ledger_export",
    "portal.activity_csv": "activity.export",
    "portal.erase_scan": "scan.erase",
    "portal.rerun_scan": "scan.rerun",
    "portal.finding_feedback": "finding.feedback",
    "portal.add_watch": "watch.create",
    "portal.import_watches": "watches.create",
    "portal.pause_watch": "watch.pause",
    "portal.resume_watch": "watch.resume",
    "portal.end_watch": "watch.end",
    "portal.save_access": "key.access_update",
    "portal.settings": "customer.settings_update",
    "portal.invite_user": "user.invite",
    "portal.user_role": "user.role_change",
    "portal.user_state": "user.state_change",
    "portal.user_link": "user.password_link",
    "portal.two_factor_confirm": "user.two_factor_enable",
    "portal.two_factor_disable": "user.two_factor_disable",
    "portal.login_code": "portal.login_code",
    "portal.set_password": "user.password_set",
}

# Reads that are actions all the same: what leaves the portal in bulk.
EXPORTS = frozenset({"portal.ledger_csv", "portal.activity_csv"})
# Pages that only show something, posted because their filters can hold a target (kept out of addresses).
SEARCHES = frozenset({"portal.scans", "portal.activity_log"})


def all_actions(app) -> list[str]:
    """Every name an entry's action may have: the portal's and the API's, sorted (the activity
    log's filter lists them)."""
    return sorted(set(ACTIONS.values()) | set(app.extensions.get(API_ACTIONS, ())))


def charged_entry(livemode: bool, *, status: int):
    """This action's entry, for the service that charges it to write with the charge (D25: no
    charge without its entry); ``status``: the answer the portal gives when it is served. Once
    written, the view says so (``written``) and ``record_action`` writes no second one."""
    return _activity().call_entry(**_fields(_actor()), livemode=livemode, key_id=None, status=status)


def written(recorded) -> None:
    """The service wrote this request's entry with its charge (``charged_entry``)."""
    if recorded is not None:
        g.action_recorded = recorded


def _actor():
    # A POST refused before its view (a missing CSRF token) is still the session user's: looked up.
    return g.get("actor") or security.current_user()


def _fields(user) -> dict:
    """What every portal entry says of its request: who, which action, on what, from where."""
    values = list((request.view_args or {}).values())
    return {"customer_id": user.customer_id, "user_id": user.id, "user_email": user.email,
            "action": action_of(request.endpoint, request.method),
            "resource_id": str(values[-1]) if values else None,
            # ProxyFix (app/__init__.py) made it the client's address through TRUSTED_PROXIES.
            "client_address": request.remote_addr, "request_id": g.get("request_id")}


def action_of(endpoint: str | None, method: str) -> str | None:
    """The action of a portal request, or None for a page that only shows something."""
    if endpoint is None:
        return None
    if method == "POST" and endpoint not in SEARCHES:
        return ACTIONS.get(endpoint, f"portal.{endpoint.rsplit('.', 1)[-1]}")
    return ACTIONS[endpoint] if endpoint in EXPORTS else None


def record_action(response):
    """After a portal request: its entry, when it was an action by a known user and its charge did
    not write it (``written``: then only its status is corrected, if the answer changed). A failure
    is one log line (no personal data), never a changed answer."""
    if action_of(request.endpoint, request.method) is None:
        return response
    user = _actor()
    if user is None:
        return response
    _activity().record_once(g.get("action_recorded"), what="portal action", status=response.status_code,
                            **_fields(user), livemode=True)
    return response
