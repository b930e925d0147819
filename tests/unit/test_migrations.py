"""Versioned migrations: idempotent, and a later schema change keeps existing rows."""
from playhouse.migrate import migrate, PostgresqlMigrator, SqliteMigrator
from peewee import TextField

from app import migrations
from app.db import is_sqlite
from app.extensions import db
from app.models import Customer, SchemaVersion
from app.services import accounts


def test_upgrade_twice_changes_nothing(app):
    with db.connection_context():
        before = migrations.current_version()
        assert migrations.upgrade() == []
        assert migrations.current_version() == before == migrations.MIGRATIONS[-1][0]


def test_a_new_migration_is_applied_once_and_keeps_rows(app, monkeypatch):
    with db.connection_context():
        customer = accounts.create_customer("Kept", "pro", 5)

        def add_column(database):
            migrator = SqliteMigrator(database) if is_sqlite() else PostgresqlMigrator(database)
            migrate(migrator.add_column("customer", "notes", TextField(null=True)))

        version = migrations.MIGRATIONS[-1][0] + 1
        monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, (version, "customer notes", add_column)])
        try:
            assert migrations.upgrade() == [version]
            assert migrations.upgrade() == []  # idempotent
            columns = {c.name for c in db.get_columns("customer")}
            assert "notes" in columns
            assert Customer.get_by_id(customer.id).balance == 5
        finally:
            with db.atomic():
                migrate((SqliteMigrator(db.obj) if is_sqlite() else PostgresqlMigrator(db.obj))
                        .drop_column("customer", "notes"))
                SchemaVersion.delete().where(SchemaVersion.version == version).execute()
