"""Targets: a target's validation and kind inference (D4, in the order D2 fixes) and its identity
wherever a target is matched (D25: one canonical form, its keyed hashes, the opt-outs' key).

Its own domain, below every domain that matches on a target (scans' creations, the activity log's
filter, opt-outs, watches): it uses none of them.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "identity",
    "schemas",  # the target's patterns and field in the OpenAPI document
)
