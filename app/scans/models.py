"""Scans, bulk batches, findings' feedback and the engine callbacks taken."""
from peewee import (
    SQL,
    AutoField,
    BooleanField,
    CharField,
    DateTimeField,
    DoubleField,
    ForeignKeyField,
    IntegerField,
    TextField,
)

from app.accounts.models import ApiKey, Customer
from app.plumbing.models import BaseModel, utcnow

QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"
IN_FLIGHT = (QUEUED, RUNNING)
FINAL = (COMPLETED, FAILED)
# The most targets one bulk call (a batch) takes.
MAX_BULK_TARGETS = 100


class BulkBatch(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    customer = ForeignKeyField(Customer, backref="batches", on_delete="CASCADE")
    api_key = ForeignKeyField(ApiKey, on_delete="CASCADE")
    customer_id: str
    api_key_id: str
    total = IntegerField()
    created_at = DateTimeField(default=utcnow)
    # The mode of the key that created it (D15); test and live data never mix.
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])
    # Why the customer looked these targets up, and their own reference (D20); every scan of
    # the batch carries them too.
    purpose = CharField(max_length=32, null=True)
    case_ref = CharField(max_length=128, null=True)


class Scan(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    # Neither has an index of its own: (customer, created_at) below serves every look-up
    # by customer, nothing looks scans up by key, and keys are revoked, never deleted.
    # Every index is written by each of a bulk call's 100 INSERTs.
    customer = ForeignKeyField(Customer, backref="scans", on_delete="CASCADE", index=False)
    api_key = ForeignKeyField(ApiKey, on_delete="CASCADE", index=False)
    bulk = ForeignKeyField(BulkBatch, backref="scans", null=True, on_delete="CASCADE", index=False)
    customer_id: str
    api_key_id: str
    bulk_id: str | None
    # Position of the target in the bulk request, so batch reads keep the request's order.
    bulk_index = IntegerField(null=True)
    kind = CharField(max_length=10)
    # NULL once the scan is erased (D20: retention or a customer's request), with its result,
    # failure message and webhook bodies; ids, times, purpose and charges stay.
    target = CharField(max_length=300, null=True)
    # Why the customer looked this target up, and their own reference (D20), as created.
    purpose = CharField(max_length=32, null=True)
    case_ref = CharField(max_length=128, null=True)
    status = CharField(max_length=10, default=QUEUED)
    engine_id = CharField(max_length=2000, null=True)
    recipes_total = IntegerField(default=0)
    recipes_done = IntegerField(default=0)
    # When the engine expects the scan to be done; the read derives the remaining eta.
    eta_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)
    started_at = DateTimeField(null=True)
    completed_at = DateTimeField(null=True)
    failed_at = DateTimeField(null=True)
    failure_code = CharField(max_length=40, null=True)
    failure_message = TextField(null=True)
    result_json = TextField(null=True)
    # Retired (D24): the fencing token of the RQ job chain that tracked a scan before the upgrade
    # that made due looks the one way. Nothing writes it but NULL; kept so that a process of
    # before the upgrade, still running during it, finds its column (a later migration drops it).
    tracking_job_id = CharField(max_length=80, null=True)
    last_checked_at = DateTimeField(null=True)
    check_errors = IntegerField(default=0)
    # Batch looks (D24): when the scan is next due to be looked at (NULL until it is submitted,
    # and for a scan a job chain tracked before the upgrade, until it is handed over), and the
    # fencing token of the looks: a claim adds one, and only the look that holds the current
    # number may write what it saw.
    next_look_at = DateTimeField(null=True)
    look_generation = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    # Whether the engine promised to call back when the scan changes (E7): its looks may then
    # wait past the eta, since a callback makes it due at once.
    callbacks = BooleanField(default=False, constraints=[SQL("DEFAULT FALSE")])
    # When a callback (E7) said that the engine runs this queued scan: the lookers move such scans
    # to ``running``, with their events, several to a transaction (``looks.move_reported_starts``). The
    # scan's ``started_at`` is then this time. Kept after the move; NULL when no callback said so.
    engine_started_at = DateTimeField(null=True)
    # The mode of the key that created it (D15): which engine answers, whether it was charged.
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])
    # When its personal data was erased (D20); NULL while it is kept.
    erased_at = DateTimeField(null=True)
    # The scan whose failed sources this one re-runs (D23); a plain id, so that erasing the
    # first scan leaves its re-run alone.
    rerun_of = CharField(max_length=40, null=True)
    # The watch that made it (D28); a plain id, so ending or erasing leaves scans alone.
    watch_id = CharField(max_length=40, null=True)
    # D29: findings under this confidence are left out of what the customer sees (NULL: none), and
    # the match rule the scan must meet for its creation to be paid (NULL: none), as created.
    min_confidence = DoubleField(null=True)
    required = CharField(max_length=500, null=True)

    class Meta:
        indexes = (
            (("customer", "created_at"), False),
            (("bulk", "bulk_index"), False),
        )


# The scans in flight, by customer (the 429's Retry-After hint, the portal). Partial: a scan
# leaves it when it is final, so it stays as small as what is in flight, and the planner never
# mistakes it for the windows' (customer, created_at).
Scan.add_index(Scan.index(Scan.customer, name="scan_in_flight_customer", where=Scan.status.in_(IN_FLIGHT)))
# The due looks (D24): scans in flight that the batch looks track, by due time. Partial, so the
# claim's ORDER BY ... LIMIT reads only what is due, however many scans were ever made.
Scan.add_index(Scan.index(Scan.next_look_at, name="scan_due_look",
                          where=Scan.status.in_(IN_FLIGHT) & Scan.next_look_at.is_null(False)))
# The queued scans a callback said the engine runs (E7), which the lookers move to running: partial,
# so it holds only those waiting for their move (a few, for a moment) and its scan is cheap when empty.
Scan.add_index(Scan.index(Scan.engine_started_at, name="scan_start_reported",
                          where=(Scan.status == QUEUED) & Scan.engine_started_at.is_null(False)))
# A callback's scan (E7), by the engine's id: in flight only, so the index stays as small as what
# is in flight (and an erased scan's id, gone with it, D25, was never in it for long).
Scan.add_index(Scan.index(Scan.engine_id, name="scan_in_flight_engine_id",
                          where=Scan.status.in_(IN_FLIGHT) & Scan.engine_id.is_null(False)))
# A watch's scans (D28): its previous completed scan, found among its own.
Scan.add_index(Scan.index(Scan.watch_id, Scan.created_at, name="scan_watch", where=Scan.watch_id.is_null(False)))
# The retention job's look (D20): final scans not yet erased, by when they ended. Partial, so
# erased scans leave it and the job's cost follows what is still to erase, not the table.
FINISHED_AT = SQL("(COALESCE(completed_at, failed_at))")
Scan.add_index(Scan.index(FINISHED_AT, name="scan_erasable_finished_at",
                          where=Scan.erased_at.is_null() & Scan.status.in_(FINAL)))


FEEDBACK_VERDICTS = ("false_positive", "confirmed")


class FindingFeedback(BaseModel):
    """Each feedback a customer gave on a finding of a scan's result (D23), oldest first; the
    latest is also written into the stored result, so reads show it at no cost. Goes with its
    scan (erasure, D20)."""

    id = AutoField()
    scan = ForeignKeyField(Scan, backref="feedback", on_delete="CASCADE")
    scan_id: str
    finding_id = CharField(max_length=40)
    verdict = CharField(max_length=20)
    note = TextField(default="")
    # The sources that found the finding when the feedback was given (a JSON list of ids).
    source_ids = TextField(default="[]")
    api_key_id = CharField(max_length=40, null=True)  # who gave it: the key, or None from the portal
    created_at = DateTimeField(default=utcnow)

    class Meta:
        # The feedback on a finding in any scan (D26: it follows the finding to later scans).
        indexes = ((("finding_id",), False),)

class EngineCallback(BaseModel):
    """The ``webhook-id`` of each engine callback taken (E7), kept until its timestamp is past the
    5 minutes a signature is accepted for, so a replay of it inside them is refused; then pruned
    (``app.tracking.callbacks.forget_expired``, a periodic job). A small table: the ids of the
    last minutes."""

    id = CharField(max_length=200, primary_key=True)
    until = DateTimeField()

    class Meta:
        table_name = "engine_callback"
