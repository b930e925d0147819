"""Audit sinks (D32): a customer's SIEM, which receives every new activity entry, batched.

A sink's position is the audit export's cursor (``app.activity.entries``): the
writing transaction's id, time and id of the last entry it acknowledged, so a sink sees each
entry once in the order written, however late a transaction commits. ``lease_token`` fences
a batch in flight: a worker that lost its lease (killed, too slow) cannot move the position.
"""
from peewee import CharField, DateTimeField, IntegerField, TextField

from app.plumbing.models import BaseModel, utcnow

FORMATS = ("splunk_hec", "ndjson")


class AuditSink(BaseModel):
    id = CharField(primary_key=True, max_length=40)  # "snk_..."
    customer_id = CharField(max_length=40, index=True)
    url = CharField(max_length=2048)
    token_encrypted = TextField()  # crypto.encrypt_secret: never stored, logged or shown in clear
    format = CharField(max_length=16, default="splunk_hec")
    created_at = DateTimeField(default=utcnow)
    # The position after the last entry acknowledged: (xact as text, created_at, id); '0' and a
    # NULL time before the first.
    after_xact = CharField(max_length=24, default="0")
    after_created_at = DateTimeField(null=True)
    after_id = CharField(max_length=40, default="")
    failures = IntegerField(default=0)  # consecutive failed batches (the retry schedule's place)
    next_attempt_at = DateTimeField(default=utcnow, index=True)
    lease_token = CharField(max_length=40, null=True)
    lease_until = DateTimeField(null=True)
    last_error = CharField(max_length=64, null=True)
    last_status = IntegerField(null=True)
    delivered = IntegerField(default=0)  # entries acknowledged so far
