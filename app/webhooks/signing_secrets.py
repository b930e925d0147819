"""Signing (D16): ``delivery_headers`` builds every header of one attempt, both signature
schemes included, from the active secrets of the key or endpoint (``signing_secrets``). A rolling
rotation (``roll_secret``, ``switch_secret``) keeps a next secret beside the current one until
``webhook_secret_switch_at``; the switch is made lazily, by the first signing or read that finds the
overlap over (``_promote_if_due``)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.plumbing.crypto import decrypt_secret, encrypt_secret, new_webhook_secret
from app.plumbing.errors import AccountError, SecretChanged
from app.plumbing.models import iso, utcnow
from app.plumbing.signatures import (
    ID_HEADER,
    SIGNATURE_HEADER,
    STANDARD_SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    sign_standard,
)
from app.webhooks.key_settings import key_for, owned_key
from app.webhooks.models import WebhookDelivery, WebhookEndpoint
from app.webhooks.outbox import USER_AGENT, first_endpoint_id
from app.webhooks.statements import endpoints as endpoint_store
from app.webhooks.statements import key_settings as settings_store

log = logging.getLogger(__name__)

MAX_OVERLAP_HOURS, DEFAULT_OVERLAP_HOURS = 7 * 24, 24
def generate_secret(key_id: str, customer_id: str) -> str:
    """Replace the key's signing secret with a new random one; returns it, to show once.

    Attempts made from now on, retries of earlier deliveries included, are signed
    with the new secret alone (a rotation under way ends): ``roll_secret`` is the
    rotation that breaks no receiver.
    """
    key = owned_key(key_id, customer_id)
    plaintext = new_webhook_secret()
    _replace_secret(key, plaintext)
    log.info("key %s: webhook secret rotated", key.id)
    return plaintext


def _replace_secret(key: ApiKey | WebhookEndpoint, plaintext: str) -> None:
    """Make ``plaintext`` the key's only secret, if its secrets are still those ``key`` was read
    with: compare-and-set, so of two requests racing (a double click on "Generate secret" or on
    "Roll secret" with no overlap) one wins and the other is told, instead of both showing a
    secret as in force when only the last one written signs."""
    changed = settings_store.replace_secret(key.id, secret_enc=encrypt_secret(plaintext),
                                       was_secret_enc=key.webhook_secret_enc,
                                       was_next_secret_enc=key.webhook_next_secret_enc, model=type(key))
    if not changed:
        raise SecretChanged()


@dataclass
class SigningSecrets:
    """The key's active secrets: ``current`` signs ``X-Service-Signature``; ``active``
    (current first, then the next one during a rotation) sign ``webhook-signature``."""

    current: str | None
    active: list[str]


@dataclass
class RolledSecret:
    secret: str  # the next secret's plaintext, to show once
    switch_at: datetime  # when it becomes the only one (now, for an overlap of 0 or a first secret)
    overlapping: bool = False  # both secrets sign until switch_at (False: it replaced the old one at once)


def _promote_if_due(key: ApiKey | WebhookEndpoint, now: datetime) -> None:
    """End the key's rotation when its overlap is over: the next secret becomes current and
    the old one is gone. Compare-and-set, so concurrent callers switch once."""
    if not key.webhook_next_secret_enc or key.webhook_secret_switch_at is None or key.webhook_secret_switch_at > now:
        return
    _switch(key)


def _switch(key: ApiKey | WebhookEndpoint) -> bool:
    nxt = key.webhook_next_secret_enc
    changed = settings_store.switch_to_next(key.id, nxt, type(key))
    key.webhook_secret_enc, key.webhook_next_secret_enc, key.webhook_secret_switch_at = nxt, None, None
    if changed:
        log.info("key %s: webhook secret rotation finished, the next secret is now the only one", key.id)
    return bool(changed)


def signing_secrets(key: ApiKey | WebhookEndpoint, now: datetime) -> SigningSecrets:
    """The secrets that sign an attempt made ``now``, as they are now, so a rotation also
    covers the retries of earlier deliveries. A secret that cannot be decrypted
    (``SECRET_KEY`` changed) is left out, with a warning."""
    _promote_if_due(key, now)
    current = decrypt_secret(key.webhook_secret_enc)
    nxt = decrypt_secret(key.webhook_next_secret_enc)
    for token, plaintext in ((key.webhook_secret_enc, current), (key.webhook_next_secret_enc, nxt)):
        if token and plaintext is None:
            log.warning("key %s: a webhook secret cannot be decrypted (SECRET_KEY changed?); "
                        "deliveries are signed without it", key.id)
    return SigningSecrets(current, [s for s in (current, nxt) if s])


def _unix_ms(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)


SIGNATURE_HEADERS = (SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER)


def unsigned_headers(delivery: WebhookDelivery, now: datetime) -> dict:
    """The headers of an attempt made at ``now``, all but the two signatures: ``X-Service-*``
    (§6.2) and Standard Webhooks' ``webhook-id`` and ``webhook-timestamp`` (D16). The
    portal's delivery console shows them as sent."""
    ms = _unix_ms(now)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Service-Event": delivery.event,
        "X-Service-Delivery": delivery.id,
        "X-Service-Timestamp": str(ms),
        ID_HEADER: delivery.id,
        TIMESTAMP_HEADER: str(ms // 1000),
    }


def delivery_headers(delivery: WebhookDelivery, body: bytes, now: datetime,
                     key: ApiKey | WebhookEndpoint | None = None) -> dict:
    """Every header of one attempt of ``delivery`` made ``now``, with ``body`` its exact bytes.

    ``unsigned_headers``, ``X-Service-Signature`` from the current secret, and
    ``webhook-signature`` with one ``v1,`` entry per active secret (D16). A key without a
    usable secret sends neither signature header (an empty key could be forged). ``key``
    may be passed when the caller has the row already.
    """
    ms = _unix_ms(now)
    headers = unsigned_headers(delivery, now)
    secrets_now = signing_secrets(key or _signer(delivery), now)
    if secrets_now.current:
        headers[SIGNATURE_HEADER] = sign(secrets_now.current, body)
    if secrets_now.active:
        headers[STANDARD_SIGNATURE_HEADER] = sign_standard(secrets_now.active, delivery.id, ms // 1000, body)
    return headers


def _signer(delivery: WebhookDelivery) -> ApiKey | WebhookEndpoint:
    """The row whose secrets sign the delivery: its endpoint's, or its key's (the first endpoint, D22)."""
    if delivery.endpoint_id and delivery.endpoint_id != first_endpoint_id(delivery.api_key_id):
        row = endpoint_store.get(delivery.endpoint_id)
        if row is not None:
            return row
    return key_store.get(delivery.api_key_id)


def secret_state(key: ApiKey | WebhookEndpoint, now: datetime | None = None) -> dict:
    """Whether the key has a secret and a rotation under way (ending when), for pages and the CLI."""
    _promote_if_due(key, now or utcnow())
    return {"has_secret": bool(key.webhook_secret_enc), "rotating": bool(key.webhook_next_secret_enc),
            "switch_at": iso(key.webhook_secret_switch_at) if key.webhook_next_secret_enc else None}


def check_overlap_hours(hours) -> int:
    if isinstance(hours, bool) or not isinstance(hours, int) or not 0 <= hours <= MAX_OVERLAP_HOURS:
        raise AccountError(f"the overlap must be a whole number of hours from 0 to {MAX_OVERLAP_HOURS} (7 days)")
    return hours


def roll_secret(key_id: str, customer_id: str | None, overlap_hours: int = DEFAULT_OVERLAP_HOURS,
                now: datetime | None = None) -> RolledSecret:
    """Create the key's next secret; returns it (to show once) and when it becomes the only one.

    During the overlap ``X-Service-Signature`` keeps the current secret and
    ``webhook-signature`` carries both. An overlap of 0, or a key without a usable
    secret, makes the new secret current at once. A rotation already under way is
    refused: switch it first, so a next secret a receiver may have installed is never
    silently replaced.
    """
    return roll_secret_of(key_for(key_id, customer_id), overlap_hours, now or utcnow())


def roll_secret_of(key: ApiKey | WebhookEndpoint, overlap_hours: int, now: datetime) -> RolledSecret:
    """``roll_secret`` of a key or an endpoint row (D22: each endpoint rotates its own secret)."""
    overlap_hours = check_overlap_hours(overlap_hours)
    _promote_if_due(key, now)
    if key.webhook_next_secret_enc:
        raise AccountError("a secret rotation is already under way: switch to the next secret first")
    plaintext = new_webhook_secret()
    if overlap_hours == 0 or decrypt_secret(key.webhook_secret_enc) is None:
        _replace_secret(key, plaintext)
        log.info("key %s: webhook secret replaced (no overlap)", key.id)
        return RolledSecret(plaintext, now)
    switch_at = now + timedelta(hours=overlap_hours)
    # Compare-and-set on the secrets read: a concurrent roll or switch that won makes this one a
    # 409 rather than a rotation from a current secret that is no longer the one shown.
    changed = settings_store.start_rotation(key.id, next_secret_enc=encrypt_secret(plaintext), switch_at=switch_at,
                                       was_secret_enc=key.webhook_secret_enc, model=type(key))
    if not changed:
        raise SecretChanged()
    log.info("key %s: webhook secret rolled, both secrets sign until %s", key.id, iso(switch_at))
    return RolledSecret(plaintext, switch_at, overlapping=True)


def switch_secret(key_id: str, customer_id: str | None, now: datetime | None = None) -> ApiKey:
    """End the rotation under way now: the next secret becomes the only one."""
    key = key_for(key_id, customer_id)
    switch_secret_of(key, now or utcnow())
    return key_store.get(key.id)


def switch_secret_of(key: ApiKey | WebhookEndpoint, now: datetime) -> None:
    """``switch_secret`` of a key or an endpoint row (D22: each endpoint rotates its own secret)."""
    _promote_if_due(key, now)
    if not key.webhook_next_secret_enc:
        raise AccountError("no secret rotation is under way: roll the secret first")
    if not _switch(key):  # another switch or roll of the rotation read here won
        raise SecretChanged()


# --- The customer's deliveries over the API (D17) ---------------------------------------


