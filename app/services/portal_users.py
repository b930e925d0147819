"""Portal users and their sessions: login, server-side sessions, operator actions.

A portal session is a ``PortalSession`` row; the browser's (signed) cookie carries only
a random token whose SHA-256 digest is the row's id. Every portal request looks the row
up, so a session ends for good when its row goes: at logout, when an operator resets the
user's password or disables the user, or ``SESSION_LIFETIME`` after the login.

No flask here: the portal's views and the operator CLI both call these functions.
"""
from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import cast

from peewee import fn
from werkzeug.security import check_password_hash, generate_password_hash

from app.db import db
from app.models import Customer, PortalSession, PortalUser, iso, utcnow
from app.services import login_throttle
from app.services.accounts import AccountError, get_customer
from app.services.crypto import digest

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
        user = PortalUser.get_or_none(PortalUser.email == email)
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
    with db.atomic():
        PortalSession.delete().where(PortalSession.expires_at <= now).execute()  # housekeeping
        PortalSession.create(id=digest(token), user=user.id, created_at=now, expires_at=now + SESSION_LIFETIME)
        PortalUser.update(last_login_at=now).where(PortalUser.id == user.id).execute()
    return token


def session_user(token) -> PortalUser | None:
    """The user (with its customer) of a live session, or None: unknown, ended, expired or disabled."""
    if not isinstance(token, str) or not token or len(token) > 200:
        return None
    return (PortalUser.select(PortalUser, Customer)
            .join(Customer)
            .switch(PortalUser)
            .join(PortalSession)
            .where((PortalSession.id == digest(token)) & (PortalSession.expires_at > utcnow())
                   & (PortalUser.disabled == False))  # noqa: E712 (peewee expression)
            .get_or_none())


def end_session(token) -> None:
    if isinstance(token, str) and token:
        PortalSession.delete().where(PortalSession.id == digest(token)).execute()


def end_user_sessions(user_id: str) -> int:
    """End every session of the user; returns how many were live."""
    return PortalSession.delete().where(PortalSession.user == user_id).execute()


def get_user(email: str) -> PortalUser:
    user = PortalUser.get_or_none(PortalUser.email == normalize_email(email))
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
    with db.atomic():
        PortalUser.update(password_hash=password_hash).where(PortalUser.id == user.id).execute()
        ended = end_user_sessions(user.id)
    login_throttle.clear_account(user.email)
    return PortalUser.get_by_id(user.id), ended


def set_disabled(email: str, disabled: bool) -> tuple[PortalUser, int]:
    """Disable (ending every session) or enable a user; returns the user and the sessions ended."""
    user = get_user(email)
    with db.atomic():
        PortalUser.update(disabled=disabled).where(PortalUser.id == user.id).execute()
        ended = end_user_sessions(user.id) if disabled else 0
    return PortalUser.get_by_id(user.id), ended


def live_sessions(user_ids: list[str]) -> dict[str, int]:
    if not user_ids:
        return {}
    rows = (PortalSession.select(PortalSession.user, fn.COUNT(PortalSession.id).alias("n"))
            .where(PortalSession.user.in_(user_ids) & (PortalSession.expires_at > utcnow()))
            .group_by(PortalSession.user).tuples())
    return dict(cast(Iterable[tuple[str, int]], rows))  # peewee types rows as models


def user_dict(user: PortalUser, sessions: int = 0) -> dict:
    return {"user_id": user.id, "customer_id": user.customer_id, "email": user.email,
            "disabled": bool(user.disabled), "created_at": iso(user.created_at),
            "last_login_at": iso(user.last_login_at), "sessions": sessions}


def list_users(customer_id: str | None = None) -> list[dict]:
    """Every portal user (of one customer when given), oldest first, with their live sessions."""
    query = PortalUser.select().order_by(PortalUser.created_at, PortalUser.id)
    if customer_id:
        get_customer(customer_id)
        query = query.where(PortalUser.customer == customer_id)
    users = list(query)
    sessions = live_sessions([u.id for u in users])
    return [user_dict(u, sessions.get(u.id, 0)) for u in users]
