"""Billing: credits and the ledger, quotas, limits, usage, idempotency of creations and the activity
log (what each call did and cost)."""
