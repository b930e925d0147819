"""Portal sessions, login throttling and security headers."""
from __future__ import annotations

import functools
import logging

from flask import g, redirect, request, session, url_for

from app import runtime
from app.models import Customer, PortalUser

log = logging.getLogger(__name__)

MAX_FAILURES = 5
FAILURE_WINDOW = 15 * 60
CSP = ("default-src 'self'; style-src 'self'; script-src 'none'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def current_user() -> PortalUser | None:
    user_id = session.get("user_id")
    if not user_id:
        return None
    user = PortalUser.select(PortalUser, Customer).join(Customer).where(PortalUser.id == user_id).get_or_none()
    if user is None or session.get("customer_id") != user.customer_id:
        session.clear()
        return None
    return user


def login_required(view):
    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        user = current_user()
        if user is None:
            return redirect(url_for("portal.login", next=request.path))
        g.user, g.portal_customer = user, user.customer
        return view(*args, **kwargs)
    return wrapped


def _throttle_keys(email: str) -> list[str]:
    return [f"portal:login-failures:email:{email.lower()}", f"portal:login-failures:ip:{request.remote_addr}"]


def login_blocked(email: str) -> bool:
    """True after MAX_FAILURES failed logins for this e-mail or address in the window.

    Fails open when Redis is down: the password check still stands, and an outage
    of the throttle must not lock every customer out of the portal.
    """
    try:
        counts = runtime.redis().mget(_throttle_keys(email))
    except Exception:
        log.warning("login throttle unavailable (Redis); allowing the attempt")
        return False
    return any(int(c or 0) >= MAX_FAILURES for c in counts)


def record_failure(email: str) -> None:
    try:
        with runtime.redis().pipeline() as pipe:
            for key in _throttle_keys(email):
                pipe.incr(key)
                pipe.expire(key, FAILURE_WINDOW)
            pipe.execute()
    except Exception:
        log.warning("could not record a failed login (Redis)")


def clear_failures(email: str) -> None:
    try:
        runtime.redis().delete(_throttle_keys(email)[0])
    except Exception:
        pass


def add_security_headers(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def safe_next(target: str | None) -> str | None:
    """Only same-site paths: a login link must not redirect to another site."""
    if target and target.startswith("/app/") and not target.startswith("//") and "\\" not in target:
        return target
    return None
