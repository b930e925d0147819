"""API-key authentication of a request (§5): the ``Authorization`` header is read here;
the key's look-up and rules (D2/D10) are ``app.accounts.keyauth``'s."""
from __future__ import annotations

import re

from flask import request

from app.accounts import keyauth
from app.accounts.models import ApiKey

BEARER_RE = re.compile(r"^Bearer +(\S+) *$", re.IGNORECASE)


def bearer_token() -> str:
    """The key the request presents, or raise ``NotAuthenticated`` (401) when there is none."""
    match = BEARER_RE.match(request.headers.get("Authorization", ""))
    if not match:
        raise keyauth.missing_key()
    return match.group(1)


def authenticate() -> ApiKey:
    """The live key of the request (its ``customer`` loaded), or raise ``NotAuthenticated`` (401)."""
    return keyauth.authenticate(bearer_token())


def client_address() -> str | None:
    """The client's address: ``remote_addr``, which ProxyFix has set from ``X-Forwarded-For``
    through ``TRUSTED_PROXIES`` proxies and only those (``app/__init__.py``), the one place
    the app decides which proxies to believe. Never read the header here."""
    return request.remote_addr
