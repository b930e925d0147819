"""API-key authentication (§5, D2/D10).

The key is looked up by its SHA-256 digest only; the plaintext is never stored,
logged or compared. ``last_used_at`` is written at most once a minute per key so
that reads do not each pay for an extra write. The look-up is one statement, the
key joined to its customer, written once (``app.accounts.statements.keys``): every call runs it.
"""
from __future__ import annotations

from datetime import timedelta

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.plumbing.crypto import KEY_PREFIXES, digest, same
from app.plumbing.errors import NotAuthenticated
from app.plumbing.models import utcnow

TOUCH_EVERY = timedelta(seconds=60)
MAX_TOKEN_LENGTH = 200


def missing_key() -> NotAuthenticated:
    return NotAuthenticated("send the header Authorization: Bearer <API key>")


def invalid_key() -> NotAuthenticated:
    return NotAuthenticated("the API key is unknown or revoked", code="invalid_token")


def digest_of(token: str) -> str:
    """The digest a key is looked up by, or raise ``NotAuthenticated`` for what cannot be a key."""
    if not token.startswith(KEY_PREFIXES) or len(token) > MAX_TOKEN_LENGTH:
        raise invalid_key()
    return digest(token)


def authenticate(token: str) -> ApiKey:
    """The active key ``token`` is (its ``customer`` loaded), live or test (``key.livemode``),
    or raise ``NotAuthenticated``."""
    token_digest = digest_of(token)
    return live_key(key_store.by_digest(token_digest), token_digest, utcnow())


def live_key(key: ApiKey | None, token_digest: str, now) -> ApiKey:
    """``key`` (found by ``token_digest``) if it is not revoked, noting its use; else raise ``NotAuthenticated``."""
    if key is None or not same(key.digest, token_digest) or not is_active(key):
        raise invalid_key()
    touch(key, now)
    return key


def is_active(key: ApiKey) -> bool:
    """Whether the key still authenticates: not revoked (``pipeline.KEY_RULES``' "active")."""
    return key.is_live


def touch(key: ApiKey, now) -> None:
    """Note the key's use, at most once every ``TOUCH_EVERY``."""
    if key.last_used_at is None or key.last_used_at < now - TOUCH_EVERY:
        key_store.touch(key.id, now)
