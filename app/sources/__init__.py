"""Sources: the engine's sources, their health, probes, quarantine and the public status page.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "health",
)
