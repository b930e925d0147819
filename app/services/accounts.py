"""Customers, API keys and portal users: what the operator CLI and the portal manage."""
from __future__ import annotations

from werkzeug.security import generate_password_hash

from app.extensions import db
from app.models import ApiKey, Customer, PortalUser, new_id, utcnow
from app.models.accounts import TIERS
from app.services import billing
from app.services.crypto import digest, encrypt_secret, new_api_key


class AccountError(ValueError):
    """An operator or portal input that cannot be accepted; the message says why."""


def create_customer(name: str, tier: str, credits: int = 0) -> Customer:
    if tier not in TIERS:
        raise AccountError(f"tier must be one of {', '.join(TIERS)}")
    if credits < 0:
        raise AccountError("credits must not be negative")
    with db.atomic():
        customer = Customer.create(id=new_id("cus"), name=name, tier=tier, balance=0)
        if credits:
            billing.credit(customer.id, credits, "grant", note="initial credits")
    return Customer.get_by_id(customer.id)


def get_customer(customer_id: str) -> Customer:
    customer = Customer.get_or_none(Customer.id == customer_id)
    if customer is None:
        raise AccountError(f"no customer {customer_id}")
    return customer


def set_tier(customer_id: str, tier: str) -> Customer:
    if tier not in TIERS:
        raise AccountError(f"tier must be one of {', '.join(TIERS)}")
    get_customer(customer_id)
    Customer.update(tier=tier).where(Customer.id == customer_id).execute()
    return get_customer(customer_id)


def set_limits(customer_id: str, *, inflight=None, hour=None, day=None) -> Customer:
    get_customer(customer_id)
    changes = {}
    for field, value in (("inflight_limit", inflight), ("hour_limit", hour), ("day_limit", day)):
        if value is not None:
            if value < 0:
                raise AccountError(f"{field} must not be negative")
            changes[field] = value
    if changes:
        Customer.update(**changes).where(Customer.id == customer_id).execute()
    return get_customer(customer_id)


def add_credits(customer_id: str, amount: int) -> int:
    get_customer(customer_id)
    if amount == 0:
        raise AccountError("amount must not be zero")
    if amount > 0:
        return billing.credit(customer_id, amount, "grant", note="operator credit")
    balance = billing.charge(customer_id, -amount, "grant", note="operator debit")
    if balance is None:
        raise AccountError("the balance is smaller than the debit")
    return balance


def issue_key(customer_id: str, name: str = "", webhook_url: str | None = None,
              webhook_secret: str | None = None) -> tuple[ApiKey, str]:
    """A new key; returns the row and the plaintext, which is never stored or shown again."""
    get_customer(customer_id)
    if webhook_secret:
        from app.services.webhooks import check_secret
        check_secret(webhook_secret)  # the rule of the key's page (D16)
    if webhook_url:
        from app.services.webhook_urls import check_webhook_url
        check_webhook_url(webhook_url)
    plaintext = new_api_key()
    key = ApiKey.create(
        id=new_id("key"), customer=customer_id, name=name or "", digest=digest(plaintext),
        prefix=plaintext[:17], last4=plaintext[-4:], webhook_url=webhook_url or None,
        webhook_secret_enc=encrypt_secret(webhook_secret) if webhook_secret else None,
    )
    return key, plaintext


def revoke_key(key_id: str) -> ApiKey:
    key = ApiKey.get_or_none(ApiKey.id == key_id)
    if key is None:
        raise AccountError(f"no key {key_id}")
    ApiKey.update(revoked_at=utcnow()).where((ApiKey.id == key_id) & ApiKey.revoked_at.is_null()).execute()
    return ApiKey.get_by_id(key_id)


def create_user(customer_id: str, email: str, password: str) -> PortalUser:
    get_customer(customer_id)
    email = email.strip().lower()
    if "@" not in email:
        raise AccountError("email must be an e-mail address")
    if len(password) < 10:
        raise AccountError("password must have at least 10 characters")
    if PortalUser.get_or_none(PortalUser.email == email):
        raise AccountError(f"a user {email} exists already")
    return PortalUser.create(id=new_id("usr"), customer=customer_id, email=email,
                             password_hash=generate_password_hash(password, method="scrypt"))


def customer_dict(customer: Customer) -> dict:
    from app.services.limits import limits_for
    limits = limits_for(customer)
    return {
        "customer_id": customer.id, "name": customer.name, "tier": customer.tier, "balance": customer.balance,
        "limits": {"inflight": limits.inflight, "hour": limits.hour, "day": limits.day},
        "overrides": {"inflight": customer.inflight_limit, "hour": customer.hour_limit, "day": customer.day_limit},
    }


def key_dict(key: ApiKey) -> dict:
    from app.models.base import iso
    return {
        "key_id": key.id, "customer_id": key.customer_id, "name": key.name, "prefix": key.prefix,
        "last4": key.last4, "created_at": iso(key.created_at), "last_used_at": iso(key.last_used_at),
        "revoked_at": iso(key.revoked_at), "status": "active" if key.is_live else "revoked",
        "webhook_url": key.webhook_url, "has_webhook_secret": bool(key.webhook_secret_enc),
    }
