"""Frozen copies of rules as an old migration ran them.

A migration must mean tomorrow what it meant the day it was written, so it never imports a
live rule (a domain's rules, ``app/<domain>/``): what it used is copied here, once, and never edited. Only
``app/migrations.py`` imports these modules; they import nothing of the project
(``tests/unit/test_migrations_frozen.py``).
"""
