"""A key's webhook settings (D12): its URL, payload and secret as the portal, the API and the CLI
set them, for the logged-in customer's own keys only (``LookupError`` for another's, which the
portal answers as 404; a refused input raises ``AccountError``)."""
from __future__ import annotations

from app.accounts import admin
from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.events import kinds as events
from app.plumbing.crypto import encrypt_secret
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.outbound_urls import check_webhook_url
from app.plumbing.signatures import decode_secret
from app.webhooks.statements import key_settings as settings_store

# A hand-set secret: whsec_ + base64 of this many bytes (a generated one has 32).
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 16, 128
def owned_key(key_id: str, customer_id: str) -> ApiKey:
    """The customer's key ``key_id``; ``LookupError`` for another customer's or none."""
    key = key_store.customers_key(key_id, customer_id)
    if key is None:
        raise LookupError(f"no key {key_id}")
    return key


def check_secret(secret: str) -> str:
    """The one rule for a secret set by hand (portal, CLI, key issue): ``whsec_`` + standard
    base64 (padding optional) of 16 to 128 bytes, what Standard Webhooks libraries decode."""
    key = decode_secret(secret) if isinstance(secret, str) else None
    if key is None:
        raise AccountError("the webhook secret must be whsec_ followed by standard base64 (A-Z, a-z, 0-9, + "
                           f"and /) of {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes; or generate one")
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise AccountError(f"the base64 part of the webhook secret must decode to {MIN_SECRET_BYTES} to "
                           f"{MAX_SECRET_BYTES} bytes, not {len(key)}")
    return secret


def issue_key(customer_id: str, name: str = "", webhook_url: str | None = None, webhook_secret: str | None = None,
              **key_options) -> tuple[ApiKey, str]:
    """A new key (``admin.issue_key``, with its ``key_options``) and its webhook URL and secret,
    set by ``set_webhook``'s rules in the key's transaction: a refused one leaves no key behind."""
    with transaction():
        key, plaintext = admin.issue_key(customer_id, name, **key_options)
        if webhook_url or webhook_secret is not None:
            key = set_webhook(key.id, customer_id, webhook_url, webhook_secret)
    return key, plaintext


def set_payload(key_id: str, customer_id: str, payload: str) -> ApiKey:
    """What the key's event bodies carry: ``full`` or ``thin`` (D20); later events only."""
    if payload not in events.PAYLOADS:
        raise AccountError(f"payload must be one of {', '.join(events.PAYLOADS)}")
    key = owned_key(key_id, customer_id)
    settings_store.set_payload(key.id, payload)
    return key_store.get(key.id)


def set_webhook(key_id: str, customer_id: str, url: str | None, secret: str | None = None) -> ApiKey:
    """Set (or with an empty ``url`` remove) the key's webhook URL, and its secret when given.

    The one place a webhook URL and secret are checked and stored: the portal, the
    operator's ``keys set-webhook`` and ``keys issue`` (``admin.issue_key``) all
    come here, so every entry point applies the same rules (14.12).
    ``secret`` None or empty keeps the current one; a secret given replaces it at once and
    ends a rotation under way. Deliveries already written keep the URL they were
    addressed to; a redelivery takes the key's URL of that moment.
    """
    key = owned_key(key_id, customer_id)
    url = (url or "").strip()
    if url:
        check_webhook_url(url)
    settings_store.set_webhook(key.id, url=url or None,
                          secret_enc=encrypt_secret(check_secret(secret)) if secret else None)
    return key_store.get(key.id)


def key_for(key_id: str, customer_id: str | None) -> ApiKey:
    """The key, of ``customer_id``; ``None`` is the operator (CLI), who may act on any key."""
    if not isinstance(key_id, str) or "\x00" in key_id or len(key_id) > 40:
        raise LookupError(f"no key {key_id}")
    if customer_id is not None:
        return owned_key(key_id, customer_id)
    key = key_store.find(key_id)
    if key is None:
        raise LookupError(f"no key {key_id}")
    return key


