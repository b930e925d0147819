"""Billing's own tables: the quota windows' minute counters and the idempotency records (a
creation's answer kept, so that it is charged once). The balance's ledger is ``CreditLedger``,
beside the customer's row in ``app.accounts.models``."""
from peewee import SQL, BooleanField, CharField, CompositeKey, DateTimeField, ForeignKeyField, IntegerField, TextField

from app.accounts.models import Customer
from app.plumbing.models import BaseModel, utcnow


class QuotaMinute(BaseModel):
    """How many scans a customer created in one minute (``minute`` = created_at truncated).

    The rolling hour and day windows (D8) add these up instead of counting scans, so a
    call costs the same however many scans the customer made today; only the minute at
    each window's edge is counted from ``scan`` itself, which keeps the windows exact.
    Written in the admitting transaction; rows older than a day are pruned by the sweep.
    """

    customer = ForeignKeyField(Customer, on_delete="CASCADE", index=False)
    customer_id: str
    # Live and test scans are counted apart (D15).
    livemode = BooleanField(default=True)
    minute = DateTimeField()
    scans = IntegerField()

    class Meta:
        primary_key = CompositeKey("customer", "livemode", "minute")
        indexes = ((("minute",), False),)  # the sweep's pruning, across customers


class IdempotencyRecord(BaseModel):
    """The first 202 answer to an ``Idempotency-Key`` (D9), per customer for 24 hours."""

    customer = ForeignKeyField(Customer, on_delete="CASCADE")
    customer_id: str
    key = CharField(max_length=255)
    endpoint = CharField(max_length=255)  # the request's path
    request_hash = CharField(max_length=64)
    # processing until the first request answers 202; then done with its answer.
    done = BooleanField(default=False)
    response_status = IntegerField(null=True)
    response_body = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    # A key used by a test key and by a live key names two requests (D15).
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])

    class Meta:
        indexes = ((("customer", "livemode", "key"), True),)
