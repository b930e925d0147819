"""The events a customer's scans produce, stored once per customer and mode (D27): what the
events list and stream read, whether or not an endpoint or a stream wants them."""
from peewee import BigAutoField, BooleanField, CharField, DateTimeField, ForeignKeyField, TextField

from app.accounts.models import Customer
from app.plumbing.models import BaseModel, utcnow


class Event(BaseModel):
    # Increasing: a later event of a customer always has a larger id (the stream resumes after one).
    id = BigAutoField()
    customer = ForeignKeyField(Customer, on_delete="CASCADE", index=False)  # (customer, livemode, id) serves
    customer_id: str
    livemode = BooleanField()
    kind = CharField(max_length=40)
    scan_id = CharField(max_length=40, null=True)
    bulk_id = CharField(max_length=40, null=True)
    watch_id = CharField(max_length=40, null=True)
    created_at = DateTimeField(default=utcnow)
    # The full body as UTF-8 JSON text, the same bytes a full webhook delivery of it sends; once its
    # scan is erased (D20), the thin body (no target, result or failure message).
    body = TextField()

    class Meta:
        table_name = "event"
        indexes = (
            (("customer", "livemode", "id"), False),
            (("scan_id",), False),
            (("bulk_id",), False),
            (("created_at",), False),
        )
