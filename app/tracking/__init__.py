"""Tracking: a scan in flight until its final state: the batch looks, the engine's client and
callbacks, the sandbox engine and its simulated results, and the recovery sweep.

Offers: ``states`` (state changes and the rules of a look), ``looks``, ``engine``, ``sandbox_engine``,
``callbacks``, ``recovery``."""
