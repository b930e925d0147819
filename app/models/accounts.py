"""Customers, their API keys, portal users and the credit ledger."""
from peewee import (
    SQL,
    AutoField,
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    ForeignKeyField,
    IntegerField,
    TextField,
)

from app.models.base import BaseModel, utcnow

TIERS = ("pro", "business", "enterprise")


def key_display(prefix: str, last4: str) -> str:
    """How a key is shown once issued: its prefix and last four characters, never more."""
    return f"{prefix}…{last4}"


class Customer(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    name = CharField(max_length=200)
    tier = CharField(max_length=20)
    # Changed only by conditional UPDATEs (services.billing): never read-modify-write.
    balance = BigIntegerField(default=0)
    # Per-customer overrides of the tier's limits (D10); NULL = the tier default.
    inflight_limit = IntegerField(null=True)
    hour_limit = IntegerField(null=True)
    day_limit = IntegerField(null=True)
    # Scans queued or running, kept by the code that moves a scan in or out of flight
    # (admission, its reversal, the final transition), so admission never counts scans.
    in_flight = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    # The same count for test-mode scans, which have limits of their own (D15).
    test_in_flight = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    created_at = DateTimeField(default=utcnow)
    # Creations must say why (D20: ``purpose_required`` without one).
    require_purpose = BooleanField(default=False, constraints=[SQL("DEFAULT FALSE")])
    # Days a final scan's personal data is kept after it ended (D20: 1 to 3650).
    result_retention_days = IntegerField(default=90, constraints=[SQL("DEFAULT 90")])


class ApiKey(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    customer = ForeignKeyField(Customer, backref="keys", on_delete="CASCADE")
    customer_id: str  # peewee's accessor of the foreign key, declared for the type checker
    name = CharField(max_length=200, default="")
    # SHA-256 hex of the plaintext; the plaintext itself is never stored (§5.3).
    digest = CharField(max_length=64, unique=True)
    prefix = CharField(max_length=32)
    last4 = CharField(max_length=4)
    created_at = DateTimeField(default=utcnow)
    last_used_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
    webhook_url = TextField(null=True)
    # What each event's body carries (D20): "full" (the scan with its result) or "thin" (ids,
    # status, times, purpose: no target, result or failure message; the receiver reads the rest).
    webhook_payload = CharField(max_length=8, default="full", constraints=[SQL("DEFAULT 'full'")])
    # Fernet token of the signing secret, keyed from SECRET_KEY (D11: encrypted at rest).
    webhook_secret_enc = TextField(null=True)
    # Rolling rotation (D16): the next secret (Fernet token too) and when it replaces the
    # current one. Both NULL when no rotation is under way (app.services.webhooks).
    webhook_next_secret_enc = TextField(null=True)
    webhook_secret_switch_at = DateTimeField(null=True)
    # False for a test key (``service_test_``, D15): its scans go to the sandbox engine, free.
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])

    @property
    def is_live(self) -> bool:
        return self.revoked_at is None

    @property
    def display(self) -> str:
        return key_display(self.prefix, self.last4)


class PortalUser(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    customer = ForeignKeyField(Customer, backref="users", on_delete="CASCADE")
    customer_id: str
    email = CharField(max_length=320, unique=True)
    password_hash = TextField()
    created_at = DateTimeField(default=utcnow)
    last_login_at = DateTimeField(null=True)
    # Set by an operator (``users disable``): no login, and every session ended.
    disabled = BooleanField(default=False, constraints=[SQL("DEFAULT FALSE")])


class PortalSession(BaseModel):
    """A portal login, revocable server-side (logout, password reset, disabled user).

    The browser's cookie holds a random token; only its SHA-256 digest is stored here,
    so a copy of the table opens no session.
    """

    id = CharField(primary_key=True, max_length=64)  # SHA-256 hex of the cookie's token
    user = ForeignKeyField(PortalUser, backref="sessions", on_delete="CASCADE")
    user_id: str
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)


class CreditLedger(BaseModel):
    """Every change of a balance, so that sum(delta) == balance always (D3)."""

    id = AutoField()
    customer = ForeignKeyField(Customer, backref="ledger", on_delete="CASCADE")
    customer_id: str
    delta = BigIntegerField()
    balance_after = BigIntegerField()
    # grant | call | scan | bulk | refund
    reason = CharField(max_length=20)
    scan_id = CharField(max_length=40, null=True)
    bulk_id = CharField(max_length=40, null=True)
    request_id = CharField(max_length=64, null=True)
    note = TextField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("customer", "created_at"), False),)
