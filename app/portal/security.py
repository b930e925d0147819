"""Portal sessions, safe redirects and security headers.

The session cookie (signed, HttpOnly) carries only ``sid``, a random token; the session
itself is a database row (``app.services.portal_users``), looked up on every request, so
logout, a password reset or a disabled user ends it at once. Login throttling is
``app.services.login_throttle``.
"""
from __future__ import annotations

import functools
from urllib.parse import urlsplit

from flask import g, redirect, request, session, url_for

from app.models import PortalUser
from app.services import portal_users

SESSION_KEY = "sid"
MAX_NEXT_LENGTH = 2048
CSP = ("default-src 'self'; style-src 'self'; script-src 'none'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def current_user() -> PortalUser | None:
    token = session.get(SESSION_KEY)
    if not token:
        return None
    user = portal_users.session_user(token)
    if user is None:
        session.clear()  # ended, expired or disabled: the cookie is worth nothing now
    return user


def begin_session(user: PortalUser) -> None:
    g.actor = user  # the activity log's actor of this request (app.portal.audit)
    portal_users.end_session(session.get(SESSION_KEY))  # a login in this browser replaces its session
    session.clear()  # a fresh session: no fixation across the login
    session.permanent = True
    session[SESSION_KEY] = portal_users.start_session(user)


def end_session() -> None:
    g.actor = current_user()  # who logs out, for the activity log (app.portal.audit)
    portal_users.end_session(session.get(SESSION_KEY))
    session.clear()


def login_required(view):
    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        user = current_user()
        if user is None:
            return redirect(url_for("portal.login", next=request.path))
        g.user, g.portal_customer = user, user.customer
        g.actor = user  # the activity log's actor of this request (app.portal.audit)
        return view(*args, **kwargs)
    return wrapped


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
