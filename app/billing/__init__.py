"""Billing: what a call costs: prices and charges, quota windows, tier limits, usage, and
idempotency (a creation charged once); the account's read (``GET /api/v1/account``: its routes and
schemas) and a customer's money and limits as the operator sees and moves them (``customers``: a new
customer's initial credits, credits added or taken back, the overview, the quota counters rebuilt).
Billing stands above the accounts: it uses their customers and keys, and they import nothing of it.

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
