"""Watches: a target scanned again on a schedule.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
A creation with a watch writes the watch's rows in its admission, and an opt-out finds the open
watches of a target (``statements``)."""

OFFERS = (
    "statements",
    "watch_changes",
    "watch_times",
)
