"""API-key authentication (§5, D2/D10).

The key is looked up by its SHA-256 digest only; the plaintext is never stored,
logged or compared. ``last_used_at`` is written at most once a minute per key so
that reads do not each pay for an extra write. The look-up is one statement, the
key joined to its customer, written once (``app.db.execute``): every call runs it.
"""
from __future__ import annotations

from datetime import timedelta

from app.db import columns, execute_prepared, instance, table
from app.models import ApiKey, Customer, utcnow
from app.services.crypto import KEY_PREFIXES, digest, same
from app.services.errors import NotAuthenticated

TOUCH_EVERY = timedelta(seconds=60)
MAX_TOKEN_LENGTH = 200
_KEY_FIELDS = len(ApiKey._meta.sorted_fields)
KEY_COLUMNS = f"{columns(ApiKey, 'k')}, {columns(Customer, 'c')}"
KEY_ROW_LENGTH = _KEY_FIELDS + len(Customer._meta.sorted_fields)
KEY_BY_DIGEST = (f"SELECT {KEY_COLUMNS} FROM {table(ApiKey)} AS k "
                 f"JOIN {table(Customer)} AS c ON c.id = k.customer_id WHERE k.digest = ?")


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
    return live_key(_key_by_digest(token_digest), token_digest, utcnow())


def live_key(key: ApiKey | None, token_digest: str, now) -> ApiKey:
    """``key`` (found by ``token_digest``) if it is not revoked, noting its use; else raise ``NotAuthenticated``."""
    if key is None or not same(key.digest, token_digest) or not key.is_live:
        raise invalid_key()
    touch(key, now)
    return key


def touch(key: ApiKey, now) -> None:
    """Note the key's use, at most once every ``TOUCH_EVERY``."""
    if key.last_used_at is None or key.last_used_at < now - TOUCH_EVERY:
        ApiKey.update(last_used_at=now).where(ApiKey.id == key.id).execute()


def _key_by_digest(token_digest: str) -> ApiKey | None:
    """The key with this digest, its ``customer`` loaded (one statement)."""
    row = execute_prepared(KEY_BY_DIGEST, (token_digest,)).fetchone()
    return None if row is None else key_from_row(row)


def key_from_row(row) -> ApiKey:
    """A key and its ``customer`` from the columns of ``KEY_COLUMNS`` (``KEY_ROW_LENGTH`` values)."""
    key = instance(ApiKey, row[:_KEY_FIELDS])
    key.customer = instance(Customer, row[_KEY_FIELDS:KEY_ROW_LENGTH])
    key._dirty.clear()
    return key
