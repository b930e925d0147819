"""Webhook endpoints, deliveries and their attempts (§6.5, D11, D22)."""
from peewee import SQL, AutoField, BooleanField, CharField, DateTimeField, ForeignKeyField, IntegerField, TextField
from playhouse.postgres_ext import ArrayField

from app.accounts.models import ApiKey, Customer
from app.plumbing.models import BaseModel, utcnow

PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"
# A pending delivery of a scan that was erased (D20): its body is gone, it is never sent.
CANCELLED = "cancelled"
# An event for an endpoint that auto-disable stopped (D22): recorded, not sent; ``recover`` sends it.
SKIPPED = "skipped"
# An attempt's outcome while its request is under way (then SUCCEEDED or FAILED).
IN_PROGRESS = "in_progress"


class WebhookDelivery(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    customer = ForeignKeyField(Customer, on_delete="CASCADE")
    api_key = ForeignKeyField(ApiKey, backref="deliveries", on_delete="CASCADE")
    customer_id: str
    api_key_id: str
    scan_id = CharField(max_length=40, null=True)
    event = CharField(max_length=40)
    url = TextField()
    # The exact bytes sent on every attempt (D11), as UTF-8 text; NULL once its scan is erased (D20).
    body = TextField(null=True)
    status = CharField(max_length=12, default=PENDING)
    attempts = IntegerField(default=0)
    # Attempts already made before the current series (a redelivery starts a new series).
    series_start = IntegerField(default=0)
    next_attempt_at = DateTimeField(null=True)
    job_id = CharField(max_length=80, null=True)
    created_at = DateTimeField(default=utcnow)
    finished_at = DateTimeField(null=True)
    # The mode of the key (D15): a test scan's delivery, or a test key's test event.
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])
    # The endpoint it is addressed to (D22): a ``WebhookEndpoint`` or the key's first endpoint (whose
    # data is the key's own columns); no foreign key, so a deleted endpoint's history stays readable.
    endpoint_id = CharField(max_length=40, null=True)

    class Meta:
        indexes = (
            (("api_key", "created_at"), False),
            (("endpoint_id", "created_at"), False),
            (("status", "next_attempt_at"), False),
            (("scan_id", "event"), False),
        )


class WebhookEndpoint(BaseModel):
    """A key's endpoint after its first (D22). Its fields are named as the key's own webhook
    columns, so signing and rolling rotation (``app.webhooks.outbox``) work on either row."""

    id = CharField(primary_key=True, max_length=40)
    customer = ForeignKeyField(Customer, on_delete="CASCADE")
    api_key = ForeignKeyField(ApiKey, backref="endpoints", on_delete="CASCADE")
    customer_id: str
    api_key_id: str
    webhook_url = TextField()
    webhook_events = ArrayField(TextField)
    webhook_payload = CharField(max_length=8, default="full")
    webhook_enabled = BooleanField(default=True)
    webhook_description = TextField(default="")
    webhook_disabled_at = DateTimeField(null=True)
    webhook_secret_enc = TextField(null=True)
    webhook_next_secret_enc = TextField(null=True)
    webhook_secret_switch_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("api_key", "created_at"), False),)


class DeliveryAttempt(BaseModel):
    id = AutoField()
    delivery = ForeignKeyField(WebhookDelivery, backref="attempt_rows", on_delete="CASCADE")
    delivery_id: str
    number = IntegerField()
    started_at = DateTimeField(default=utcnow)
    url = TextField()
    status_code = IntegerField(null=True)
    # Error class when no HTTP status came back: timeout, connection_error, redirect_not_followed,
    # ssrf_refused, worker_lost, ...
    error = CharField(max_length=80, null=True)
    duration_ms = IntegerField(null=True)
    response_excerpt = TextField(null=True)
    # in_progress until the HTTP request returns; a row left in_progress by a killed
    # worker is closed as worker_lost by the sweep, so each request has one row.
    outcome = CharField(max_length=12, default="in_progress")

    class Meta:
        indexes = ((("delivery", "number"), True),)
