"""Two-factor portal login (D21): TOTP (RFC 6238, ``pyotp``) and one-time recovery codes.

- Enrolment draws a secret (stored Fernet-encrypted, ``crypto.encrypt_secret``, like webhook
  secrets); it is in force once the user confirms it with a code, and then ten recovery
  codes are drawn, returned once and stored as SHA-256 digests only.
- A code is accepted for its 30-second step and one step either side (clock drift), and
  only when its step is later than the last accepted one: a code is never used twice.
- Every check goes through the login throttle (``login_throttle``), on a counter of its
  own per user: the six digits get as few guesses as a password.

No flask here: the portal passes the client address it trusts.
"""
from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import UTC

import pyotp

from app.accounts import admin, login_throttle, portal_users
from app.accounts.models import PortalUser
from app.accounts.portal_users import LoginRefused, LoginThrottled, SsoRequired
from app.accounts.statements import sso as sso_store
from app.accounts.statements import users
from app.plumbing.crypto import decrypt_secret, encrypt_secret
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import utcnow

log = logging.getLogger(__name__)

ISSUER = "Public Scan API"
RECOVERY_CODES = 10
DRIFT_STEPS = 1  # one 30 s step before and after the current one
_RECOVERY_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i to misread


class CodeRefused(AccountError):
    """The code is wrong, used already, or the user has no two-factor login to check it with."""

    def __init__(self, message: str = "the code is not valid"):
        super().__init__(message)


def enabled(user: PortalUser) -> bool:
    return user.totp_enabled_at is not None and bool(user.totp_secret_enc)


def required(user: PortalUser) -> bool:
    """The user's customer requires a second factor and the user has none yet: enrol first. Not for
    a user of the customer's single sign-on domains (D32): its provider owns the factors."""
    return bool(user.customer.require_2fa) and not enabled(user) and not _signs_in_by_sso(user)


def _signs_in_by_sso(user: PortalUser) -> bool:
    _, _, domain = user.email.rpartition("@")
    settings = sso_store.by_domain(domain)
    return settings is not None and settings.customer_id == user.customer_id


def pending_secret(user: PortalUser) -> str:
    """The secret of the user's enrolment (drawn now if none is waiting); the user scans it."""
    if enabled(user):
        raise AccountError("two-factor login is on already")
    secret = decrypt_secret(user.totp_secret_enc)
    if secret:
        return secret
    if user.totp_secret_enc:  # not readable (SECRET_KEY changed): draw a new one
        users.set_totp(user.id, secret_enc=None, enabled_at=None)
    users.set_pending_totp(user.id, encrypt_secret(pyotp.random_base32()))
    stored = users.get(user.id).totp_secret_enc  # the first of two requests at once wins
    secret = decrypt_secret(stored)
    if not secret:
        raise AccountError("two-factor enrolment could not start: try again")
    return secret


def provisioning_uri(secret: str, email: str) -> str:
    """The ``otpauth://`` URI an authenticator app reads from the QR code."""
    return pyotp.TOTP(secret).provisioning_uri(name=email, issuer_name=ISSUER)


def _normalize(code) -> str:
    return "".join(str(code or "").split()).replace("-", "").lower()[:64]


def _recovery_digest(code: str) -> str:
    return hashlib.sha256(_normalize(code).encode()).hexdigest()


def _new_recovery_code() -> str:
    raw = "".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(10))
    return f"{raw[:5]}-{raw[5:]}"


def _matching_step(secret: str, code: str) -> int | None:
    """The time step whose TOTP ``code`` is (within the drift), or None."""
    if len(code) != 6 or not code.isdigit():
        return None
    totp = pyotp.TOTP(secret)
    now = utcnow().replace(tzinfo=UTC)  # aware: pyotp reads a naive time as local time
    current = totp.timecode(now)
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        if secrets.compare_digest(totp.generate_otp(step), code):
            return step
    return None


def _throttled(user_id: str, address: str | None) -> login_throttle.Attempt:
    attempt = login_throttle.begin(f"2fa:{user_id}", address)
    if not attempt.allowed:
        log.warning("portal user %s: two-factor code refused unchecked (throttled)", user_id)
        raise LoginThrottled(attempt.retry_after)
    return attempt


def confirm_enrolment(user: PortalUser, code: str, address: str | None) -> list[str]:
    """Put the enrolment in force with a first code; returns the ten recovery codes (shown once)."""
    secret = decrypt_secret(user.totp_secret_enc)
    if enabled(user) or not secret:
        raise CodeRefused("there is no enrolment waiting for a code: start again")
    attempt = _throttled(user.id, address)
    step = _matching_step(secret, _normalize(code))
    if step is None:
        log.warning("portal user %s: wrong code confirming two-factor enrolment", user.id)
        raise CodeRefused()
    codes = [_new_recovery_code() for _ in range(RECOVERY_CODES)]
    with transaction():
        if not users.enable_totp(user.id, utcnow(), step):
            raise CodeRefused("two-factor login is on already")
        users.replace_recovery_codes(user.id, [_recovery_digest(c) for c in codes])
    login_throttle.succeeded(attempt)
    log.info("portal user %s: two-factor login enabled", user.id)
    return codes


def _check(user: PortalUser, code: str, *, recovery: bool) -> str | None:
    """How the code was right ("totp" or "recovery"), spending it; None when it was not."""
    secret = decrypt_secret(user.totp_secret_enc)
    if not enabled(user) or not secret:
        return None
    normalized = _normalize(code)
    step = _matching_step(secret, normalized)
    if step is not None:
        return "totp" if users.claim_totp_step(user.id, step) else None  # a reused code is refused
    if recovery and len(normalized) == 10 and users.use_recovery_code(user.id, _recovery_digest(normalized),
                                                                       utcnow()):
        return "recovery"
    return None


def verify_login(user_id: str, code: str, address: str | None) -> PortalUser:
    """The second step of a login: the user, when ``code`` is a current TOTP code not used
    before or one of its unused recovery codes (spent now). Throttled like passwords."""
    user = users.get_or_none(user_id)
    if user is None:  # removed between the two steps
        raise LoginRefused()
    if not portal_users.password_login_allowed(user):  # single sign-on required since the password step
        raise SsoRequired()
    attempt = _throttled(user.id, address)
    how = None if user.disabled else _check(user, code, recovery=True)
    if how is None:
        log.warning("portal user %s: two-factor login code refused", user.id)
        raise LoginRefused()
    login_throttle.succeeded(attempt)
    if how == "recovery":
        log.info("portal user %s: logged in with a recovery code (%d left)", user.id,
                 users.unused_recovery_codes(user.id))
    return user


def disable(user: PortalUser, code: str, address: str | None) -> None:
    """Turn two-factor login off, with a current code (not a recovery code), unless the customer requires it."""
    if user.customer.require_2fa:
        raise AccountError("your account requires two-factor login: it cannot be turned off")
    attempt = _throttled(user.id, address)
    if _check(user, code, recovery=False) is None:
        log.warning("portal user %s: wrong code turning two-factor login off", user.id)
        raise CodeRefused()
    with transaction():
        users.set_totp(user.id, secret_enc=None, enabled_at=None)
        users.delete_recovery_codes(user.id)
    login_throttle.succeeded(attempt)
    log.info("portal user %s: two-factor login disabled", user.id)


def recovery_codes_left(user: PortalUser) -> int:
    return users.unused_recovery_codes(user.id)


def set_required(customer_id: str, required_: bool, *, by: str) -> None:
    """The customer's ``require_2fa`` setting (owners in the portal, operators in the CLI)."""
    admin.set_settings(customer_id, require_2fa=required_)
    log.info("customer %s: two-factor login %s by %s", customer_id, "required" if required_ else "optional", by)
