"""Events: the registry of event kinds, the stored feed and its stream.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "feed",
    "kinds",
    "schemas",  # the reads' ?wait=N and the creations' webhook callbacks, in the OpenAPI document
    "waits",
)
