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
from playhouse.postgres_ext import ArrayField

from app.plumbing.models import BaseModel, utcnow

TIERS = ("pro", "business", "enterprise")


def key_display(prefix: str, last4: str) -> str:
    """How a key is shown once issued: its prefix and last four characters, never more."""
    return f"{prefix}…{last4}"


class Customer(BaseModel):
    id = CharField(primary_key=True, max_length=40)
    name = CharField(max_length=200)
    tier = CharField(max_length=20)
    # Changed only by conditional UPDATEs (app.billing.charges): never read-modify-write.
    balance = BigIntegerField(default=0)
    # Per-customer overrides of the tier's limits (D10); NULL = the tier default.
    inflight_limit = IntegerField(null=True)
    hour_limit = IntegerField(null=True)
    day_limit = IntegerField(null=True)
    # The most watches not ended (D28); NULL = the tier default.
    watch_limit = IntegerField(null=True)
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
    # Every portal user must log in with a second factor (D21); set by an owner or an operator.
    require_2fa = BooleanField(default=False, constraints=[SQL("DEFAULT FALSE")])
    # The customer's SCIM bearer token (D32): its SHA-256 digest only, and when it was issued;
    # both NULL when none is (or it was revoked). A new token replaces the digest.
    scim_token_digest = CharField(max_length=64, null=True, unique=True)
    scim_token_set_at = DateTimeField(null=True)


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
    # current one. Both NULL when no rotation is under way (app.webhooks.outbox).
    webhook_next_secret_enc = TextField(null=True)
    webhook_secret_switch_at = DateTimeField(null=True)
    # The key's first webhook endpoint (D22) is the columns above and these four; its id is
    # ``app.webhooks.endpoints.first_endpoint_id`` (derived from the key's). NULL events: the
    # defaults (scan.completed and scan.failed). ``webhook_disabled_at``: when auto-disable
    # stopped it (NULL while enabled, or when a person disabled it).
    webhook_events = ArrayField(TextField, null=True)
    webhook_enabled = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])
    webhook_description = TextField(default="", constraints=[SQL("DEFAULT ''")])
    webhook_disabled_at = DateTimeField(null=True)
    # False for a test key (``service_test_``, D15): its scans go to the sandbox engine, free.
    livemode = BooleanField(default=True, constraints=[SQL("DEFAULT TRUE")])
    # What the key may do (D21): the scopes it carries (``app.accounts.access.SCOPES``; every
    # key is issued with an explicit list), when it stops working (NULL: never), and the CIDR
    # blocks it may be used from (NULL: anywhere), as text in PostgreSQL's own notation: the
    # served read tests them in its statement with ``<<=`` (``app.accounts.statements.keys.KEY_CONDITIONS``).
    scopes = ArrayField(TextField)
    expires_at = DateTimeField(null=True)
    allowed_ips = ArrayField(TextField, null=True)

    @property
    def is_live(self) -> bool:
        return self.revoked_at is None

    @property
    def display(self) -> str:
        return key_display(self.prefix, self.last4)


class GrantedScope(BaseModel):
    """The scopes this database has given its keys: a scope declared since (``app.accounts.scopes``)
    is given, at the next upgrade, to the keys that held every one of these, then added here
    (``app.migrations.grant_declared_scopes``)."""
    name = CharField(primary_key=True, max_length=64)
    granted_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "granted_scope"


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
    # What the user may do in the portal (D21, app.accounts.portal_roles): owner, admin, developer, viewer.
    role = CharField(max_length=16, default="owner", constraints=[SQL("DEFAULT 'owner'")])
    # A user added by an owner sets a password through a one-time link: only its token's
    # SHA-256 digest is stored, with its end; both cleared when the link is used.
    password_token_digest = CharField(max_length=64, null=True, unique=True)
    password_token_expires_at = DateTimeField(null=True)
    # TOTP (RFC 6238): the secret Fernet-encrypted like webhook secrets; in force once
    # ``totp_enabled_at`` is set (before that it is an enrolment waiting for its first code).
    # ``totp_last_step`` is the last time step accepted, so a code is never accepted twice.
    totp_secret_enc = TextField(null=True)
    totp_enabled_at = DateTimeField(null=True)
    totp_last_step = BigIntegerField(null=True)
    # Who made the user when no person did (D32): "sso" (its first sign-in through the customer's
    # OpenID provider) or "scim" (the customer's identity provider provisioning it); NULL: the
    # operator or an owner. The portal's users page says it.
    provisioned_by = CharField(max_length=8, null=True)
    # The identity provider's own id of the user (SCIM ``externalId``), kept as it was sent.
    scim_external_id = TextField(null=True)
    # An operator's emergency door (``users reset-login``): until then the user may sign in
    # with a password although the customer's single sign-on is required (D32).
    password_login_until = DateTimeField(null=True)


class CustomerSso(BaseModel):
    """A customer's OpenID Connect sign-in (D32): its provider, its client, the e-mail domains
    it signs in, how the provider's claim maps to portal roles, and whether it is the only way in.
    One per customer; a domain belongs to one customer at most (``app.accounts.sso``)."""

    customer = ForeignKeyField(Customer, primary_key=True, backref="sso", on_delete="CASCADE")
    customer_id: str
    issuer = TextField()
    client_id = TextField()
    # Fernet token of the client secret, keyed from SECRET_KEY like webhook secrets: never shown again.
    client_secret_enc = TextField()
    domains = ArrayField(TextField)
    default_role = CharField(max_length=16, default="viewer")
    role_claim = TextField(null=True)
    # ``value=role`` pairs of ``--role-map``, in the operator's order.
    role_map = ArrayField(TextField, null=True)
    required = BooleanField(default=False, constraints=[SQL("DEFAULT FALSE")])
    updated_at = DateTimeField(default=utcnow)


class PortalRecoveryCode(BaseModel):
    """One of a user's ten one-time recovery codes, stored as its SHA-256 digest only."""

    id = AutoField()
    user = ForeignKeyField(PortalUser, backref="recovery_codes", on_delete="CASCADE")
    user_id: str
    digest = CharField(max_length=64)
    used_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("user", "digest"), True),)


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
    # grant | debit | call | reads | scan | bulk | refund
    reason = CharField(max_length=20)
    scan_id = CharField(max_length=40, null=True)
    bulk_id = CharField(max_length=40, null=True)
    request_id = CharField(max_length=128, null=True)  # a client's X-Request-Id: 1 to 128 characters
    note = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    # A row of summed reads (D24, reason "reads"): the charges of one customer's reads of one
    # mode and endpoint (``note``) in one ``minute``; ``reads`` of them, ``delta`` their sum.
    # NULL on every other row: each is one movement.
    livemode = BooleanField(null=True)
    minute = DateTimeField(null=True)
    reads = IntegerField(null=True)

    class Meta:
        indexes = ((("customer", "created_at"), False),)


# The minute's row of summed reads a read's charge is added to (``ON CONFLICT`` of this index);
# partial: the other rows are each their own movement and need no entry.
READS_MINUTE_INDEX = "credit_ledger_reads_minute"
CreditLedger.add_index(CreditLedger.index(CreditLedger.customer, CreditLedger.livemode, CreditLedger.note,
                                          CreditLedger.minute, unique=True, name=READS_MINUTE_INDEX,
                                          where=SQL("minute IS NOT NULL")))
