"""Scans: a scan's target, creation, result and reads, including a read that waits (``?wait``).

Offers: ``creation`` (admission, submission, reversal), ``bulk``, ``reads``, ``waits``, ``results``,
``findings``, ``confidence``, ``required``, ``purposes``, ``targets`` (validation and a target's
identity), ``models``."""
