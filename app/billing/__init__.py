"""Billing: what a call costs: prices and charges, quota windows, tier limits, usage, and
idempotency (a creation charged once).

Offers: ``charges``, ``quotas``, ``limits``, ``usage``, ``idempotency``."""
