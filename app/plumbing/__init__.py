"""The floor below the domains: the database and its transactions, settings, Redis, jobs'
queues, logging, metrics' counters, domain errors, an operator's input checked, crypto, paging and
the signature scheme.
It imports no domain and nothing above it (tests/unit/test_layers.py)."""
