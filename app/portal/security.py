"""Portal sessions, safe redirects and security headers.

The session cookie (signed, HttpOnly) carries only ``sid``, a random token; the session
itself is a database row (``app.accounts.portal_users``), looked up on every request, so
logout, a password reset or a disabled user ends it at once. Login throttling is
``app.accounts.login_throttle``. What this module asks of the accounts (the session's user, a
role's permissions, two-factor login) is handed to it at start (``install``, ``Accounts``): the
domains' pages import it, so it imports no domain.

Every portal view declares, in one place, what it needs: ``@requires(permission)`` (a
permission of ``app.accounts.portal_roles``; it also asks for a login) or ``@public``.
``check_declared`` refuses to start the app when a portal view declares neither, so a new
page cannot forget its role. A refusal is a 403 page, logged, before the view runs:
nothing is changed.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

from flask import current_app, g, redirect, render_template, request, session, url_for

from app.plumbing.installed import Installed
from app.plumbing.models import utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Accounts:
    """What the portal asks of the accounts (``app.accounts``: ``portal_users``, ``portal_roles``,
    ``two_factor``), handed in at start by ``app.blueprints``."""

    session_user: Callable[[str], Any]  # the user of a live session token, or None
    start_session: Callable[[Any], str]  # a new session of the user: its token
    end_session: Callable[[str | None], None]
    two_factor_required: Callable[[Any], bool]  # the user must enrol first
    allows: Callable[[str, str], bool]  # (role, permission)
    check_permission: Callable[[str], str]  # a permission a view may declare, else ValueError
    roles: Any  # the permissions' names, for the templates (``perm``)


accounts: Installed[Accounts] = Installed("the portal's accounts")  # unset, no page would check a login
install = accounts.install

PUBLIC = "public"  # no login needed: the login pages, the set-password link
# The pages a user whose customer requires two-factor login may reach before enrolling.
ENROLMENT_ENDPOINTS = frozenset({"portal.two_factor", "portal.two_factor_confirm"})

SESSION_KEY = "sid"
MAX_NEXT_LENGTH = 2048
CSP = ("default-src 'self'; style-src 'self'; script-src 'none'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def current_user() -> Any:
    """The logged-in ``PortalUser``, or None."""
    token = session.get(SESSION_KEY)
    if not token:
        return None
    user = accounts().session_user(token)
    if user is None:
        session.clear()  # ended, expired or disabled: the cookie is worth nothing now
    return user


def begin_session(user) -> None:
    g.actor = user  # the activity log's actor of this request (app.portal.audit)
    accounts().end_session(session.get(SESSION_KEY))  # a login in this browser replaces its session
    session.clear()  # a fresh session: no fixation across the login
    session.permanent = True
    session[SESSION_KEY] = accounts().start_session(user)


SECOND_STEP_KEY = "second_step"
SECOND_STEP_SECONDS = 300


def _now_seconds() -> int:
    return int(utcnow().replace(tzinfo=UTC).timestamp())


def begin_second_step(user, next_path: str | None) -> None:
    """The password was right and the user has two-factor login: remember who, for a few
    minutes, in the signed cookie. No session exists until the code is right (``sid`` unset)."""
    accounts().end_session(session.get(SESSION_KEY))
    session.clear()
    session[SECOND_STEP_KEY] = {"user": user.id, "at": _now_seconds(), "next": next_path or ""}


def second_step() -> tuple[str, str] | None:
    """(user id, next path) of a password checked in the last few minutes, or None."""
    pending = session.get(SECOND_STEP_KEY)
    if not isinstance(pending, dict) or not isinstance(pending.get("user"), str):
        return None
    at = pending.get("at")
    if not isinstance(at, int) or not 0 <= _now_seconds() - at <= SECOND_STEP_SECONDS:
        session.pop(SECOND_STEP_KEY, None)
        return None
    return pending["user"], pending.get("next") or ""


SSO_KEY = "sso_pending"


def begin_sso(pending: dict, next_path: str | None) -> None:
    """Keep a single sign-on under way (state, nonce, PKCE verifier) in the signed cookie until the
    provider's answer; like the second step, no session exists before it."""
    accounts().end_session(session.get(SESSION_KEY))
    session.clear()
    session[SSO_KEY] = {**pending, "next": next_path or ""}


def take_sso() -> dict | None:
    """The single sign-on under way, taken once: an answer replayed finds nothing."""
    pending = session.pop(SSO_KEY, None)
    return pending if isinstance(pending, dict) else None


def end_session() -> None:
    g.actor = current_user()  # who logs out, for the activity log (app.portal.audit)
    accounts().end_session(session.get(SESSION_KEY))
    session.clear()


def can(permission: str) -> bool:
    """Whether the logged-in user's role holds ``permission`` (templates show only what it may do)."""
    user = g.get("user")
    return user is not None and accounts().allows(user.role, permission)


def may(endpoint: str) -> bool:
    """Whether the logged-in user may use the view ``endpoint``, by the permission it declares:
    templates show a form or button only to the roles its view lets through."""
    permission = getattr(current_app.view_functions.get(endpoint), "portal_permission", None)
    return permission == PUBLIC or (permission is not None and can(permission))


def refuse(permission: str):
    user = g.user
    log.warning("portal: user %s (role %s) refused %s %s: needs %s", user.id, user.role, request.method,
                request.endpoint, permission)
    return render_template("portal/forbidden.html", permission=permission), 403


def requires(permission: str):
    """The view needs a login and a role holding ``permission``; else a 403 before it runs.

    When the user's customer requires two-factor login and the user has none yet, every
    page but the enrolment sends the user there first. A permission the accounts do not know
    stops the start (``check_declared``): a typo must not refuse everyone.
    """
    def decorate(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            user = current_user()
            if user is None:
                return redirect(url_for("portal.login", next=request.path))
            g.user, g.portal_customer = user, user.customer
            if request.endpoint not in ENROLMENT_ENDPOINTS and accounts().two_factor_required(user):
                return redirect(url_for("portal.two_factor"))
            if not accounts().allows(user.role, permission):
                return refuse(permission)
            return view(*args, **kwargs)
        wrapped.portal_permission = permission  # type: ignore[attr-defined] # see check_declared
        return wrapped
    return decorate


def public(view):
    """The view is open without a login (it checks what it needs itself)."""
    view.portal_permission = PUBLIC
    return view


def check_declared(app) -> None:
    """Refuse to start when a portal view declares no permission (``requires``) nor ``public``:
    it would be open to every role (fail closed, at start, not per request); or one the accounts
    do not know (``Accounts.check_permission`` raises)."""
    for endpoint, view in app.view_functions.items():
        if not endpoint.startswith("portal.") or endpoint == "portal.static":
            continue
        permission = getattr(view, "portal_permission", None)
        if not permission:
            raise RuntimeError(f"portal view {endpoint} declares no role: decorate it with "
                               "security.requires(permission) or security.public")
        if permission != PUBLIC:
            accounts().check_permission(permission)


def add_security_headers(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def safe_next(target) -> str | None:
    """Only a path of this portal: a login link must not redirect to another site, and a
    value no Location header can carry (CR, LF, other controls, spaces) is ignored."""
    if not isinstance(target, str) or not target or len(target) > MAX_NEXT_LENGTH:
        return None
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in target):
        return None
    if "\\" in target or target.startswith("//") or not (target == "/app" or target.startswith("/app/")):
        return None
    try:
        parts = urlsplit(target)
    except ValueError:
        return None
    if parts.scheme or parts.netloc:
        return None
    return target
