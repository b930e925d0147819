"""The activity log (D20): one row per authenticated API call and per portal action.

The table is partitioned by day (PostgreSQL declarative partitioning, RANGE on
``created_at``), so that expiring a day of entries is a ``DROP TABLE`` of its partition,
never a DELETE that walks the log (``app.activity.statements.entries``). A DEFAULT partition takes
the entries of a day whose partition does not exist yet, so that none is ever lost;
``app.activity.statements.entries.create_day_partition`` moves them into the day's partition when it is
made. A fresh database (``create_tables(ALL_MODELS)``) and an upgraded one (migration
10) both build the table through ``ActivityEntry.create_table`` below: the same DDL.

No foreign keys: every insert would look the customer and key up, and the log must
outlive what it talks about (a revoked key, an erased scan).
"""
from peewee import SQL, BooleanField, CharField, CompositeKey, DateTimeField, Field, IntegerField, SmallIntegerField
from playhouse.postgres_ext import ArrayField

from app.plumbing.models import BaseModel, utcnow

TABLE = "activity_entry"
DEFAULT_PARTITION = f"{TABLE}_default"


class Xid8Field(Field):
    """PostgreSQL's 64-bit transaction id (``xid8``: never wraps around), read as text."""

    field_type = "XID8"


# What a new entry's ``xact`` is: the id of the transaction that writes it. Entries written
# before the column existed read '0' (all committed long ago), without a rewrite of the log.
XACT_DEFAULT = "pg_current_xact_id()"


class ActivityEntry(BaseModel):
    id = CharField(max_length=40)  # "act_..."
    created_at = DateTimeField(default=utcnow)
    customer_id = CharField(max_length=40)
    livemode = BooleanField()
    key_id = CharField(max_length=40, null=True)  # the actor of an API call
    user_id = CharField(max_length=40, null=True)  # the actor of a portal action
    user_email = CharField(max_length=320, null=True)
    action = CharField(max_length=64)
    resource_id = CharField(max_length=64, null=True)
    status = SmallIntegerField()
    credits = IntegerField(default=0)
    client_address = CharField(max_length=64, null=True)
    request_id = CharField(max_length=128, null=True)  # a client's X-Request-Id: 1 to 128 characters
    purpose = CharField(max_length=32, null=True)
    case_ref = CharField(max_length=128, null=True)
    # The keyed hashes (app.plumbing.crypto.target_hash) of the targets a creation queued: one for
    # a single scan, one per queued target for a bulk call, so that a bulk call stays one entry
    # and "who looked up this target" is one GIN index look-up (target_hashes @> ARRAY[hash]).
    target_hashes = ArrayField(CharField, field_kwargs={"max_length": 64}, null=True, index=False)
    # The transaction that wrote the entry: the audit export's order and cursor. Every entry of a
    # transaction older than the oldest one still running in this database is committed and
    # visible, so an export that stops there never skips an entry that commits later with an
    # earlier time or id (app.activity.entries.export_page).
    xact = Xid8Field(constraints=[SQL(f"DEFAULT {XACT_DEFAULT}")])

    class Meta:
        table_name = TABLE
        # A partitioned table's primary key must include its partition key.
        primary_key = CompositeKey("id", "created_at")
        table_settings = ("PARTITION BY RANGE (created_at)",)
        indexes = (
            # A customer's entries of one mode, newest first (the API's and the portal's lists).
            (("customer_id", "livemode", "created_at", "id"), False),
            # The same, in the order the entries were written (the audit export, oldest first).
            (("customer_id", "livemode", "xact", "created_at", "id"), False),
        )

    @classmethod
    def create_table(cls, safe=True, **options):
        """The partitioned table, its indexes (created on the parent, PostgreSQL makes them on
        every partition) and its DEFAULT partition."""
        super().create_table(safe=safe, **options)
        cls._meta.database.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{DEFAULT_PARTITION}" PARTITION OF "{TABLE}" DEFAULT')


# Who looked up this target (the GIN index answers @> and &&); partial: most entries (reads,
# lists) have no target and cost the index nothing.
ActivityEntry.add_index(ActivityEntry.index(ActivityEntry.target_hashes, name="activity_entry_target_hashes",
                                            using="GIN", where=SQL("target_hashes IS NOT NULL")))
# Who read or touched this object (resource_id filter); partial for the same reason.
ActivityEntry.add_index(ActivityEntry.index(ActivityEntry.customer_id, ActivityEntry.resource_id,
                                            ActivityEntry.created_at, name="activity_entry_resource",
                                            where=SQL("resource_id IS NOT NULL")))
