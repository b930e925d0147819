"""Billing: what a call costs: prices and charges, the refund of a scan that missed its rule, quota
windows, tier limits, usage, and idempotency (a creation charged once); the served read (a key, its
charge and the scan or batch it reads, one statement); the account's read (``GET /api/v1/account``:
its routes and schemas) and a customer's money and limits as the operator sees and moves them
(``customers``: a new customer's initial credits, credits added or taken back, the overview, the
quota counters rebuilt). Billing stands above the accounts and the scans: it uses their customers,
keys and scans (the quota windows count the scans' rows), and they import nothing of it.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
Erasure forgets the stored answers naming erased scans with ``statements.idempotency``, in its
transaction."""

OFFERS = (
    "charges",
    "idempotency",
    "limits",
    "models",
    "quotas",
    "refunds",
    "usage",
    "statements.idempotency",
    "statements.served_reads",
)
