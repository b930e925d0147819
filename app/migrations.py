"""Versioned, idempotent schema migrations (``flask --app wsgi db upgrade``).

A fresh database is created from the models and stamped with every version, the
"create all, stamp head" approach: the models are the schema's truth. An existing
database gets only the migrations it has not recorded in ``schema_version``, each in
its own transaction, so a later schema change (``playhouse.migrate`` operations
appended to ``MIGRATIONS``) upgrades a database without losing rows. Running the
command again changes nothing.
"""
from __future__ import annotations

import logging

from app.extensions import db
from app.models import ALL_MODELS, SchemaVersion

log = logging.getLogger(__name__)


def _initial(database):
    database.create_tables(ALL_MODELS, safe=True)


# (version, name, function(database)). Append only; never edit an applied one.
MIGRATIONS = [
    (1, "initial schema", _initial),
]


def applied_versions() -> set[int]:
    if not db.table_exists(SchemaVersion._meta.table_name):
        return set()
    return {row.version for row in SchemaVersion.select(SchemaVersion.version)}


def upgrade() -> list[int]:
    """Bring the schema to the newest version; returns the versions applied now."""
    done = applied_versions()
    applied = []
    if not done and not any(db.table_exists(m._meta.table_name) for m in ALL_MODELS[1:]):
        with db.atomic():
            db.create_tables(ALL_MODELS, safe=True)
            for version, name, _ in MIGRATIONS:
                SchemaVersion.create(version=version, name=name)
                applied.append(version)
        log.info("created schema at version %s", MIGRATIONS[-1][0])
        return applied
    db.create_tables([SchemaVersion], safe=True)
    for version, name, migrate in MIGRATIONS:
        if version in done:
            continue
        with db.atomic():
            migrate(db.obj)
            SchemaVersion.create(version=version, name=name)
        applied.append(version)
        log.info("applied migration %s: %s", version, name)
    return applied


def current_version() -> int:
    done = applied_versions()
    return max(done) if done else 0
