"""API-key authentication (§5, D2/D10).

The key is looked up by its SHA-256 digest only; the plaintext is never stored,
logged or compared. ``last_used_at`` is written at most once a minute per key so
that reads do not each pay for an extra write. The look-up is one statement, the
key joined to its customer, written once (``app.db.execute``): every call runs it.
"""
from __future__ import annotations

import re
from datetime import timedelta

from flask import request

from app.db import columns, execute, instance, table
from app.errors import ApiError
from app.models import ApiKey, Customer, utcnow
from app.services.crypto import KEY_PREFIX, digest, same

BEARER_RE = re.compile(r"^Bearer +(\S+) *$", re.IGNORECASE)
TOUCH_EVERY = timedelta(seconds=60)
_KEY_FIELDS = len(ApiKey._meta.sorted_fields)
KEY_BY_DIGEST = (f"SELECT {columns(ApiKey, 'k')}, {columns(Customer, 'c')} FROM {table(ApiKey)} AS k "
                 f"JOIN {table(Customer)} AS c ON c.id = k.customer_id WHERE k.digest = ?")


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "send the header Authorization: Bearer <API key>",
                    headers={"WWW-Authenticate": 'Bearer realm="api"'})


def invalid_token() -> ApiError:
    return ApiError(401, "invalid_token", "the API key is unknown or revoked",
                    headers={"WWW-Authenticate": 'Bearer realm="api", error="invalid_token"'})


def authenticate() -> ApiKey:
    """The live key of the request (its ``customer`` loaded), or raise 401."""
    match = BEARER_RE.match(request.headers.get("Authorization", ""))
    if not match:
        raise unauthorized()
    token = match.group(1)
    if not token.startswith(KEY_PREFIX) or len(token) > 200:
        raise invalid_token()
    token_digest = digest(token)
    key = _key_by_digest(token_digest)
    if key is None or not same(key.digest, token_digest) or not key.is_live:
        raise invalid_token()
    now = utcnow()
    if key.last_used_at is None or key.last_used_at < now - TOUCH_EVERY:
        ApiKey.update(last_used_at=now).where(ApiKey.id == key.id).execute()
    return key


def _key_by_digest(token_digest: str) -> ApiKey | None:
    """The key with this digest, its ``customer`` loaded (one statement)."""
    row = execute(KEY_BY_DIGEST, (token_digest,)).fetchone()
    if row is None:
        return None
    key = instance(ApiKey, row[:_KEY_FIELDS])
    key.customer = instance(Customer, row[_KEY_FIELDS:])
    key._dirty.clear()
    return key
