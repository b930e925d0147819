"""Sources: the engine's sources, their health, probes, quarantine and the public status page.

Offers: ``health``, ``probes``, ``status``, ``models``."""
