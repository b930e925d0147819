"""Watches: a target scanned again on a schedule.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
A watch's scans are creations of scans with the watch's part of the admission (``admission``); an
opt-out finds the open watches of a target (``statements``), and a look's final state compares a
watch's scans (``watch_changes``)."""

OFFERS = (
    "statements",
    "watch_changes",
    "watch_times",
)
