"""A key's webhook settings, the one place that writes them: its URL, payload and signing
secrets (encrypted), with the rolling rotation's next secret and switch time (D12, D16), and
the rest of its first endpoint's columns (D22). Finding or locking the key is ``app.accounts.statements.keys``'s.

Changes of secrets are compare-and-set on the secrets the caller read, so of two requests
racing one wins and the other is told (``app.webhooks.outbox`` decides what to say).
"""
from __future__ import annotations

from datetime import datetime

from app.accounts.models import ApiKey
from app.webhooks.models import WebhookEndpoint

# The rows that hold a webhook URL and secrets: the key (its first endpoint, D22) or a further endpoint.
Holder = ApiKey | WebhookEndpoint


def update_key(key_id: str, **fields) -> None:
    """Change the key's webhook columns (its first endpoint's) named in ``fields``."""
    ApiKey.update(**fields).where(ApiKey.id == key_id).execute()


def set_webhook(key_id: str, *, url: str | None, secret_enc: str | None = None) -> None:
    """Set the key's URL and, when ``secret_enc`` is given, make it the only secret (a rotation ends)."""
    changes: dict = {"webhook_url": url}
    if secret_enc is not None:
        changes.update(webhook_secret_enc=secret_enc, webhook_next_secret_enc=None, webhook_secret_switch_at=None)
    ApiKey.update(**changes).where(ApiKey.id == key_id).execute()


def set_payload(key_id: str, payload: str) -> None:
    ApiKey.update(webhook_payload=payload).where(ApiKey.id == key_id).execute()


def _is(field, value):
    """``field`` holds ``value`` (SQL's ``= NULL`` is never true)."""
    return field.is_null() if value is None else field == value


def replace_secret(key_id: str, *, secret_enc: str, was_secret_enc: str | None, was_next_secret_enc: str | None,
                   model: type[Holder] = ApiKey) -> int:
    """Make ``secret_enc`` the only secret of the key (or the endpoint of ``model``) if its secrets
    are still ``was_secret_enc`` and ``was_next_secret_enc``; the rows changed (0 or 1)."""
    return (model.update(webhook_secret_enc=secret_enc, webhook_next_secret_enc=None, webhook_secret_switch_at=None)
            .where((model.id == key_id) & _is(model.webhook_secret_enc, was_secret_enc)
                   & _is(model.webhook_next_secret_enc, was_next_secret_enc))
            .execute())


def switch_to_next(key_id: str, next_secret_enc: str | None, model: type[Holder] = ApiKey) -> int:
    """Make the next secret the only one, if it is still ``next_secret_enc``; the rows changed."""
    return (model.update(webhook_secret_enc=next_secret_enc, webhook_next_secret_enc=None,
                         webhook_secret_switch_at=None)
            .where((model.id == key_id) & (model.webhook_next_secret_enc == next_secret_enc))
            .execute())


def start_rotation(key_id: str, *, next_secret_enc: str, switch_at: datetime, was_secret_enc: str | None,
                   model: type[Holder] = ApiKey) -> int:
    """Give the key (or endpoint) the next secret ``next_secret_enc`` until ``switch_at``, if it has
    none and its secret is still ``was_secret_enc``; the rows changed."""
    return (model.update(webhook_next_secret_enc=next_secret_enc, webhook_secret_switch_at=switch_at)
            .where((model.id == key_id) & model.webhook_next_secret_enc.is_null()
                   & _is(model.webhook_secret_enc, was_secret_enc))
            .execute())
