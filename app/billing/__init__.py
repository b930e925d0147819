"""Billing: what a call costs: prices and charges, quota windows, tier limits, usage, and
idempotency (a creation charged once).

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
The served read's one statement charges with ``statements.balances``; erasure forgets the
stored answers naming erased scans with ``statements.idempotency``, in its transaction."""

OFFERS = (
    "charges",
    "idempotency",
    "limits",
    "quotas",
    "usage",
    "statements.balances",
    "statements.idempotency",
)
