"""Tracking: a scan in flight until its final state: the batch looks, the engine's callbacks,
the sandbox engine and its simulated results (the engine's client is the plumbing's).

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "looks",
    "sandbox_engine",
    "states",
)
