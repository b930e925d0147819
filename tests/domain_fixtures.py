"""The fixtures and helpers of a domain's rule tests (``tests/<domain>/test_X.py``): the rules called
directly, on the real database (and, for admission, the simulated engine over HTTP and the real
Redis), without the HTTP layer in between. A plugin of the root conftest, so every folder has them."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from peewee import fn

from app.accounts.models import CreditLedger, Customer
from app.billing import charges
from app.billing.models import QuotaMinute
from app.extensions import db
from app.scans.models import BulkBatch, Scan


@dataclass(frozen=True)
class Books:
    """Everything an admission may change for one customer."""

    balance: int
    ledger_rows: int
    ledger_sum: int
    scans: int
    batches: int
    in_flight: int
    quota_minutes: int


def books_of(customer_id: str) -> Books:
    return Books(
        balance=charges.balance_of(customer_id),
        ledger_rows=CreditLedger.select().where(CreditLedger.customer == customer_id).count(),
        ledger_sum=charges.ledger_sum(customer_id),
        scans=Scan.select().where(Scan.customer == customer_id).count(),
        batches=BulkBatch.select().where(BulkBatch.customer == customer_id).count(),
        in_flight=Customer.get_by_id(customer_id).in_flight,
        quota_minutes=QuotaMinute.select(fn.COALESCE(fn.SUM(QuotaMinute.scans), 0))
        .where(QuotaMinute.customer == customer_id).scalar(),
    )


@pytest.fixture
def conn(app):
    """An open database connection for the test's body (services expect their caller to hold one)."""
    with db.connection_context():
        yield


def new_customer(tier="business", credits=10, *, webhook_url=None, webhook_secret=None, livemode=True, **limits):
    """A customer (with ``limits`` overrides) and one key of the mode asked: ``(Customer, ApiKey)``."""
    from app.accounts import admin
    from app.billing import customers
    cust = customers.create_customer("Service test", tier, credits)
    if limits:
        admin.set_limits(cust.id, **limits)
    from app.webhooks import key_settings
    key, _ = key_settings.issue_key(cust.id, "k", webhook_url, webhook_secret, livemode=livemode)
    return Customer.get_by_id(cust.id), key


def new_scan(cust, key, target="jane@example.com", kind=None) -> Scan:
    """A scan admitted and submitted through the service (to the simulator, or the sandbox for a test key)."""
    from app.intake import creation as scans
    outcome = scans.create_scan(cust, key.id, target, kind, request_id="req_svc", livemode=key.livemode)
    return Scan.get_by_id(outcome.body["scan_id"])


def call_entry(customer_id: str, request_id: str | None = None, *, action: str = "scan.read") -> dict:
    """The activity entry a charge of ``charges.charge_call`` writes with it (D25), as a row."""
    from app.activity import entries
    return entries.call_entry(customer_id=customer_id, livemode=True, key_id="key_test", action=action,
                               resource_id=None, client_address=None, request_id=request_id,
                               status=200).row(credits=charges.CALL_PRICE)
