"""Watches (D28): a target scanned again on a schedule, its changes announced."""
from peewee import BooleanField, CharField, DateTimeField, DoubleField, ForeignKeyField, IntegerField, TextField

from app.accounts.models import ApiKey, Customer
from app.plumbing.models import BaseModel, utcnow

ACTIVE, PAUSED, ENDED = "active", "paused", "ended"
STATUSES = (ACTIVE, PAUSED, ENDED)


class Watch(BaseModel):
    id = CharField(primary_key=True, max_length=40)  # wch_...
    customer = ForeignKeyField(Customer, on_delete="CASCADE", index=False)
    # The key that created it: its scheduled scans are made with it, in its mode (D15).
    api_key = ForeignKeyField(ApiKey, on_delete="CASCADE", index=False)
    customer_id: str
    api_key_id: str
    livemode = BooleanField(default=True)
    kind = CharField(max_length=10)
    # Both NULL once an opt-out ended the watch: it keeps no identifier of the person (D25).
    target = CharField(max_length=300, null=True)
    # The keyed hash of the target's opt-out key (``targets.opt_out_key``): an opt-out added
    # later ends the watches it matches, without reading any target.
    optout_hash = CharField(max_length=64, null=True)
    interval = CharField(max_length=10)  # daily, weekly, monthly
    # Its place among the customer's watches of this mode and interval, which its due times
    # follow (``app.watches.watch_times``).
    slot = IntegerField(null=True)
    status = CharField(max_length=10, default=ACTIVE)
    purpose = CharField(max_length=32, null=True)
    case_ref = CharField(max_length=128, null=True)
    created_at = DateTimeField(default=utcnow)
    # When its next scheduled scan is due (NULL unless active): the scheduler's claim reads it.
    next_scan_at = DateTimeField(null=True)
    last_scan_id = CharField(max_length=40, null=True)
    last_change_at = DateTimeField(null=True)
    last_changes = TextField(null=True)  # JSON: the ``changes`` of its last watch.changed
    # Why its last scheduled scan could not be made, and since when none could.
    last_error = CharField(max_length=300, null=True)
    missed_since = DateTimeField(null=True)
    ended_at = DateTimeField(null=True)
    end_reason = CharField(max_length=40, null=True)
    # D29: given to each of its scans (NULL: none).
    min_confidence = DoubleField(null=True)
    required = CharField(max_length=500, null=True)

    class Meta:
        table_name = "watch"
        indexes = ((("customer", "livemode", "created_at"), False),)


# The due watches: partial, so the claim reads only active watches by due time, however many exist.
Watch.add_index(Watch.index(Watch.next_scan_at, name="watch_due",
                            where=(Watch.status == ACTIVE) & Watch.next_scan_at.is_null(False)))
Watch.add_index(Watch.index(Watch.optout_hash, name="watch_optout_hash", where=Watch.status != ENDED))
# A customer's slots of one mode and interval, read by an index-only scan when a watch takes one.
Watch.add_index(Watch.index(Watch.customer, Watch.livemode, Watch.interval, Watch.slot, name="watch_slot",
                            where=Watch.status != ENDED))
