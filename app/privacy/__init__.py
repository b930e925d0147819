"""Privacy: personal data: retention and erasure, opt-outs, data-subject requests, and whether
the database would log statement text.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "erasure",
    "suppressions",
)
