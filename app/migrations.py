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
from collections import Counter
from datetime import datetime, timedelta

from app.billing.models import IdempotencyRecord
from app.plumbing.db import db, table
from app.schema_version import SchemaVersion
from app.tables import ALL_MODELS

log = logging.getLogger(__name__)

# The values the migrations below used, as they were when each was written: a migration holds
# its own values and never imports a live rule (a domain's, app/<domain>/), whose meaning may change
# (tests/unit/test_migrations_frozen.py).
_IN_FLIGHT_2 = ("queued", "running")  # app.scans.models.IN_FLIGHT, migrations 2 and 6
_DAY_2 = 86400  # app.billing.limits.DAY: the longest window a quota counter serves
# app.accounts.access.SCOPES when migration 12 gave existing keys every scope (watches came later,
# with migration 25, which adds its scope to the keys that held all of these).
_SCOPES_12 = ("scans:write", "scans:read", "scans:erase", "webhooks", "activity:read")
# Every scope when migration 35 began to record the scopes given (the ones every key issued
# without a list held by then).
_SCOPES_35 = (*_SCOPES_12, "watches")


def _counted_from_scans(database, now: datetime, livemode: bool | None) -> tuple[Counter, Counter]:
    """What the quota counters held, counted from the scans (app.billing.quotas.counted_from_scans
    as migrations 2 and 6 ran it): scans in flight by customer, and the last day's scans by
    (customer, minute); of one mode, or (``livemode=None``, a database without the column) all."""
    since = now - timedelta(seconds=_DAY_2)
    p = database.param
    sql = (f'SELECT "customer_id", "status", "created_at" FROM "scan" '
           f'WHERE ("status" IN ({p}, {p}) OR "created_at" > {p})')
    params: tuple = (*_IN_FLIGHT_2, since)
    if livemode is not None:
        sql += f' AND "livemode" = {p}'
        params += (livemode,)
    in_flight: Counter[str] = Counter()
    minutes: Counter[tuple[str, datetime]] = Counter()
    for customer, status, created_at in database.execute_sql(sql, params).fetchall():
        if status in _IN_FLIGHT_2:
            in_flight[customer] += 1
        if created_at > since:
            minutes[customer, created_at.replace(second=0, microsecond=0)] += 1
    return in_flight, minutes


def _initial(database):
    database.create_tables(ALL_MODELS, safe=True)


def _quota_counters(database):
    """Customer.in_flight and QuotaMinute (app.billing.quotas), filled from the scans; the
    scan indexes nothing uses go, those of scans in flight become partial (app.scans.models)."""
    from app.billing.models import QuotaMinute
    from app.plumbing.models import utcnow
    from app.scans.models import Scan

    # Plain ALTER TABLE with its default: existing rows get it in the same statement.
    database.execute_sql('ALTER TABLE "customer" ADD COLUMN "in_flight" INTEGER NOT NULL DEFAULT 0')
    database.create_tables([QuotaMinute], safe=True)
    for index in ("scan_customer_id", "scan_api_key_id", "scan_customer_id_status", "scan_status_last_checked_at"):
        database.execute_sql(f'DROP INDEX IF EXISTS "{index}"')
    Scan._schema.create_indexes(safe=True)  # the two partial indexes of scans in flight
    # livemode=None: every scan (a database this old has no test scans, nor the column).
    in_flight, minutes = _counted_from_scans(database, utcnow(), livemode=None)
    for customer_id, count in in_flight.items():
        database.execute_sql(f'UPDATE "customer" SET in_flight = {database.param} WHERE id = {database.param}',
                             (count, customer_id))
    rows = [{"customer": c, "minute": m, "scans": n} for (c, m), n in minutes.items()]
    for start in range(0, len(rows), 500):
        QuotaMinute.insert_many(rows[start:start + 500]).execute()


def _portal_sessions(database):
    """Server-side portal sessions (app.accounts.models.PortalSession) and PortalUser.disabled.

    Safe to run on a schema that has them already (a test re-runs every migration)."""
    from app.accounts.models import PortalSession

    # Plain ALTER TABLE, as in _quota_counters.
    if "disabled" not in {c.name for c in database.get_columns("portal_user")}:
        database.execute_sql('ALTER TABLE "portal_user" ADD COLUMN "disabled" BOOLEAN NOT NULL DEFAULT FALSE')
    database.create_tables([PortalSession], safe=True)


def _webhook_secret_rotation(database):
    """ApiKey.webhook_next_secret_enc and webhook_secret_switch_at: rolling rotation (D16).

    Nullable columns, so a plain ALTER TABLE; skipped when they exist (a test re-runs
    every migration). Secrets stored before keep working as they are (README)."""
    columns = {c.name for c in database.get_columns("api_key")}
    if "webhook_next_secret_enc" not in columns:
        database.execute_sql('ALTER TABLE "api_key" ADD COLUMN "webhook_next_secret_enc" TEXT')
    if "webhook_secret_switch_at" not in columns:
        database.execute_sql('ALTER TABLE "api_key" ADD COLUMN "webhook_secret_switch_at" TIMESTAMP')  # DateTimeField


def _test_mode(database):
    """Test mode (D15): ``livemode`` on keys, batches, scans, deliveries and idempotency
    records (existing rows are live), ``Customer.test_in_flight``, and the per-minute quota
    counters keyed by mode. Safe on a schema that has any of it already."""
    from app.billing.models import IdempotencyRecord, QuotaMinute
    from app.plumbing.models import utcnow

    for name in ("api_key", "bulk_batch", "scan", "webhook_delivery", "idempotency_record"):
        if "livemode" not in {c.name for c in database.get_columns(name)}:
            database.execute_sql(f'ALTER TABLE "{name}" ADD COLUMN "livemode" BOOLEAN NOT NULL DEFAULT TRUE')
    if "test_in_flight" not in {c.name for c in database.get_columns("customer")}:
        database.execute_sql('ALTER TABLE "customer" ADD COLUMN "test_in_flight" INTEGER NOT NULL DEFAULT 0')
    # An Idempotency-Key is unique per customer and mode.
    database.execute_sql('DROP INDEX IF EXISTS "idempotency_record_customer_id_key"')
    IdempotencyRecord._schema.create_indexes(safe=True)
    # The counters are derived data: rebuilt with the mode in their key, from the scans.
    database.execute_sql(f'DROP TABLE IF EXISTS "{QuotaMinute._meta.table_name}"')
    database.create_tables([QuotaMinute], safe=True)
    rows = []
    for livemode in (True, False):
        _, minutes = _counted_from_scans(database, utcnow(), livemode=livemode)
        rows += [{"customer": c, "livemode": livemode, "minute": m, "scans": n} for (c, m), n in minutes.items()]
    for start in range(0, len(rows), 500):
        QuotaMinute.insert_many(rows[start:start + 500]).execute()


def _longer_idempotency_endpoint(database):
    """An Idempotency-Key's endpoint is the request's path, and a redelivery's path
    (``/api/v1/deliveries/{id}/redeliver``) is longer than the 40 characters first allowed."""
    database.execute_sql(f'ALTER TABLE {table(IdempotencyRecord)} ALTER COLUMN "endpoint" TYPE VARCHAR(255)')


def _suppressions(database):
    """Suppression: data subjects' opt-outs, as keyed hashes of their targets (D20)."""
    from app.privacy.models import Suppression

    database.create_tables([Suppression], safe=True)


def _purpose(database):
    """Scan and BulkBatch purpose and case_ref, Customer.require_purpose, ApiKey.webhook_payload
    (D20). Existing scans have no purpose: NULL, as a creation without one; keys send full bodies."""
    for name in ("scan", "bulk_batch"):
        database.execute_sql(f'ALTER TABLE "{name}" ADD COLUMN IF NOT EXISTS "purpose" VARCHAR(32)')
        database.execute_sql(f'ALTER TABLE "{name}" ADD COLUMN IF NOT EXISTS "case_ref" VARCHAR(128)')
    database.execute_sql('ALTER TABLE "customer" ADD COLUMN IF NOT EXISTS "require_purpose" BOOLEAN NOT NULL '
                         'DEFAULT FALSE')
    database.execute_sql('ALTER TABLE "api_key" ADD COLUMN IF NOT EXISTS "webhook_payload" VARCHAR(8) NOT NULL '
                         "DEFAULT 'full'")


def _activity_log(database):
    """The activity log (D20): a table partitioned by day with its DEFAULT partition, built by
    ``ActivityEntry.create_table`` exactly as on a fresh database (idempotent: IF NOT EXISTS)."""
    from app.activity.models import ActivityEntry

    database.create_tables([ActivityEntry], safe=True)


def _retention(database):
    """Customer.result_retention_days, Scan.erased_at, a nullable Scan.target and
    WebhookDelivery.body (erased with the scan), and the retention job's partial index (D20)."""
    from app.scans.models import Scan

    database.execute_sql('ALTER TABLE "customer" ADD COLUMN IF NOT EXISTS "result_retention_days" INTEGER NOT NULL '
                         'DEFAULT 90')
    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "erased_at" TIMESTAMP')
    database.execute_sql('ALTER TABLE "scan" ALTER COLUMN "target" DROP NOT NULL')
    database.execute_sql('ALTER TABLE "webhook_delivery" ALTER COLUMN "body" DROP NOT NULL')
    Scan._schema.create_indexes(safe=True)


def _key_access(database):
    """ApiKey.scopes, expires_at, allowed_ips (D21). Existing keys keep doing what they did: every
    scope, no expiry, no allowlist."""
    database.execute_sql('ALTER TABLE "api_key" ADD COLUMN IF NOT EXISTS "scopes" TEXT[]')
    database.execute_sql(f'UPDATE "api_key" SET "scopes" = {database.param} WHERE "scopes" IS NULL',
                         (list(_SCOPES_12),))
    database.execute_sql('ALTER TABLE "api_key" ALTER COLUMN "scopes" SET NOT NULL')
    database.execute_sql('ALTER TABLE "api_key" ADD COLUMN IF NOT EXISTS "expires_at" TIMESTAMP')
    database.execute_sql('ALTER TABLE "api_key" ADD COLUMN IF NOT EXISTS "allowed_ips" TEXT[]')


def _portal_roles_and_two_factor(database):
    """PortalUser.role (existing users are owners: they were the customer's only kind of user),
    the one-time set-password link, TOTP; Customer.require_2fa; PortalRecoveryCode (D21)."""
    from app.accounts.models import PortalRecoveryCode

    user = '"portal_user"'
    for column in ("\"role\" VARCHAR(16) NOT NULL DEFAULT 'owner'", '"password_token_digest" VARCHAR(64) UNIQUE',
                   '"password_token_expires_at" TIMESTAMP', '"totp_secret_enc" TEXT',
                   '"totp_enabled_at" TIMESTAMP', '"totp_last_step" BIGINT'):
        database.execute_sql(f"ALTER TABLE {user} ADD COLUMN IF NOT EXISTS {column}")
    database.execute_sql('ALTER TABLE "customer" ADD COLUMN IF NOT EXISTS "require_2fa" BOOLEAN NOT NULL '
                         "DEFAULT FALSE")
    database.create_tables([PortalRecoveryCode], safe=True)


def _results_explained(database):
    """Scan.rerun_of and the FindingFeedback table (D23); completed scans' stored results gain
    the explanation every result now carries (no sources, nothing checked, not partial, their
    findings with ids), so that reads stay a copy of the stored text."""
    import json

    from app.frozen.results_13 import normalize_result
    from app.scans.models import FindingFeedback

    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "rerun_of" VARCHAR(40)')
    database.create_tables([FindingFeedback], safe=True)
    p = database.param
    after = ""
    while True:  # in pages, by id: a large table is never held in memory whole
        rows = database.execute_sql(
            f'SELECT id, kind, result_json FROM "scan" WHERE id > {p} AND status = {p} AND result_json IS NOT NULL '
            f"AND result_json NOT LIKE {p} ORDER BY id LIMIT 500", (after, "completed", '%"coverage":%')).fetchall()
        if not rows:
            return
        for scan_id, kind, text in rows:
            result = normalize_result(json.loads(text), kind, scan_id=scan_id, stored=True)
            database.execute_sql(f'UPDATE "scan" SET result_json = {p} WHERE id = {p}',
                                 (json.dumps(result, separators=(",", ":")), scan_id))
        after = rows[-1][0]


def _webhook_endpoints(database):
    """Webhook endpoints (D22): the table of a key's further endpoints, the first endpoint's new
    columns on the key, and each delivery's endpoint; a delivery written before names its key's
    first endpoint, whose id is ``ep_`` and the key id after its ``key_`` prefix."""
    from app.webhooks.models import WebhookEndpoint
    database.create_tables([WebhookEndpoint], safe=True)
    for ddl in ('"webhook_events" TEXT[]', '"webhook_enabled" BOOLEAN NOT NULL DEFAULT TRUE',
                '"webhook_description" TEXT NOT NULL DEFAULT \'\'', '"webhook_disabled_at" TIMESTAMP'):
        database.execute_sql(f'ALTER TABLE "api_key" ADD COLUMN IF NOT EXISTS {ddl}')
    database.execute_sql('ALTER TABLE "webhook_delivery" ADD COLUMN IF NOT EXISTS "endpoint_id" VARCHAR(40)')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "webhook_delivery_endpoint_id_created_at" '
                         'ON "webhook_delivery" ("endpoint_id", "created_at")')
    database.execute_sql("""UPDATE "webhook_delivery" SET "endpoint_id" = 'ep_' || substr("api_key_id", 5) """
                         'WHERE "endpoint_id" IS NULL')


def _summed_reads(database):
    """CreditLedger.livemode, minute and reads, and the unique index of a minute's row of summed
    reads (D24): the charges of reads become one row per customer, mode, endpoint and minute."""
    from app.accounts.models import CreditLedger

    for column in ('"livemode" BOOLEAN', '"minute" TIMESTAMP', '"reads" INTEGER'):
        database.execute_sql(f'ALTER TABLE "credit_ledger" ADD COLUMN IF NOT EXISTS {column}')
    CreditLedger._schema.create_indexes(safe=True)  # IF NOT EXISTS: the existing ones stay


def _batch_looks(database):
    from app.scans.models import Scan

    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "next_look_at" TIMESTAMP')
    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "look_generation" INTEGER NOT NULL DEFAULT 0')
    Scan._schema.create_indexes(safe=True)  # IF NOT EXISTS: the existing ones stay


def _engine_deletions(database):
    """EngineDeletion (D25): erased scans' investigations still to delete at the engine. Scans
    erased before keep no engine id either: live ones' ids become rows to delete (test ones ran in
    the service's sandbox, ``sbx_`` ids: nothing to delete)."""
    database.execute_sql('CREATE TABLE IF NOT EXISTS "engine_deletion" ("id" VARCHAR(40) NOT NULL PRIMARY KEY, '
                         '"engine_id" VARCHAR(2000) NOT NULL, "created_at" TIMESTAMP NOT NULL)')
    database.execute_sql('INSERT INTO "engine_deletion" ("id", "engine_id", "created_at") '
                         """SELECT 'edl_' || replace(gen_random_uuid()::text, '-', ''), "engine_id", """
                         "now() AT TIME ZONE 'UTC' "
                         'FROM "scan" WHERE "erased_at" IS NOT NULL AND "engine_id" IS NOT NULL AND "livemode"')
    database.execute_sql('UPDATE "scan" SET "engine_id" = NULL '
                         'WHERE "erased_at" IS NOT NULL AND "engine_id" IS NOT NULL')


def _findings_keep_identity(database):
    """The index that finds the feedback on a finding in any scan (D26), and the ``scan_id`` every
    feedback in a stored result now names: feedback stored before names the scan it is in, the
    only one it could be given on then. Plain JSON: no rule of today's code is used here."""
    import json

    database.execute_sql('CREATE INDEX IF NOT EXISTS "finding_feedback_finding_id" '
                         'ON "finding_feedback" ("finding_id")')
    p = database.param
    after = ""
    while True:  # in pages, by id: a large table is never held in memory whole
        rows = database.execute_sql(
            f'SELECT id, result_json FROM "scan" WHERE id > {p} AND result_json LIKE {p} ORDER BY id LIMIT 500',
            (after, '%"verdict"%')).fetchall()
        if not rows:
            return
        for scan_id, text in rows:
            result = json.loads(text)
            for finding in result.get("findings") or []:
                feedback = finding.get("feedback") if isinstance(finding, dict) else None
                if isinstance(feedback, dict) and "scan_id" not in feedback:
                    feedback["scan_id"] = scan_id
            database.execute_sql(f'UPDATE "scan" SET result_json = {p} WHERE id = {p}',
                                 (json.dumps(result, separators=(",", ":")), scan_id))
        after = rows[-1][0]


def _engine_callbacks(database):
    """E7's callbacks: whether the engine promised them per scan, the in-flight scans by engine id
    (a callback's look-up), and the callback ids taken (replays refused). The values it uses are
    written here, not imported: ``queued`` and ``running`` are the statuses in flight."""
    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "callbacks" BOOLEAN NOT NULL DEFAULT FALSE')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "scan_in_flight_engine_id" ON "scan" ("engine_id") '
                         "WHERE ((\"status\" IN ('queued', 'running')) AND (\"engine_id\" IS NOT NULL))")
    database.execute_sql('CREATE TABLE IF NOT EXISTS "engine_callback" '
                         '("id" VARCHAR(200) NOT NULL PRIMARY KEY, "until" TIMESTAMP NOT NULL)')


def _one_way_to_track(database):
    """Due looks become the one way to track a scan (D24): each submitted scan in flight that an RQ
    job chain tracked (no due look) is due now, its chain's token cleared (a late job of that
    chain, still running the code of before, finds itself stale and stops); the index of the
    chains' sweep goes. The values are this migration's own: the statuses in flight as they
    are today."""
    database.execute_sql('UPDATE "scan" SET "next_look_at" = now() AT TIME ZONE \'UTC\', "tracking_job_id" = NULL '
                         """WHERE "status" IN ('queued', 'running') AND "engine_id" IS NOT NULL """
                         'AND "next_look_at" IS NULL')
    database.execute_sql('DROP INDEX IF EXISTS "scan_in_flight_last_checked"')


def _longer_request_ids(database):
    """Client request ids of 1 to 128 characters (D1): the ledger's and the activity log's columns
    held 64, so a longer id would fail a charged call's ledger row. Widening a VARCHAR rewrites
    nothing in PostgreSQL."""
    for name in ("credit_ledger", "activity_entry"):
        database.execute_sql(f'ALTER TABLE "{name}" ALTER COLUMN "request_id" TYPE VARCHAR(128)')


def _events(database):
    """The events of every customer and mode, stored once whether or not an endpoint or a stream
    wants them (D27); the table as the model makes it, its statements written out here."""
    database.execute_sql('CREATE TABLE IF NOT EXISTS "event" ("id" BIGSERIAL NOT NULL PRIMARY KEY, '
                         '"customer_id" VARCHAR(40) NOT NULL, "livemode" BOOLEAN NOT NULL, '
                         '"kind" VARCHAR(40) NOT NULL, "scan_id" VARCHAR(40), "bulk_id" VARCHAR(40), '
                         '"watch_id" VARCHAR(40), "created_at" TIMESTAMP NOT NULL, "body" TEXT NOT NULL, '
                         'FOREIGN KEY ("customer_id") REFERENCES "customer" ("id") ON DELETE CASCADE)')
    for name, columns in (("customer_id_livemode_id", '"customer_id", "livemode", "id"'), ("scan_id", '"scan_id"'),
                          ("bulk_id", '"bulk_id"'), ("created_at", '"created_at"')):
        database.execute_sql(f'CREATE INDEX IF NOT EXISTS "event_{name}" ON "event" ({columns})')


def _watches(database):
    """Watches (D28): their table, the customer's override of the watch limit, the scan's watch."""
    database.execute_sql('ALTER TABLE "customer" ADD COLUMN IF NOT EXISTS "watch_limit" INTEGER')
    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "watch_id" VARCHAR(40)')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "scan_watch" ON "scan" ("watch_id", "created_at") '
                         'WHERE "watch_id" IS NOT NULL')
    database.execute_sql(
        'CREATE TABLE IF NOT EXISTS "watch" ("id" VARCHAR(40) NOT NULL PRIMARY KEY, '
        '"customer_id" VARCHAR(40) NOT NULL REFERENCES "customer" ("id") ON DELETE CASCADE, '
        '"api_key_id" VARCHAR(40) NOT NULL REFERENCES "api_key" ("id") ON DELETE CASCADE, '
        '"livemode" BOOLEAN NOT NULL, "kind" VARCHAR(10) NOT NULL, "target" VARCHAR(300) NOT NULL, '
        '"optout_hash" VARCHAR(64) NOT NULL, "interval" VARCHAR(10) NOT NULL, "status" VARCHAR(10) NOT NULL, '
        '"purpose" VARCHAR(32), "case_ref" VARCHAR(128), "created_at" TIMESTAMP NOT NULL, '
        '"next_scan_at" TIMESTAMP, "last_scan_id" VARCHAR(40), "last_change_at" TIMESTAMP, '
        '"last_changes" TEXT, "last_error" VARCHAR(300), "missed_since" TIMESTAMP, "ended_at" TIMESTAMP, '
        '"end_reason" VARCHAR(40))')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "watch_customer_id_livemode_created_at" '
                         'ON "watch" ("customer_id", "livemode", "created_at")')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "watch_due" ON "watch" ("next_scan_at") '
                         "WHERE \"status\" = 'active' AND \"next_scan_at\" IS NOT NULL")
    database.execute_sql('CREATE INDEX IF NOT EXISTS "watch_optout_hash" ON "watch" ("optout_hash") '
                         "WHERE \"status\" != 'ended'")
    # Keys that held every scope keep holding every scope (keys narrowed before stay narrow).
    database.execute_sql("UPDATE \"api_key\" SET \"scopes\" = array_append(\"scopes\", 'watches') "
                         "WHERE \"scopes\" @> ARRAY['scans:write', 'scans:read', 'scans:erase', 'webhooks', "
                         "'activity:read']::TEXT[] AND NOT ('watches' = ANY(\"scopes\"))")


def _watch_slots(database):
    """Watches spread by slot: each open watch numbered among its customer's of the same mode and
    interval, oldest first. Due times already set stay; the next ones follow the slot."""
    database.execute_sql('ALTER TABLE "watch" ADD COLUMN IF NOT EXISTS "slot" INTEGER')
    database.execute_sql(
        'UPDATE "watch" SET "slot" = numbered.n FROM (SELECT "id", row_number() OVER (PARTITION BY "customer_id", '
        '"livemode", "interval" ORDER BY "created_at", "id") - 1 AS n FROM "watch" WHERE "status" != \'ended\') '
        'AS numbered WHERE "watch"."id" = numbered."id"')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "watch_slot" ON "watch" ("customer_id", "livemode", "interval", '
                         '"slot") WHERE "status" != \'ended\'')


def _opted_out_watches_forget_target(database):
    """A watch ended by an opt-out keeps no identifier (D25): its target and opt-out hash may be
    NULL, and the ones ended before lose them, with the target of their ``watch.ended`` events and
    deliveries (every such event is about an opt-out)."""
    database.execute_sql('ALTER TABLE "watch" ALTER COLUMN "target" DROP NOT NULL, '
                         'ALTER COLUMN "optout_hash" DROP NOT NULL')
    database.execute_sql('UPDATE "watch" SET "target" = NULL, "optout_hash" = NULL '
                         'WHERE "end_reason" = \'target_suppressed\'')
    database.execute_sql('UPDATE "event" SET "body" = ("body"::jsonb - \'target\')::text '
                         'WHERE "kind" = \'watch.ended\' AND "body"::jsonb ? \'target\'')
    database.execute_sql('UPDATE "webhook_delivery" SET "body" = ("body"::jsonb - \'target\')::text '
                         'WHERE "event" = \'watch.ended\' AND "body" IS NOT NULL AND "body"::jsonb ? \'target\'')


def _source_health(database):
    """Source health (D30): the sources, their answers per minute; the tables as the models make them."""
    database.execute_sql(
        'CREATE TABLE IF NOT EXISTS "source" ("id" VARCHAR(80) NOT NULL PRIMARY KEY, "name" VARCHAR(200) NOT NULL, '
        '"kinds" TEXT NOT NULL, "probes" TEXT, "status" VARCHAR(10) NOT NULL, "status_since" TIMESTAMP NOT NULL, '
        '"counted_since" TIMESTAMP NOT NULL, "quarantined" BOOLEAN NOT NULL, "quarantined_at" TIMESTAMP, '
        '"quarantined_by" VARCHAR(10), "quarantine_reason" VARCHAR(300), "probe_streak" INTEGER NOT NULL, '
        '"last_probe_at" TIMESTAMP, "last_probe_ok" BOOLEAN, "last_probes" TEXT NOT NULL, '
        '"probe_good_id" VARCHAR(300), "probe_bad_id" VARCHAR(300), "probe_sent_at" TIMESTAMP, '
        '"next_probe_at" TIMESTAMP, "created_at" TIMESTAMP NOT NULL)')
    database.execute_sql(
        'CREATE TABLE IF NOT EXISTS "source_minute" ("source_id" VARCHAR(80) NOT NULL, "minute" TIMESTAMP NOT NULL, '
        '"bucket" SMALLINT NOT NULL, "answers" INTEGER NOT NULL, "answered" INTEGER NOT NULL, '
        'PRIMARY KEY ("source_id", "minute", "bucket"))')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "source_minute_minute" ON "source_minute" ("minute")')


def _confidence(database):
    """Findings with a confidence (D29): the ``min_confidence`` and ``required`` match rule a scan,
    and a watch for its scans, was created with (NULL: none); and every stored result as a result
    is now stored: ``match`` true (no rule was asked), each finding with its ``confidence`` and an
    empty ``matched_on`` (engines gave no estimate before). The rule is written out here as it is
    today (feedback, else a base per kind plus 0.05 per further source, at most 0.99), not imported."""
    import json

    for name in ("scan", "watch"):
        database.execute_sql(f'ALTER TABLE "{name}" ADD COLUMN IF NOT EXISTS "min_confidence" DOUBLE PRECISION')
        database.execute_sql(f'ALTER TABLE "{name}" ADD COLUMN IF NOT EXISTS "required" VARCHAR(500)')
    base = {"profiles.verified": 0.90, "profiles.weak": 0.40, "contacts.emails": 0.70, "contacts.phones": 0.70,
            "breaches": 0.95}

    def confidence(finding: dict) -> float:
        verdict = (finding.get("feedback") or {}).get("verdict")
        if verdict in ("confirmed", "false_positive"):
            return 1.0 if verdict == "confirmed" else 0.0
        kind = str(finding.get("path", "")).partition("[")[0]
        return round(min(0.99, base.get(kind, 0.0) + 0.05 * max(0, len(finding.get("source_ids") or []) - 1)), 2)

    p = database.param
    after = ""
    while True:  # in pages, by id: a large table is never held in memory whole
        rows = database.execute_sql(
            f'SELECT id, result_json FROM "scan" WHERE id > {p} AND result_json IS NOT NULL '
            f'AND result_json NOT LIKE {p} ORDER BY id LIMIT 500', (after, '%"match":%')).fetchall()
        if not rows:
            return
        for scan_id, text in rows:
            result = json.loads(text)
            if isinstance(result, dict):
                result["findings"] = [
                    {"id": f.get("id"), "path": f.get("path"), "source_ids": f.get("source_ids") or [],
                     "confidence": confidence(f), "matched_on": [], "feedback": f.get("feedback")}
                    for f in result.get("findings") or [] if isinstance(f, dict)]
                result["match"] = True
                database.execute_sql(f'UPDATE "scan" SET result_json = {p} WHERE id = {p}',
                                     (json.dumps(result, separators=(",", ":")), scan_id))
        after = rows[-1][0]


def _activity_export_order(database):
    """ActivityEntry.xact (the writing transaction's id, the audit export's order) and its index.
    Existing entries read '0' (a constant default: no rewrite of the log), then new ones get
    their transaction's id."""
    database.execute_sql('ALTER TABLE "activity_entry" ADD COLUMN IF NOT EXISTS "xact" XID8 NOT NULL DEFAULT \'0\'')
    database.execute_sql('ALTER TABLE "activity_entry" ALTER COLUMN "xact" SET DEFAULT pg_current_xact_id()')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "activity_entry_customer_id_livemode_xact_created_at_id" '
                         'ON "activity_entry" ("customer_id", "livemode", "xact", "created_at", "id")')


def _audit_sinks(database):
    """The audit sinks table (D32), built from its model as on a fresh database."""
    from app.activity.audit_models import AuditSink

    database.create_tables([AuditSink], safe=True)


def _scim(database):
    """SCIM provisioning (D32): the customer's token digest and its time, the user's provisioning
    mark (also added by single sign-on's migration: IF NOT EXISTS, in either order) and its
    identity provider id."""
    database.execute_sql('ALTER TABLE "customer" ADD COLUMN IF NOT EXISTS "scim_token_digest" VARCHAR(64), '
                         'ADD COLUMN IF NOT EXISTS "scim_token_set_at" TIMESTAMP')
    database.execute_sql('CREATE UNIQUE INDEX IF NOT EXISTS "customer_scim_token_digest" '
                         'ON "customer" ("scim_token_digest")')
    database.execute_sql('ALTER TABLE "portal_user" ADD COLUMN IF NOT EXISTS "provisioned_by" VARCHAR(8), '
                         'ADD COLUMN IF NOT EXISTS "scim_external_id" TEXT')


def _single_sign_on(database):
    """CustomerSso (D32: a customer's OpenID Connect sign-in), PortalUser.provisioned_by and
    PortalUser.password_login_until (the operator's emergency door)."""
    from app.accounts.models import CustomerSso

    for column in ('"provisioned_by" VARCHAR(8)', '"password_login_until" TIMESTAMP'):
        database.execute_sql(f'ALTER TABLE "portal_user" ADD COLUMN IF NOT EXISTS {column}')
    database.create_tables([CustomerSso], safe=True)


def _start_reported(database):
    """Scan.engine_started_at: when a callback (E7) said that the engine runs a queued scan, which
    the lookers then move to running with its event, several to a transaction; and the partial
    index of the scans waiting for that move. ``queued`` is written here, not imported."""
    database.execute_sql('ALTER TABLE "scan" ADD COLUMN IF NOT EXISTS "engine_started_at" TIMESTAMP')
    database.execute_sql('CREATE INDEX IF NOT EXISTS "scan_start_reported" ON "scan" ("engine_started_at") '
                         """WHERE (("status" = 'queued') AND ("engine_started_at" IS NOT NULL))""")


def _granted_scopes(database):
    """The scopes given to the keys (``GrantedScope``), so that a scope declared later reaches the
    keys that held every one of them at the next upgrade (``grant_declared_scopes``), with no
    migration of its own (as 25 was for ``watches``): today's are recorded as given."""
    from app.accounts.models import GrantedScope

    database.create_tables([GrantedScope], safe=True)
    database.execute_sql('INSERT INTO "granted_scope" ("name", "granted_at") '
                         f'SELECT "name", now() AT TIME ZONE \'UTC\' FROM unnest({database.param}::TEXT[]) AS "name" '
                         'ON CONFLICT DO NOTHING', (list(_SCOPES_35),))


# (version, name, function(database)). Append only; never edit an applied one.
# Versions 3 and 18 are absent on purpose: neither was ever assigned (the history has migration 4,
# portal sessions, appended right after 2, and 19 after 17), so no database records them. The gaps
# are harmless, as ``upgrade`` applies every version a database lacks, in this order; for the same
# reason they must never be used now: a database at a later version would run them after
# everything they assume.
MIGRATIONS = [
    (1, "initial schema", _initial),
    (2, "quota counters, leaner scan indexes", _quota_counters),
    (4, "portal_sessions", _portal_sessions),
    (5, "webhook secret rotation", _webhook_secret_rotation),
    (6, "test mode", _test_mode),
    (7, "longer idempotency endpoint", _longer_idempotency_endpoint),
    (8, "suppressions", _suppressions),
    (9, "purpose, case reference, thin webhooks", _purpose),
    (10, "activity log, partitioned by day", _activity_log),
    (11, "retention and erasure", _retention),
    (12, "key scopes, expiry, IP allowlist", _key_access),
    (13, "results explained: re-runs, finding feedback", _results_explained),
    (14, "portal roles and two-factor login", _portal_roles_and_two_factor),
    (15, "webhook endpoints", _webhook_endpoints),
    (16, "read charges summed per minute", _summed_reads),
    (17, "batch looks at the engine", _batch_looks),
    (19, "engine deletions of erased scans", _engine_deletions),
    (20, "findings keep their identity: feedback by finding, its scan", _findings_keep_identity),
    (21, "engine callbacks", _engine_callbacks),
    (22, "one way to track a scan: due looks", _one_way_to_track),
    (23, "events stored once per customer and mode", _events),
    (24, "request ids of up to 128 characters", _longer_request_ids),
    (25, "watches", _watches),
    (26, "watches spread by slot", _watch_slots),
    (27, "a watch ended by an opt-out keeps no identifier", _opted_out_watches_forget_target),
    (28, "findings with a confidence: min_confidence and required", _confidence),
    (29, "source health", _source_health),
    (30, "activity entries in the order they were written", _activity_export_order),
    (31, "audit sinks", _audit_sinks),
    (32, "SCIM provisioning: token digest, provisioned users", _scim),
    (33, "single sign-on by OpenID Connect", _single_sign_on),
    (34, "moves to running reported by callbacks, made in batches", _start_reported),
    (35, "the scopes given to the keys, recorded", _granted_scopes),
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
            grant_declared_scopes(db.obj)
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
    with db.atomic():
        grant_declared_scopes(db.obj)
    return applied


def grant_declared_scopes(database) -> list[str]:
    """Give each scope declared since the last upgrade (``app.accounts.scopes``: what the domains
    declare now, the one thing here that is not a migration's own value) to the keys that held every
    scope given before it, as migration 25 gave ``watches``: a key issued with every scope gets the
    new one, a narrowed key stays narrow; then record it as given. A database created at the newest
    version records today's scopes and gives none (its keys were issued with them). Returns the
    scopes given now."""
    from app.accounts.scopes import every_scope

    p = database.param
    given = [name for (name,) in database.execute_sql('SELECT "name" FROM "granted_scope"')]
    new = [scope.name for scope in every_scope() if scope.name not in given]
    granted = []
    for name in new:
        if given:
            database.execute_sql(f'UPDATE "api_key" SET "scopes" = array_append("scopes", {p}) '
                                 f'WHERE "scopes" @> {p}::TEXT[] AND NOT ({p} = ANY("scopes"))', (name, given, name))
            granted.append(name)
            log.info("gave the new scope %s to the keys that held every scope", name)
        database.execute_sql('INSERT INTO "granted_scope" ("name", "granted_at") '
                             f"VALUES ({p}, now() AT TIME ZONE 'UTC') ON CONFLICT DO NOTHING", (name,))
    return granted


def current_version() -> int:
    done = applied_versions()
    return max(done) if done else 0
