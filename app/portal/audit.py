"""The portal's entries in the activity log (D20): every action, recorded in one place.

An action is a form POST (login, logout, a key's webhook and secrets, a redelivery...) or a
CSV export; ``record_action`` runs after every portal request and writes one entry for each
action whose user is known: ``g.actor``, set by ``security`` (the logged-in user, the user a
login let in, the user who logged out), else the session's user, for a POST refused before
its view. A refused login has no user to name and is not an entry (the login throttle counts
it). Pages that only show something are not actions.
"""
from __future__ import annotations

import logging

from flask import g, request

from app.portal import security
from app.services import activity

log = logging.getLogger(__name__)

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


def note_outcome(subject: activity.Subject | None, *, credits: int, livemode: bool) -> None:
    """What a portal action created, for its entry: the new object, the target's fingerprint
    (so a target search finds a re-run asked in the portal), its charge and its mode."""
    g.action_outcome = {"subject": subject, "credits": credits, "livemode": livemode}


def action_of(endpoint: str | None, method: str) -> str | None:
    """The action of a portal request, or None for a page that only shows something."""
    if endpoint is None:
        return None
    if method == "POST" and endpoint not in SEARCHES:
        return ACTIONS.get(endpoint, f"portal.{endpoint.rsplit('.', 1)[-1]}")
    return ACTIONS[endpoint] if endpoint in EXPORTS else None


def record_action(response):
    """After a portal request: its entry, when it was an action by a known user. A failure is one
    log line (no personal data), never a changed answer."""
    action = action_of(request.endpoint, request.method)
    if action is None:
        return response
    # A POST refused before its view (a missing CSRF token) is still the session user's: looked up.
    user = g.get("actor") or security.current_user()
    if user is None:
        return response
    values = list((request.view_args or {}).values())
    try:
        outcome = g.get("action_outcome") or {"livemode": True}
        activity.record(customer_id=user.customer_id, action=action, status=response.status_code, **outcome,
                        user_id=user.id, user_email=user.email, resource_id=str(values[-1]) if values else None,
                        # ProxyFix (app/__init__.py) made it the client's address through TRUSTED_PROXIES.
                        client_address=request.remote_addr, request_id=g.get("request_id"))
    except Exception as exc:
        log.error("could not write this portal action's activity log entry: %s", exc.__class__.__name__)  # noqa: TRY400
    return response
