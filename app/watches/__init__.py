"""Watches: a target scanned again on a schedule.

Offers: ``watchlist`` (create, read, change, end, run due), ``watch_times``, ``watch_changes``, ``models``."""
