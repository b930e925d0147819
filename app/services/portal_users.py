"""Portal users and their sessions: login, server-side sessions, operator actions.

A portal session is a ``PortalSession`` row; the browser's (signed) cookie carries only
a random token whose SHA-256 digest is the row's id. Every portal request looks the row
up, so a session ends for good when its row goes: at logout, when an operator resets the
user's password or disables the user, or ``SESSION_LIFETIME`` after the login.

No flask here: the portal's views and the operator CLI both call these functions.
"""
from __future__ import annotations

import secrets
from datetime import timedelta

from werkzeug.security import check_password_hash, generate_password_hash

from app.db import transaction
from app.models import PortalUser, iso, utcnow
from app.services import login_throttle
from app.services.accounts import AccountError, get_customer
from app.services.crypto import digest
from app.store import users

SESSION_LIFETIME = timedelta(hours=8)
MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1000

# Spent on unknown e-mails too, so a failed login takes as long whether or not the user exists.
_DUMMY_HASH = generate_password_hash("not-a-real-password", method="scrypt")


class LoginRefused(Exception):
    """Wrong e-mail or password, or a disabled user: one answer for all three."""


class LoginThrottled(Exception):
    """Too many unsuccessful attempts for this account; try again in ``retry_after`` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"retry in {retry_after} s")
        self.retry_after = retry_after


def normalize_email(email: str) -> str:
    return (email or "").strip().lower()


def authenticate(email: str, password: str, address: str | None) -> PortalUser:
    """The user whose e-mail and password these are, within the login throttle.

    ``address`` is the client address the caller trusts (after its proxy handling).
    Raises ``LoginThrottled`` without checking the password when the account's attempts
    are used up, and ``LoginRefused`` for a wrong e-mail, a wrong password or a disabled user.
    """
    email = normalize_email(email)
    attempt = login_throttle.begin(email, address)
    if not attempt.allowed:
        raise LoginThrottled(attempt.retry_after)
    try:
        user = users.by_email(email)
        valid = check_password_hash(user.password_hash if user else _DUMMY_HASH, password)
    except BaseException:
        login_throttle.abandoned(attempt)
        raise
    if user is None or not valid or user.disabled:
        raise LoginRefused()
    login_throttle.succeeded(attempt)
    return user


def start_session(user: PortalUser) -> str:
    """A new session for ``user``; returns the token for the cookie (stored only as its digest)."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with transaction():
        users.delete_sessions_expired_by(now)  # housekeeping
        users.create_session(digest(token), user.id, created_at=now, expires_at=now + SESSION_LIFETIME)
        users.set_last_login(user.id, now)
    return token


def session_user(token) -> PortalUser | None:
    """The user (with its customer) of a live session, or None: unknown, ended, expired or disabled."""
    if not isinstance(token, str) or not token or len(token) > 200:
        return None
    return users.session_user(digest(token), utcnow())


def end_session(token) -> None:
    if isinstance(token, str) and token:
        users.delete_session(digest(token))


def end_user_sessions(user_id: str) -> int:
    """End every session of the user; returns how many were live."""
    return users.delete_user_sessions(user_id)


def get_user(email: str) -> PortalUser:
    user = users.by_email(normalize_email(email))
    if user is None:
        raise AccountError(f"no user {normalize_email(email)}")
    return user


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"password must have at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise AccountError(f"password must have at most {MAX_PASSWORD_LENGTH} characters")
    return password


def reset_password(email: str, password: str) -> tuple[PortalUser, int]:
    """Set a new password and end the user's sessions; returns the user and the sessions ended.

    The account's login lockout is lifted too: the user is about to log in with the new password.
    """
    user = get_user(email)
    password_hash = generate_password_hash(check_password(password), method="scrypt")
    with transaction():
        users.set_password_hash(user.id, password_hash)
        ended = end_user_sessions(user.id)
    login_throttle.clear_account(user.email)
    return users.get(user.id), ended


def set_disabled(email: str, disabled: bool) -> tuple[PortalUser, int]:
    """Disable (ending every session) or enable a user; returns the user and the sessions ended."""
    user = get_user(email)
    with transaction():
        users.set_disabled(user.id, disabled)
        ended = end_user_sessions(user.id) if disabled else 0
    return users.get(user.id), ended


def live_sessions(user_ids: list[str]) -> dict[str, int]:
    if not user_ids:
        return {}
    return users.live_session_counts(user_ids, utcnow())


def user_dict(user: PortalUser, sessions: int = 0) -> dict:
    return {"user_id": user.id, "customer_id": user.customer_id, "email": user.email,
            "disabled": bool(user.disabled), "created_at": iso(user.created_at),
            "last_login_at": iso(user.last_login_at), "sessions": sessions}


def list_users(customer_id: str | None = None) -> list[dict]:
    """Every portal user (of one customer when given), oldest first, with their live sessions."""
    if customer_id:
        get_customer(customer_id)
    found = users.all_users(customer_id)
    sessions = live_sessions([u.id for u in found])
    return [user_dict(u, sessions.get(u.id, 0)) for u in found]
