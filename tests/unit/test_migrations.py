"""Versioned migrations: idempotent, and a later schema change keeps existing rows."""
from peewee import TextField
from playhouse.migrate import PostgresqlMigrator, migrate

from app import migrations
from app.accounts import admin
from app.accounts.models import Customer
from app.billing import customers
from app.extensions import db
from app.schema_version import SchemaVersion
from app.webhooks import key_settings
from tests.domain_fixtures import call_entry


def test_upgrade_twice_changes_nothing(app):
    with db.connection_context():
        before = migrations.current_version()
        assert migrations.upgrade() == []
        assert migrations.current_version() == before == migrations.MIGRATIONS[-1][0]


def test_versions_only_grow_and_the_never_assigned_3_stays_unused():
    """``upgrade`` applies what a database lacks in list order: a version below the last, 3
    included (never assigned), would run on a database after everything it assumes."""
    versions = [version for version, _, _ in migrations.MIGRATIONS]
    assert versions == sorted(set(versions)) and 3 not in versions


def test_every_absent_version_is_explained_where_the_versions_are_listed():
    """An operator reading the list sees why a number is missing (18 was not said, and the note on
    3 had drifted above another function, away from the list)."""
    import inspect
    versions = {version for version, _, _ in migrations.MIGRATIONS}
    absent = sorted(set(range(1, max(versions))) - versions)
    source = inspect.getsource(migrations)
    note = source[:source.index("\nMIGRATIONS = [")].rsplit("\n\n", 1)[-1]  # the comment just above the list
    assert absent == [3, 18] and "Versions 3 and 18 are absent on purpose" in note


def test_a_new_migration_is_applied_once_and_keeps_rows(app, monkeypatch):
    with db.connection_context():
        customer = customers.create_customer("Kept", "pro", 5)

        def add_column(database):
            migrator = PostgresqlMigrator(database)
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
                migrate(PostgresqlMigrator(db.obj)
                        .drop_column("customer", "notes"))
                SchemaVersion.delete().where(SchemaVersion.version == version).execute()


def test_quota_counters_migration_fills_them_from_existing_scans(app):
    """A version-1 database with scans: version 2 adds the counters with the right values."""
    from datetime import timedelta

    from app.accounts.models import ApiKey
    from app.billing import quotas
    from app.billing.models import QuotaMinute
    from app.plumbing.models import new_id, utcnow
    from app.scans.models import Scan

    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        key, _ = admin.issue_key(customer.id, "k")
        now = utcnow()
        statuses = ["queued", "running", "completed", "failed", "queued"]
        ages = [timedelta(seconds=10), timedelta(minutes=30), timedelta(hours=2), timedelta(hours=23),
                timedelta(days=2)]
        for status, age in zip(statuses, ages):
            Scan.create(id=new_id("scn"), customer=customer.id, api_key=key.id, kind="email",
                        target="a@example.com", status=status, created_at=now - age)
        # Back to version 1: no counters, the old indexes.
        migrator = PostgresqlMigrator(db.obj)
        with db.atomic():
            db.drop_tables([QuotaMinute])
            migrate(migrator.drop_column("customer", "in_flight"))
            for name in ("scan_in_flight_customer", "scan_in_flight_last_checked"):
                db.execute_sql(f'DROP INDEX IF EXISTS "{name}"')  # the second one went with migration 22
            for name, columns in (("scan_customer_id", "customer_id"), ("scan_api_key_id", "api_key_id"),
                                  ("scan_customer_id_status", "customer_id, status"),
                                  ("scan_status_last_checked_at", "status, last_checked_at")):
                db.execute_sql(f'CREATE INDEX "{name}" ON "scan" ({columns})')
            SchemaVersion.delete().where(SchemaVersion.version >= 2).execute()
        assert ApiKey.get_by_id(key.id)  # nothing else lost

        assert migrations.upgrade() == [m[0] for m in migrations.MIGRATIONS[1:]]

        assert Customer.get_by_id(customer.id).in_flight == 3  # the two queued and the running one
        usage = quotas.window_usage(customer.id, now)
        assert (usage.hour, usage.day) == (2, 4)
        names = {i.name for i in db.get_indexes("scan")}
        assert {"scan_customer_id_created_at", "scan_bulk_id_bulk_index", "scan_in_flight_customer"} <= names
        assert not names & {"scan_customer_id", "scan_api_key_id", "scan_customer_id_status",
                            "scan_status_last_checked_at", "scan_in_flight_last_checked"}
        assert Customer.get_by_id(customer.id).balance == 5
        assert Scan.select().where(Scan.customer == customer.id).count() == 5


def test_portal_sessions_migration_adds_the_table_and_the_disabled_flag(app):
    """A database from before version 4: its users gain ``disabled`` (false) and can hold sessions."""
    from app.accounts import portal_users
    from app.accounts.models import PortalSession, PortalUser

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 0)
        user = admin.create_user(customer.id, "old@acme.example", "long enough password")
        with db.atomic():
            db.drop_tables([PortalSession])
            db.execute_sql('ALTER TABLE "portal_user" DROP COLUMN "disabled"')
            SchemaVersion.delete().where(SchemaVersion.version == 4).execute()
        assert "portal_session" not in db.get_tables()

        assert migrations.upgrade() == [4]
        assert migrations.upgrade() == []

        assert PortalUser.get_by_id(user.id).disabled is False
        token = portal_users.start_session(user)
        assert portal_users.session_user(token).id == user.id
        assert PortalSession.select().count() == 1


def test_test_mode_migration_marks_existing_rows_live_and_counts_windows_per_mode(app):
    """A database from before version 6: every key, scan and batch becomes live, the counters
    are rebuilt with the mode in their key, and an Idempotency-Key is unique per mode."""
    from app.accounts.models import ApiKey
    from app.billing import quotas
    from app.billing.models import IdempotencyRecord, QuotaMinute
    from app.plumbing.models import new_id, utcnow
    from app.scans.models import Scan

    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        key, _ = admin.issue_key(customer.id, "k")
        now = utcnow()
        Scan.create(id=new_id("scn"), customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                    status="completed", created_at=now)
        IdempotencyRecord.create(customer=customer.id, key="k1", endpoint="/api/v1/scan", request_hash="h")
        # Back to version 5: no mode anywhere, the counters keyed by (customer, minute).
        with db.atomic():
            db.execute_sql('DROP INDEX "idempotency_record_customer_id_livemode_key"')
            db.execute_sql('CREATE UNIQUE INDEX "idempotency_record_customer_id_key" '
                           'ON "idempotency_record" ("customer_id", "key")')
            for name in ("api_key", "bulk_batch", "scan", "webhook_delivery", "idempotency_record"):
                db.execute_sql(f'ALTER TABLE "{name}" DROP COLUMN "livemode"')
            db.execute_sql('ALTER TABLE "customer" DROP COLUMN "test_in_flight"')
            db.drop_tables([QuotaMinute])
            db.execute_sql('CREATE TABLE "quota_minute" ("customer_id" VARCHAR(40) NOT NULL, "minute" TIMESTAMP '
                           'NOT NULL, "scans" INTEGER NOT NULL, PRIMARY KEY ("customer_id", "minute"))')
            SchemaVersion.delete().where(SchemaVersion.version == 6).execute()

        assert migrations.upgrade() == [6]
        assert migrations.upgrade() == []

        assert ApiKey.get_by_id(key.id).livemode is True
        assert Scan.get(Scan.customer == customer.id).livemode is True
        assert Customer.get_by_id(customer.id).test_in_flight == 0
        assert quotas.window_usage(customer.id, utcnow()).day == 1
        assert quotas.window_usage(customer.id, utcnow(), livemode=False).day == 0
        assert IdempotencyRecord.get(IdempotencyRecord.key == "k1").livemode is True
        # The same key in test mode is another request.
        IdempotencyRecord.create(customer=customer.id, key="k1", endpoint="/api/v1/scan", request_hash="h",
                                 livemode=False)
        assert Customer.get_by_id(customer.id).balance == 5


def test_the_idempotency_endpoint_holds_a_redelivery_path(app):
    """Version 7: an Idempotency-Key's endpoint is the request's path, and a redelivery's is
    longer than the 40 characters version 1 allowed (PostgreSQL refused it: a 500)."""
    from app.billing.models import IdempotencyRecord

    path = "/api/v1/deliveries/dlv_" + "x" * 22 + "/redeliver"
    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        with db.atomic():
            db.execute_sql('ALTER TABLE "idempotency_record" ALTER COLUMN "endpoint" TYPE VARCHAR(40)')
            SchemaVersion.delete().where(SchemaVersion.version == 7).execute()
        assert migrations.upgrade() == [7]
        IdempotencyRecord.create(customer=customer.id, key="k1", endpoint=path, request_hash="h")
        assert IdempotencyRecord.get(IdempotencyRecord.key == "k1").endpoint == path


def _activity_table_shape() -> dict:
    """What makes the activity log's table: partitioned by range on created_at with a DEFAULT
    partition, its columns and the indexes of the parent (every partition gets them)."""
    def rows(sql):
        return db.execute_sql(sql).fetchall()

    return {
        "kind": rows("SELECT c.relkind, p.partstrat, pg_get_partkeydef(c.oid) FROM pg_class c "
                     "JOIN pg_partitioned_table p ON p.partrelid = c.oid WHERE c.relname = 'activity_entry'"),
        "default": rows("SELECT d.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
                        "JOIN pg_class d ON d.oid = p.partdefid WHERE c.relname = 'activity_entry'"),
        "columns": rows("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                        "WHERE table_name = 'activity_entry' ORDER BY ordinal_position"),
        "indexes": sorted(rows("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'activity_entry'")),
    }


def test_the_activity_log_migration_builds_the_table_a_fresh_database_has(app):
    """Version 10 on a database from before it: the same partitioned table, DEFAULT partition and
    indexes as ``create_tables(ALL_MODELS)`` made for the test session's fresh schema."""
    from app.activity import entries
    from app.activity.models import ActivityEntry
    from app.activity.statements import entries as store

    with db.connection_context():
        fresh = _activity_table_shape()
        assert fresh["kind"] == [("p", "r", "RANGE (created_at)")]
        assert fresh["default"] == [("activity_entry_default",)]
        assert {name for name, _ in fresh["indexes"]} == {
            "activity_entry_pkey", "activity_entry_customer_id_livemode_created_at_id",
            "activity_entry_customer_id_livemode_xact_created_at_id",
            "activity_entry_target_hashes", "activity_entry_resource"}
        with db.atomic():
            db.drop_tables([ActivityEntry], cascade=True)
            SchemaVersion.delete().where(SchemaVersion.version == 10).execute()
        assert "activity_entry" not in db.get_tables()

        assert migrations.upgrade() == [10]
        assert migrations.upgrade() == []

        assert _activity_table_shape() == fresh
        entry_id = entries.record(customer_id="cus_x", livemode=True, action="scan.read", status=200)
        assert store.partition_of(entry_id) == "activity_entry_default"  # no day partition yet: nothing lost


def test_key_access_migration_gives_existing_keys_every_scope_no_expiry_and_no_allowlist(app):
    """A database from before version 12 (D21): its keys keep doing what they did."""
    from app.accounts.models import ApiKey

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 0)
        key, _ = admin.issue_key(customer.id, "old key")
        with db.atomic():
            for column in ("scopes", "expires_at", "allowed_ips"):
                db.execute_sql(f'ALTER TABLE "api_key" DROP COLUMN "{column}"')
            SchemaVersion.delete().where(SchemaVersion.version == 12).execute()

        assert migrations.upgrade() == [12]
        assert migrations.upgrade() == []
        # Every scope of its day (the migration holds them: a scope added since is not one of them) ...
        assert ApiKey.get_by_id(key.id).scopes == ["scans:write", "scans:read", "scans:erase", "webhooks",
                                                   "activity:read"]
        # ... and the watches migration, after it on a real upgrade, adds the one that came later.
        with db.atomic():
            SchemaVersion.delete().where(SchemaVersion.version == 25).execute()
        assert migrations.upgrade() == [25]

        key = ApiKey.get_by_id(key.id)
        # (a scope declared after version 35 is given by the upgrade's last step, tested on its own below)
        assert (key.scopes, key.expires_at, key.allowed_ips) == (list(migrations._SCOPES_35), None, None)
        # and a new key is still issued as the operator says
        narrow, _ = admin.issue_key(customer.id, "new key", scopes="scans:read")
        assert ApiKey.get_by_id(narrow.id).scopes == ["scans:read"]


def test_roles_and_two_factor_migration_makes_existing_users_owners(app):
    """A database from before version 14: its users become owners without a second factor, and
    customers do not require one."""
    from app.accounts.models import PortalRecoveryCode, PortalUser

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 0)
        user = admin.create_user(customer.id, "old@acme.example", "long enough password")
        with db.atomic():
            db.drop_tables([PortalRecoveryCode])
            for column in ("role", "password_token_digest", "password_token_expires_at", "totp_secret_enc",
                           "totp_enabled_at", "totp_last_step"):
                db.execute_sql(f'ALTER TABLE "portal_user" DROP COLUMN "{column}"')
            db.execute_sql('ALTER TABLE "customer" DROP COLUMN "require_2fa"')
            SchemaVersion.delete().where(SchemaVersion.version == 14).execute()

        assert migrations.upgrade() == [14]
        assert migrations.upgrade() == []

        migrated = PortalUser.get_by_id(user.id)
        assert migrated.role == "owner" and migrated.totp_enabled_at is None
        assert Customer.get_by_id(customer.id).require_2fa is False
        assert "portal_recovery_code" in db.get_tables()


def test_the_results_explained_migration_adds_rerun_of_feedback_and_explains_stored_results(app):
    """Version 13 (D23): a result stored before it gains an empty explanation and its findings, once."""
    import json

    from app.plumbing.models import new_id, utcnow
    from app.scans.models import FindingFeedback, Scan

    old_result = {"risk": {"score": 12, "band": "low"}, "counts": {"cases": 1, "entities": 1, "findings": 1},
                  "profiles": {"verified": [], "weak": []}, "contacts": {"emails": ["a@example.com"], "phones": []},
                  "breaches": [], "phone_profile": None, "ai_summary": "", "artifacts": {"pdf": "", "person_card": ""}}
    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        key, _ = admin.issue_key(customer.id, "k")
        scan_id = new_id("scn")
        Scan.create(id=scan_id, customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                    status="completed", created_at=utcnow(), result_json=json.dumps(old_result))
        with db.atomic():
            db.drop_tables([FindingFeedback])
            db.execute_sql('ALTER TABLE "scan" DROP COLUMN "rerun_of"')
            SchemaVersion.delete().where(SchemaVersion.version == 13).execute()

        assert migrations.upgrade() == [13]
        stored = Scan.get_by_id(scan_id).result_json
        assert migrations.upgrade() == []

        result = json.loads(stored)
        assert result["sources"] == [] and result["partial"] is False and result["risk"]["reasons"] == []
        assert result["coverage"] == {"checked": 0, "found": 0, "failed": 0, "ratio": 1.0}
        assert [f["path"] for f in result["findings"]] == ["contacts.emails[0]"]
        assert {k: result[k] for k in old_result if k != "risk"} == {k: v for k, v in old_result.items() if k != "risk"}
        assert Scan.get_by_id(scan_id).rerun_of is None and FindingFeedback.select().count() == 0


def test_the_summed_reads_migration_adds_the_columns_and_the_minute_index(app):
    """A database from before version 16: its ledger rows stay movements of their own, and the
    next reads are summed into their minute's row (D24). Running it again changes nothing."""
    from app.accounts.models import READS_MINUTE_INDEX, CreditLedger
    from app.billing import charges
    from app.plumbing.models import utcnow

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 5)
        with db.atomic():
            db.execute_sql(f'DROP INDEX "{READS_MINUTE_INDEX}"')
            for column in ("livemode", "minute", "reads"):
                db.execute_sql(f'ALTER TABLE "credit_ledger" DROP COLUMN "{column}"')
            SchemaVersion.delete().where(SchemaVersion.version == 16).execute()

        assert migrations.upgrade() == [16]
        assert migrations.upgrade() == []
        with db.atomic():
            migrations._summed_reads(db.obj)  # idempotent on its own too

        assert {"livemode", "minute", "reads"} <= {c.name for c in db.get_columns("credit_ledger")}
        [index] = [i for i in db.get_indexes("credit_ledger") if i.name == READS_MINUTE_INDEX]
        assert index.unique and index.columns == ["customer_id", "livemode", "note", "minute"]
        now = utcnow()
        for _ in range(2):
            charges.charge_call(customer.id, None, now, "GET /api/v1/account", read_of=True,
                                entry=call_entry(customer.id))
        rows = [(r.reason, r.reads, r.delta) for r in
                CreditLedger.select().where(CreditLedger.customer == customer.id).order_by(CreditLedger.id)]
        assert rows == [("grant", None, 5), ("reads", 2, -2)]
        assert charges.ledger_sum(customer.id) == charges.balance_of(customer.id) == 3


def test_the_webhook_endpoints_migration_makes_each_keys_url_its_first_endpoint(app):
    """Version 15 (D22): the endpoints table, the first endpoint's columns on the key, and each
    delivery written before naming its key's first endpoint."""
    from app.accounts.models import ApiKey
    from app.webhooks import outbox
    from app.webhooks.models import WebhookDelivery, WebhookEndpoint

    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        key, _ = key_settings.issue_key(customer.id, "k", "https://hooks.example.com/a")
        delivery = outbox.send_test_event(key.id, customer.id)
        with db.atomic():
            db.drop_tables([WebhookEndpoint])
            db.execute_sql('DROP INDEX "webhook_delivery_endpoint_id_created_at"')
            db.execute_sql('ALTER TABLE "webhook_delivery" DROP COLUMN "endpoint_id"')
            for column in ("webhook_events", "webhook_enabled", "webhook_description", "webhook_disabled_at"):
                db.execute_sql(f'ALTER TABLE "api_key" DROP COLUMN "{column}"')
            SchemaVersion.delete().where(SchemaVersion.version == 15).execute()

        assert migrations.upgrade() == [15]
        assert migrations.upgrade() == []
        assert WebhookDelivery.get_by_id(delivery.id).endpoint_id == outbox.first_endpoint_id(key.id)
        migrated = ApiKey.get_by_id(key.id)
        assert (migrated.webhook_events, migrated.webhook_enabled, migrated.webhook_description) == (None, True, "")
        assert WebhookEndpoint.select().count() == 0


def test_the_engine_deletions_migration_takes_the_engine_ids_of_scans_erased_before(app):
    """Version 19 (D25): scans erased before keep no engine id; a live one's becomes a deletion to
    ask the engine for, a test one's (the sandbox's) goes."""
    from app.plumbing.models import utcnow
    from app.privacy.models import EngineDeletion
    from app.scans.models import Scan
    from tests.domain_fixtures import new_customer, new_scan

    with db.connection_context():
        cust, key = new_customer()
        _, test_key = new_customer(livemode=False)
        live, kept, sandboxed = new_scan(cust, key), new_scan(cust, key), new_scan(test_key.customer, test_key)
        live_engine_id, kept_engine_id = live.engine_id, kept.engine_id
        with db.atomic():
            db.drop_tables([EngineDeletion])
            Scan.update(erased_at=utcnow(), status="completed").where(Scan.id.in_([live.id, sandboxed.id])).execute()
            SchemaVersion.delete().where(SchemaVersion.version == 19).execute()

        assert migrations.upgrade() == [19]
        assert migrations.upgrade() == []
        assert [Scan.get_by_id(s.id).engine_id for s in (live, kept, sandboxed)] == [None, kept_engine_id, None]
        assert [row.engine_id for row in EngineDeletion.select()] == [live_engine_id]


def test_the_findings_identity_migration_indexes_feedback_by_finding_and_names_its_scan(app):
    """Version 20 (D26): the index that finds a finding's feedback in any scan, and every feedback
    stored in a result names the scan it was given on (the one it is in); the rest is untouched."""
    import json

    from app.plumbing.models import new_id, utcnow
    from app.scans.models import Scan

    feedback = {"verdict": "false_positive", "note": "not her", "at": "2026-11-21T12:00:00Z"}
    stored = {"risk": {"score": 0, "band": "low", "reasons": []}, "contacts": {"emails": ["a@example.com"]},
              "findings": [{"id": "fnd_a", "path": "contacts.emails[0]", "source_ids": [], "feedback": feedback},
                           {"id": "fnd_b", "path": "breaches[0]", "source_ids": [], "feedback": None}]}
    with db.connection_context():
        customer = customers.create_customer("Old", "business", 5)
        key, _ = admin.issue_key(customer.id, "k")
        with_feedback, without = new_id("scn"), new_id("scn")
        plain = {**stored, "findings": [{**f, "feedback": None} for f in stored["findings"]]}
        for scan_id, result in ((with_feedback, stored), (without, plain)):
            Scan.create(id=scan_id, customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                        status="completed", created_at=utcnow(), result_json=json.dumps(result))
        untouched = Scan.get_by_id(without).result_json
        with db.atomic():
            db.execute_sql('DROP INDEX "finding_feedback_finding_id"')
            SchemaVersion.delete().where(SchemaVersion.version == 20).execute()

        assert migrations.upgrade() == [20]
        assert migrations.upgrade() == []
        indexes = {index.name for index in db.get_indexes("finding_feedback")}
        assert "finding_feedback_finding_id" in indexes
        result = json.loads(Scan.get_by_id(with_feedback).result_json)
        assert result["findings"][0]["feedback"] == {**feedback, "scan_id": with_feedback}
        assert result["findings"][1] == stored["findings"][1]
        assert Scan.get_by_id(without).result_json == untouched


def test_the_request_ids_migration_widens_the_ledger_and_activity_columns_to_128(app):
    """Version 24 (D1): a database made when request ids had at most 64 characters takes 128."""
    def widths():
        rows = db.execute_sql("SELECT table_name, character_maximum_length FROM information_schema.columns "
                              "WHERE column_name = 'request_id' AND table_name IN ('credit_ledger', 'activity_entry') "
                              "AND table_schema = current_schema()").fetchall()
        return dict(rows)

    with db.connection_context():
        with db.atomic():
            for name in ("credit_ledger", "activity_entry"):
                db.execute_sql(f'ALTER TABLE "{name}" ALTER COLUMN "request_id" TYPE VARCHAR(64)')
            SchemaVersion.delete().where(SchemaVersion.version == 24).execute()
        assert widths() == {"credit_ledger": 64, "activity_entry": 64}

        assert migrations.upgrade() == [24]
        assert migrations.upgrade() == []
        assert widths() == {"credit_ledger": 128, "activity_entry": 128}


def test_the_one_way_to_track_migration_makes_the_chains_scans_due_and_leaves_the_others(app):
    """Migration 22 (D24): each submitted scan in flight a job chain tracked (no due look) is due
    now, its chain's token cleared; a scan the looks track, a final one and one never submitted
    are left as they were; the chains' index goes."""
    from datetime import timedelta

    from app.plumbing.models import new_id, utcnow
    from app.scans.models import Scan

    with db.connection_context():
        customer = customers.create_customer("Chains", "pro", 5)
        key, _ = admin.issue_key(customer.id, "k")
        later = utcnow() + timedelta(hours=1)

        def scan(status, engine_id, next_look_at):
            return Scan.create(id=new_id("scn"), customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                               status=status, engine_id=engine_id, next_look_at=next_look_at,
                               tracking_job_id="trk-x-3").id

        chained = [scan("queued", "inv_1", None), scan("running", "inv_2", None)]
        looked, final, unsubmitted = scan("running", "inv_3", later), scan("completed", "inv_4", None), \
            scan("queued", None, None)
        db.execute_sql('CREATE INDEX IF NOT EXISTS "scan_in_flight_last_checked" ON "scan" ("last_checked_at")')
        with db.atomic():
            migrations._one_way_to_track(db.obj)
        rows = {s.id: s for s in Scan.select().where(Scan.customer == customer.id)}
        assert all(rows[i].next_look_at is not None and rows[i].tracking_job_id is None for i in chained)
        assert (rows[looked].next_look_at, rows[looked].tracking_job_id) == (later, "trk-x-3")
        assert all((rows[i].next_look_at, rows[i].tracking_job_id) == (None, "trk-x-3") for i in (final, unsubmitted))
        assert "scan_in_flight_last_checked" not in {i.name for i in db.get_indexes("scan")}


def test_the_watches_migration_builds_the_table_and_gives_keys_with_every_scope_the_new_one(app):
    """Version 25 on a database from before it (D28): the watch table and indexes a fresh database
    has, the customer's and the scan's new columns; keys that held every scope hold ``watches`` too,
    narrowed keys stay narrow."""
    from app.accounts.models import ApiKey
    from app.watches.models import Watch
    again = [25, 26] + [v for v, _, f in migrations.MIGRATIONS
                        if f in (migrations._opted_out_watches_forget_target, migrations._confidence)]

    def indexes():
        return sorted(db.execute_sql("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'watch'"
                                     " OR indexname = 'scan_watch'").fetchall())

    with db.connection_context():
        fresh = indexes()
        assert {name for name, _ in fresh} >= {"watch_pkey", "watch_due", "watch_optout_hash", "scan_watch"}
        customer = customers.create_customer("Old", "pro", 0)
        every, _ = admin.issue_key(customer.id, "every scope")
        narrow, _ = admin.issue_key(customer.id, "narrow", scopes="scans:read")
        with db.atomic():
            db.drop_tables([Watch], cascade=True)
            db.execute_sql('DROP INDEX "scan_watch"')
            db.execute_sql('ALTER TABLE "scan" DROP COLUMN "watch_id"')
            db.execute_sql('ALTER TABLE "customer" DROP COLUMN "watch_limit"')
            db.execute_sql("UPDATE \"api_key\" SET \"scopes\" = array_remove(\"scopes\", 'watches')")
            # Later versions change the watch table too (its target nullable once an opt-out ended
            # it; min_confidence and required, D29): the table dropped lost them, so they run again.
            SchemaVersion.delete().where(SchemaVersion.version.in_(again)).execute()

        assert migrations.upgrade() == again
        assert migrations.upgrade() == []

        assert indexes() == fresh
        assert "watches" in ApiKey.get_by_id(every.id).scopes
        assert ApiKey.get_by_id(narrow.id).scopes == ["scans:read"]
        assert {"watch_id"} <= {c.name for c in db.get_columns("scan")}


def test_the_watch_slots_migration_numbers_each_customer_s_open_watches_per_mode_and_interval(app):
    """Version 26 (D28's spread): each watch not ended takes its place among its customer's of the
    same mode and interval, oldest first; ended ones take none; due times already set stay."""
    from datetime import datetime, timedelta

    from app.watches.models import Watch

    with db.connection_context():
        customer = customers.create_customer("Slots", "pro", 0)
        key, _ = admin.issue_key(customer.id, "k")
        start = datetime(2026, 11, 1, 9, 0)

        def watch(n, interval="daily", status="active", livemode=True):
            return Watch.create(id=f"wch_m{n}", customer=customer.id, api_key=key.id, livemode=livemode, kind="email",
                                target=f"u{n}@example.com", optout_hash="h", interval=interval, status=status,
                                created_at=start + timedelta(minutes=n), next_scan_at=start + timedelta(days=1)).id

        ids = [watch(0), watch(1, status="ended"), watch(2, status="paused"), watch(3, interval="weekly"),
               watch(4, livemode=False), watch(5)]
        fresh = db.execute_sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'watch_slot'").fetchall()
        assert fresh
        with db.atomic():
            db.execute_sql('ALTER TABLE "watch" DROP COLUMN "slot"')
            SchemaVersion.delete().where(SchemaVersion.version == 26).execute()
        assert migrations.upgrade() == [26]
        rows = {w.id: w for w in Watch.select()}
        assert [rows[i].slot for i in ids] == [0, None, 1, 0, 0, 2]
        assert all(rows[i].next_scan_at == start + timedelta(days=1) for i in ids)
        assert db.execute_sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'watch_slot'").fetchall() == fresh


def test_the_opted_out_watches_migration_forgets_their_targets_and_those_of_their_events(app):
    """A watch ended by an opt-out before keeps no identifier after the upgrade: its target and
    opt-out hash, and the target of its watch.ended event and delivery, are gone; others stay."""
    import json

    from app.events.models import Event
    from app.watches.models import Watch
    from app.webhooks.models import WebhookDelivery
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._opted_out_watches_forget_target]
    with db.connection_context():
        customer = customers.create_customer("Forget", "pro", 0)
        key, _ = admin.issue_key(customer.id, "k")

        def watch(n, **fields):
            return Watch.create(id=f"wch_f{n}", customer=customer.id, api_key=key.id, kind="email",
                                target=f"u{n}@example.com", optout_hash=f"h{n}", interval="daily", **fields).id

        ended, kept = watch(0, status="ended", end_reason="target_suppressed"), watch(1)
        body = json.dumps({"event": "watch.ended", "watch_id": ended, "target": "u0@example.com", "kind": "email"})
        changed = json.dumps({"event": "watch.changed", "watch_id": kept, "target": "u1@example.com"})
        Event.create(customer=customer.id, livemode=True, kind="watch.ended", watch_id=ended, body=body)
        Event.create(customer=customer.id, livemode=True, kind="watch.changed", watch_id=kept, body=changed)
        WebhookDelivery.create(id="dlv_f0", customer=customer.id, api_key=key.id, event="watch.ended",
                               url="https://hooks.example.com/w", body=body)
        with db.atomic():
            db.execute_sql('ALTER TABLE "watch" ALTER COLUMN "target" SET NOT NULL, '
                           'ALTER COLUMN "optout_hash" SET NOT NULL')
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        assert migrations.upgrade() == [version]
        rows = {w.id: w for w in Watch.select()}
        assert (rows[ended].target, rows[ended].optout_hash) == (None, None)
        assert (rows[kept].target, rows[kept].optout_hash) == ("u1@example.com", "h1")
        bodies = {e.kind: json.loads(e.body) for e in Event.select().where(Event.customer == customer.id)}
        assert "target" not in bodies["watch.ended"] and bodies["watch.ended"]["kind"] == "email"
        assert bodies["watch.changed"]["target"] == "u1@example.com"
        assert "target" not in json.loads(WebhookDelivery.get_by_id("dlv_f0").body)


def test_the_source_health_migration_builds_the_tables_a_fresh_database_has(app):
    """The source health migration on a database from before it (D30): the source and source_minute tables and their
    indexes as a fresh database has them."""
    from app.sources.models import Source, SourceMinute
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._source_health]

    def shape():
        columns = db.execute_sql("SELECT table_name, column_name, data_type, is_nullable FROM "
                                 "information_schema.columns WHERE table_name IN ('source', 'source_minute') "
                                 "ORDER BY table_name, column_name").fetchall()
        indexes = db.execute_sql("SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN "
                                 "('source', 'source_minute') ORDER BY indexname").fetchall()
        return columns, indexes

    with db.connection_context():
        fresh = shape()
        assert len(fresh[0]) == 25 and {"source_pkey", "source_minute_pkey", "source_minute_minute"} <= {
            name for name, _ in fresh[1]}
        with db.atomic():
            db.drop_tables([Source, SourceMinute], cascade=True)
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        assert migrations.upgrade() == [version]
        assert migrations.upgrade() == []
        assert shape() == fresh


def test_the_confidence_migration_gives_stored_results_a_match_and_their_findings_a_confidence(app):
    """The confidence migration (D29): a result stored before has ``match`` true and each finding its confidence by
    the rule without an engine's estimate (the customer's feedback first), ``matched_on`` empty; a
    result stored since is left alone."""
    import json

    from app.plumbing.models import utcnow
    from app.scans.models import Scan

    old = {"risk": {"score": 5, "band": "low", "reasons": []}, "findings": [
        {"id": "fnd_a", "path": "profiles.weak[0]", "source_ids": ["s1", "s2"], "feedback": None},
        {"id": "fnd_b", "path": "breaches[0]", "source_ids": ["s1"],
         "feedback": {"verdict": "false_positive", "note": "", "at": None, "scan_id": "scn_v29a"}},
        {"id": "fnd_c", "path": "breaches[1]", "source_ids": ["s1", "s2", "s3"], "feedback": None}]}
    new = {"findings": [], "match": False}
    with db.connection_context():
        customer = customers.create_customer("Conf", "pro", 0)
        key, _ = admin.issue_key(customer.id, "k")
        for scan_id, result in (("scn_v29a", old), ("scn_v29b", new)):
            Scan.create(id=scan_id, customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                        status="completed", created_at=utcnow(), result_json=json.dumps(result))
        [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._confidence]
        SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        assert migrations.upgrade() == [version]
        migrated = json.loads(Scan.get_by_id("scn_v29a").result_json)
        assert migrated["match"] is True
        assert [(f["id"], f["confidence"], f["matched_on"]) for f in migrated["findings"]] == [
            ("fnd_a", 0.45, []), ("fnd_b", 0.0, []), ("fnd_c", 0.99, [])]
        assert list(migrated["findings"][0]) == ["id", "path", "source_ids", "confidence", "matched_on", "feedback"]
        assert json.loads(Scan.get_by_id("scn_v29b").result_json) == new


def test_the_export_order_migration_adds_xact_without_rewriting_old_entries(app):
    """The export order migration: entries from before it read xact 0 (exported first, by time);
    new ones get their transaction's id; the table is as a fresh database has it."""
    from app.activity import entries
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._activity_export_order]

    with db.connection_context():
        fresh = _activity_table_shape()
        with db.atomic():
            db.execute_sql('DROP INDEX IF EXISTS "activity_entry_customer_id_livemode_xact_created_at_id"')
            db.execute_sql('ALTER TABLE "activity_entry" DROP COLUMN "xact"')
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        old = entries.record(customer_id="cus_m32", livemode=True, action="scan.read", status=200)
        assert migrations.upgrade() == [version]
        assert migrations.upgrade() == []
        assert _activity_table_shape() == fresh
        new = entries.record(customer_id="cus_m32", livemode=True, action="scan.read", status=200)
        xacts = dict(db.execute_sql("SELECT id, xact::text FROM activity_entry WHERE customer_id = 'cus_m32'"))
        assert xacts[old] == "0" and int(xacts[new]) > 0
        page = entries.export_page("cus_m32", livemode=True)
        assert [e["activity_id"] for e in page.entries] == [old, new]


def test_the_audit_sinks_migration_builds_the_table(app):
    from app.activity.audit_models import AuditSink
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._audit_sinks]

    with db.connection_context():
        with db.atomic():
            db.drop_tables([AuditSink])
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        assert migrations.upgrade() == [version]
        assert migrations.upgrade() == []
        assert "audit_sink" in db.get_tables()


def test_the_scim_migration_adds_the_token_digest_and_the_provisioning_mark_in_either_order(app):
    """A database from before SCIM: the customer gains its token's digest (unique) and time, the user
    its mark and identity provider id, all NULL; a mark added first by single sign-on's migration is kept."""
    from app.accounts.models import PortalUser
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._scim]

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 0)
        user = admin.create_user(customer.id, "old@acme.example", "long enough password")
        with db.atomic():
            db.execute_sql('ALTER TABLE "customer" DROP COLUMN "scim_token_digest", DROP COLUMN "scim_token_set_at"')
            db.execute_sql('ALTER TABLE "portal_user" DROP COLUMN "scim_external_id"')
            db.execute_sql("UPDATE \"portal_user\" SET \"provisioned_by\" = 'sso'")  # as if SSO's ran first
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()

        assert migrations.upgrade() == [version]
        assert migrations.upgrade() == []

        kept = PortalUser.get_by_id(user.id)
        assert (kept.provisioned_by, kept.scim_external_id) == ("sso", None)
        assert Customer.get_by_id(customer.id).scim_token_digest is None
        indexes = [row[0] for row in db.execute_sql(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'customer' AND indexname = 'customer_scim_token_digest'")]
        assert indexes and "UNIQUE" in indexes[0]


def test_the_single_sign_on_migration_adds_the_table_and_the_users_columns_and_keeps_users(app):
    """The single sign-on migration on a database from before it (D32): the customer_sso table as a fresh database has
    it, and the users' provisioned_by and password_login_until, empty for the users already there."""
    from app.accounts.models import CustomerSso, PortalUser
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._single_sign_on]

    def columns(table):
        return sorted((c.name, c.data_type, c.null) for c in db.get_columns(table))

    with db.connection_context():
        fresh = columns("customer_sso"), columns("portal_user")
        customer = customers.create_customer("Old", "pro", 0)
        user = admin.create_user(customer.id, "old@acme.example", "correct horse battery")
        with db.atomic():
            db.drop_tables([CustomerSso], cascade=True)
            db.execute_sql('ALTER TABLE "portal_user" DROP COLUMN "provisioned_by", DROP COLUMN "password_login_until"')
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()

        assert migrations.upgrade() == [version]
        assert migrations.upgrade() == []
        assert (columns("customer_sso"), columns("portal_user")) == fresh
        kept = PortalUser.get_by_id(user.id)
        assert kept.email == "old@acme.example" and kept.provisioned_by is None and kept.password_login_until is None


def test_a_scope_declared_since_the_last_upgrade_reaches_the_keys_that_held_every_scope(app):
    """Version 35 records the scopes given; a scope declared later (here ``watches``, as if new) is
    given at the next upgrade to the keys that held every scope before it, never to a narrowed key,
    and once; a database whose record is empty (created at the newest version) gives none."""
    from app.accounts import access
    from app.accounts.models import ApiKey, GrantedScope
    [version] = [v for v, _, f in migrations.MIGRATIONS if f is migrations._granted_scopes]

    with db.connection_context():
        customer = customers.create_customer("Old", "pro", 0)
        every, _ = admin.issue_key(customer.id, "every scope")
        narrow, _ = admin.issue_key(customer.id, "narrow", scopes="scans:read")
        with db.atomic():
            db.drop_tables([GrantedScope])
            SchemaVersion.delete().where(SchemaVersion.version == version).execute()
        assert migrations.upgrade() == [version]
        assert sorted(g.name for g in GrantedScope.select()) == sorted(access.SCOPES)

        # A database from before ``watches`` was declared: its keys and its record lack it.
        db.execute_sql("UPDATE \"api_key\" SET \"scopes\" = array_remove(\"scopes\", 'watches')")
        GrantedScope.delete().where(GrantedScope.name == "watches").execute()
        assert migrations.upgrade() == []  # no version, but the scope given
        assert ApiKey.get_by_id(every.id).scopes == list(access.SCOPES)
        assert ApiKey.get_by_id(narrow.id).scopes == ["scans:read"]
        assert "watches" in {g.name for g in GrantedScope.select()}
        assert migrations.grant_declared_scopes(db.obj) == []  # once

        GrantedScope.delete().execute()  # as a database created at the newest version has it
        db.execute_sql("UPDATE \"api_key\" SET \"scopes\" = array_remove(\"scopes\", 'watches')")
        assert migrations.grant_declared_scopes(db.obj) == []
        assert "watches" not in ApiKey.get_by_id(every.id).scopes
        assert sorted(g.name for g in GrantedScope.select()) == sorted(access.SCOPES)
