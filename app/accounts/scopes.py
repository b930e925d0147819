"""The scopes a key may carry (D21), in one registry: each domain declares the scopes its views
need in its own package (``app/<domain>/scopes.py``: ``SCOPES``, e.g. the watches'), each with the
words the README, the OpenAPI document and the portal show; D21's own are the accounts', here.

A new scope is one entry in its domain's ``scopes`` module and the views that declare it
(``hooks.api_call(scope=...)``); ``app.declared``, which ``import app`` runs first, declares every
domain's to this registry before any module can read it (``app.accounts.access`` reads it at
import). The database gives a scope declared since its last upgrade to the keys that held every
scope before it (``app.migrations.upgrade``): a new scope needs no migration of its own. This module
imports nothing of the app but the plumbing's registry, so that the declaring modules stay light.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.plumbing.registry import Registry


@dataclass(frozen=True)
class Scope:
    name: str   # as a key lists it and a view declares it
    words: str  # what it allows, as customers read it


SCANS_WRITE = "scans:write"
SCANS_READ = "scans:read"
SCANS_ERASE = "scans:erase"
WEBHOOKS = "webhooks"
ACTIVITY_READ = "activity:read"
# D21's, first in the lists customers read (the accounts come first of the domains by name).
SCOPES = (
    Scope(SCANS_WRITE, "create scans, one at a time and in bulk, re-run them, and give feedback on their findings"),
    Scope(SCANS_READ, "read scans and bulk batches, list scans"),
    Scope(SCANS_ERASE, "erase scans and bulk batches"),
    Scope(WEBHOOKS, "list webhook deliveries and send them again, manage webhook endpoints"),
    Scope(ACTIVITY_READ, "read the account's activity log"),
)

# Every domain's scopes, in the order customers read them (``app.declared`` declares them).
REGISTRY: Registry[Scope] = Registry("scopes", lambda scope: scope.name)


def every_scope() -> tuple[Scope, ...]:
    """Every scope, in the order customers read them."""
    return REGISTRY.items()
