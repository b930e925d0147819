"""Portal users and their sessions: login, server-side sessions, operator actions.

A portal session is a ``PortalSession`` row; the browser's (signed) cookie carries only
a random token whose SHA-256 digest is the row's id. Every portal request looks the row
up, so a session ends for good when its row goes: at logout, when an operator resets the
user's password or disables the user, or ``SESSION_LIFETIME`` after the login.

No flask here: the portal's views and the operator CLI both call these functions.
"""
from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from werkzeug.security import check_password_hash, generate_password_hash

from app.accounts import login_throttle, portal_roles
from app.accounts.admin import get_customer
from app.accounts.models import PortalUser
from app.accounts.statements import sso as sso_store
from app.accounts.statements import users
from app.plumbing.crypto import digest
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import iso, new_id, utcnow

log = logging.getLogger(__name__)

SESSION_LIFETIME = timedelta(hours=8)
SET_PASSWORD_LINK_LIFETIME = timedelta(hours=24)
# The password of a user who has not used the set-password link yet: no hash matches it.
NO_PASSWORD = "!"  # noqa: S105 (not a password: a hash nothing matches)
# Who made a user no person made (PortalUser.provisioned_by, D32), in the portal's words.
PROVISIONED_WORDS = {"sso": "single sign-on (at the user's first sign-in)", "scim": "provisioning (SCIM)"}
MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1000

# Spent on unknown e-mails too, so a failed login takes as long whether or not the user exists:
# scrypt with the parameters of every user's hash (``PASSWORD_METHOD``). Written out, not made at
# import: made there it cost every process that imports this module (each API and worker process,
# each command) 0.15 s of CPU at its start. A test checks it has the parameters a new hash gets.
PASSWORD_METHOD = "scrypt"  # noqa: S105 - the name of a hash method, not a password
_DUMMY_HASH = ("scrypt:32768:8:1$yUCCYHOKlJZkrv6P$1762311a932cfe27235146d7a48e4a643633860ffe2067297ec3003c840edd2b"
               "677d0841fbd8eee64e84416c54852eb310d648c3a6be2fdf97819bebb82c3170")


class LoginRefused(Exception):
    """Wrong e-mail or password, or a disabled user: one answer for all three."""


class SsoRequired(LoginRefused):
    """The password is right but the customer signs in only through its provider (D32)."""


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
    if not password_login_allowed(user):
        raise SsoRequired()  # counted as a failed attempt: guessing is throttled all the same
    login_throttle.succeeded(attempt)
    return user


def password_login_allowed(user: PortalUser) -> bool:
    """Whether ``user`` may sign in with a password (and then a TOTP code): not when the customer's
    single sign-on is required (D32), but for an operator's emergency door (``users reset-login``)."""
    settings = sso_store.get(user.customer_id)
    if settings is None or not settings.required:
        return True
    return user.password_login_until is not None and user.password_login_until > utcnow()


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
    password_hash = generate_password_hash(check_password(password), method=PASSWORD_METHOD)
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
            "role": user.role, "disabled": bool(user.disabled), "two_factor": user.totp_enabled_at is not None,
            "provisioned_by": user.provisioned_by,
            "created_at": iso(user.created_at),
            "last_login_at": iso(user.last_login_at), "sessions": sessions}


def list_users(customer_id: str | None = None) -> list[dict]:
    """Every portal user (of one customer when given), oldest first, with their live sessions."""
    if customer_id:
        get_customer(customer_id)
    found = users.all_users(customer_id)
    sessions = live_sessions([u.id for u in found])
    return [user_dict(u, sessions.get(u.id, 0)) for u in found]


# --- users managed by the customer's owners (D21) -----------------------------------------

class LastOwner(AccountError):
    """The change would leave the customer without an enabled owner."""

    def __init__(self):
        super().__init__("the account must keep at least one enabled owner")


def customer_users(customer_id: str) -> list[PortalUser]:
    return users.all_users(customer_id)


def customer_user(customer_id: str, user_id: str) -> PortalUser:
    """The customer's user ``user_id``; another customer's user is as unknown as a missing one."""
    user = users.customer_user(customer_id, user_id) if isinstance(user_id, str) else None
    if user is None:
        raise LookupError(user_id)
    return user


def _new_link(user_id: str) -> str:
    token = secrets.token_urlsafe(32)
    users.set_password_token(user_id, digest(token), utcnow() + SET_PASSWORD_LINK_LIFETIME)
    return token


def invite_user(customer_id: str, *, email: str, role: str, by_user_id: str) -> tuple[PortalUser, str]:
    """Add a user without a password; returns it and the token of its one-time set-password
    link (valid ``SET_PASSWORD_LINK_LIFETIME``, stored as its digest only, shown once)."""
    email = normalize_email(email)
    if "@" not in email or len(email) > 320:
        raise AccountError("email must be an e-mail address")
    portal_roles.check_role(role)
    with transaction():
        if users.by_email(email) is not None:
            raise AccountError("a user with this e-mail exists already")
        user = users.insert_user(user_id=new_id("usr"), customer_id=customer_id, email=email,
                                 password_hash=NO_PASSWORD, role=role)
        token = _new_link(user.id)
    log.info("portal user %s added with role %s by %s", user.id, role, by_user_id)
    return users.get(user.id), token


def new_password_link(customer_id: str, user_id: str, *, by_user_id: str) -> str:
    """A new one-time set-password link for the customer's user (the previous one stops working)."""
    user = customer_user(customer_id, user_id)
    token = _new_link(user.id)
    log.info("portal user %s: set-password link issued by %s", user.id, by_user_id)
    return token


def password_link_user(token) -> PortalUser | None:
    """The user whose live set-password link this is, or None (unknown, used or expired)."""
    if not isinstance(token, str) or not token or len(token) > 200:
        return None
    return users.by_password_token(digest(token), utcnow())


def use_password_link(token, password: str) -> PortalUser:
    """Set the password through the link and spend it (once: a second use finds nothing)."""
    password_hash = generate_password_hash(check_password(password), method=PASSWORD_METHOD)
    user_id = None
    if isinstance(token, str) and token and len(token) <= 200:
        with transaction():
            user_id = users.use_password_token(digest(token), utcnow(), password_hash)
            if user_id:
                end_user_sessions(user_id)
    if user_id is None:
        raise LookupError("link")
    log.info("portal user %s set a password through a one-time link", user_id)
    user = users.get(user_id)
    login_throttle.clear_account(user.email)
    return user


def _keeps_an_owner(customer_id: str) -> None:
    if users.enabled_owner_count(customer_id) < 1:
        raise LastOwner()


def change_role(customer_id: str, user_id: str, role: str, *, by_user_id: str) -> PortalUser:
    portal_roles.check_role(role)
    with transaction():
        users.lock_customer(customer_id)  # two owners demoting each other at once: one waits, then fails
        user = customer_user(customer_id, user_id)
        before = user.role
        users.set_role(user.id, role)
        _keeps_an_owner(customer_id)  # raising rolls the change back
    if before != role:
        log.info("portal user %s role changed from %s to %s by %s", user.id, before, role, by_user_id)
    return users.get(user.id)


def set_user_disabled(customer_id: str, user_id: str, disabled: bool, *, by_user_id: str) -> tuple[PortalUser, int]:
    """Disable (every session ends) or enable the customer's user; the last enabled owner stays."""
    with transaction():
        users.lock_customer(customer_id)
        user = customer_user(customer_id, user_id)
        users.set_disabled(user.id, disabled)
        _keeps_an_owner(customer_id)
        ended = end_user_sessions(user.id) if disabled else 0
    log.info("portal user %s %s by %s", user.id, "disabled" if disabled else "enabled", by_user_id)
    return users.get(user.id), ended
