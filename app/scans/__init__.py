"""Scans: a scan's rows, result and reads, including a read that waits (``?wait``); a target's
validation and identity are ``app.targets``', a scan's creation ``app.intake``'s (above scans).

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
Erasure, a look's final state and a watch's comparison read and write scans' rows in their own
transactions (``statements``)."""

OFFERS = (
    "confidence",
    "findings",
    "models",
    "purposes",
    "reads",
    "required",
    "results",
    "schemas",
    "statements",
)
