"""Test data built through the same services the operator CLI uses."""
from __future__ import annotations

from dataclasses import dataclass

from app.accounts import admin
from app.accounts.models import ApiKey, Customer
from app.billing import customers
from app.webhooks import key_settings


@dataclass
class Account:
    customer: Customer
    key: ApiKey
    api_key: str

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def id(self) -> str:
        return self.customer.id


def customer(tier="business", credits=100, *, inflight=None, hour=None, day=None, webhook_url=None,
             webhook_secret=None, name="Test customer") -> Account:
    cust = customers.create_customer(name, tier, credits)
    if inflight is not None or hour is not None or day is not None:
        cust = admin.set_limits(cust.id, inflight=inflight, hour=hour, day=day)
    key, plaintext = key_settings.issue_key(cust.id, "test key", webhook_url, webhook_secret)
    return Account(cust, key, plaintext)


def sandbox_key(account: Account, *, webhook_url=None, webhook_secret=None, name="sandbox key") -> Account:
    """A test-mode key (``service_test_…``, D15) for the same customer as ``account``."""
    key, plaintext = key_settings.issue_key(account.id, name, webhook_url, webhook_secret, livemode=False)
    return Account(account.customer, key, plaintext)
