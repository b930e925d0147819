"""Watches: a target scanned again on a schedule.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
A watch's scans are creations (``app.intake``) with the watch's part of the admission
(``admission``): the watches stand above intake and every domain it uses. What privacy and tracking
ask of the watches (a person's open watches and ending them on an opt-out, a finished watch scan
compared with the previous one) is handed to them at start by ``app.create_app``; so is a watch's
changes to the scan page. No domain imports the watches."""

OFFERS = ()
