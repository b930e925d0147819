"""Webhooks: a key's endpoints and settings, the delivery rows written with each event, their
attempts and signatures, and the SSRF guard.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
Erasure empties the bodies of erased scans' deliveries in its transaction (``statements.deliveries``)."""

OFFERS = (
    "deliveries",
    "key_settings",
    "models",
    "outbox",
    "statements.deliveries",
)
