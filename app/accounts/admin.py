"""Customers, API keys and portal users: what the operator CLI and the portal manage. A customer's
credits and the operator's views of its limits and usage are billing's (``app.billing.customers``),
which stands above the accounts."""
from __future__ import annotations

from werkzeug.security import generate_password_hash

from app.accounts import access
from app.accounts.models import TIERS, ApiKey, Customer, PortalUser
from app.accounts.statements import customers as customer_store
from app.accounts.statements import keys as key_store
from app.plumbing.crypto import digest, new_api_key
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import iso, new_id, utcnow
from app.plumbing.operator_input import check_range, check_text

# The limit overrides' column range (INTEGER): a number outside it would fail in the database.
INT_MAX = 2**31 - 1
MAX_NAME_LENGTH = 200  # Customer.name, ApiKey.name
# What a customer's ``result_retention_days`` may be (D20: the retention job, ``app.privacy.erasure``,
# erases after it; the default, 90, is the model's).
RETENTION_DAYS_RANGE = (1, 3650)


def _known_id(value: str) -> bool:
    # No id holds a NUL (PostgreSQL refuses to even compare one) or exceeds the id columns.
    return isinstance(value, str) and "\x00" not in value and len(value) <= 40


def create_customer(name: str, tier: str) -> Customer:
    """A new customer with no credits (``app.billing.customers.create_customer`` grants the initial
    ones in the same transaction)."""
    if tier not in TIERS:
        raise AccountError(f"tier must be one of {', '.join(TIERS)}")
    name = check_text("name", name, MAX_NAME_LENGTH, required=True)
    return customer_store.insert(customer_id=new_id("cus"), name=name, tier=tier, balance=0)


def lock_customer(customer_id: str) -> Customer:
    """The customer's row, locked until the transaction ends: this serialises a customer's
    admissions (``SELECT ... FOR UPDATE``). Call inside ``app.plumbing.db.write_transaction``."""
    customer = customer_store.lock(customer_id)
    if customer is None:
        raise Customer.DoesNotExist(f"no customer {customer_id}")
    return customer


def get_customer(customer_id: str) -> Customer:
    customer = customer_store.find(customer_id) if _known_id(customer_id) else None
    if customer is None:
        raise AccountError(f"no customer {customer_id}")
    return customer


def list_customers() -> list[Customer]:
    return customer_store.all_oldest_first()


def set_tier(customer_id: str, tier: str) -> Customer:
    if tier not in TIERS:
        raise AccountError(f"tier must be one of {', '.join(TIERS)}")
    get_customer(customer_id)
    customer_store.update(customer_id, {"tier": tier})
    return get_customer(customer_id)


def set_limits(customer_id: str, *, inflight=None, hour=None, day=None, watches=None) -> Customer:
    get_customer(customer_id)
    changes = {}
    for field, value in (("inflight_limit", inflight), ("hour_limit", hour), ("day_limit", day),
                         ("watch_limit", watches)):
        if value is not None:
            changes[field] = check_range(field, value, 0, INT_MAX)
    if changes:
        customer_store.update(customer_id, changes)
    return get_customer(customer_id)


def set_settings(customer_id: str, *, require_purpose: bool | None = None,
                 result_retention_days: int | None = None, require_2fa: bool | None = None) -> Customer:
    """The customer's settings: ``require_purpose`` (D20: creations must say why),
    ``result_retention_days`` (D20: how long a final scan's personal data is kept),
    ``require_2fa`` (D21: every portal user logs in with a second factor)."""
    get_customer(customer_id)
    changes: dict = {}
    if require_purpose is not None:
        changes["require_purpose"] = bool(require_purpose)
    if result_retention_days is not None:
        changes["result_retention_days"] = check_range("result_retention_days", result_retention_days,
                                                        *RETENTION_DAYS_RANGE)
    if require_2fa is not None:
        changes["require_2fa"] = bool(require_2fa)
    if changes:
        customer_store.update(customer_id, changes)
    return get_customer(customer_id)


def issue_key(customer_id: str, name: str = "", *, livemode: bool = True, scopes=None,
              expires_in_days: int | None = None, allowed_ips=None) -> tuple[ApiKey, str]:
    """A new key (a test key, ``service_test_…``, when ``livemode`` is False: D15); returns the
    row and the plaintext, which is never stored or shown again. D21: ``scopes`` (default:
    all), ``expires_in_days`` (default: never), ``allowed_ips`` (default: anywhere), checked
    by ``app.accounts.access`` before anything is written. A key with its webhook is
    ``app.webhooks.key_settings.issue_key``'s.
    """
    get_customer(customer_id)
    name = check_text("name", name, MAX_NAME_LENGTH, required=False)
    key_scopes = access.parse_scopes(scopes) if scopes is not None else list(access.SCOPES)
    expires_at = access.expiry_in_days(expires_in_days, utcnow()) if expires_in_days is not None else None
    blocks = access.parse_allowlist(allowed_ips)
    plaintext = new_api_key(livemode)
    with transaction():
        key = key_store.insert(key_id=new_id("key"), customer_id=customer_id, name=name, digest=digest(plaintext),
                               prefix=plaintext[:17], last4=plaintext[-4:], livemode=livemode,
                               scopes=key_scopes, expires_at=expires_at, allowed_ips=blocks)
    return key, plaintext


def get_key(key_id: str) -> ApiKey:
    key = key_store.find(key_id) if _known_id(key_id) else None
    if key is None:
        raise AccountError(f"no key {key_id}")
    return key


def list_keys(customer_id: str | None = None) -> list[ApiKey]:
    """Every key, oldest first, or one customer's (an unknown customer has none)."""
    if customer_id and not _known_id(customer_id):
        return []
    return key_store.all_oldest_first(customer_id)


def customer_keys(customer_id: str) -> list[ApiKey]:
    """A customer's keys, newest first (the portal's list)."""
    return key_store.of_customer_newest_first(customer_id)


def revoke_key(key_id: str) -> ApiKey:
    get_key(key_id)  # an unknown key is refused before anything changes
    key_store.revoke(key_id, utcnow())
    return key_store.get(key_id)


def create_user(customer_id: str, email: str, password: str, role: str = "owner") -> PortalUser:
    """A portal user of the customer with ``role`` (D21; the operator's default: an owner, who adds
    the others in the portal)."""
    from app.accounts.portal_roles import ROLES
    get_customer(customer_id)
    if role not in ROLES:
        raise AccountError(f"role must be one of {', '.join(ROLES)}, not {str(role)[:20]!r}")
    email = email.strip().lower()
    if "@" not in email:
        raise AccountError("email must be an e-mail address")
    if len(password) < 10:
        raise AccountError("password must have at least 10 characters")
    if customer_store.portal_user_by_email(email):
        raise AccountError(f"a user {email} exists already")
    return customer_store.insert_portal_user(user_id=new_id("usr"), customer_id=customer_id, email=email,
                                             password_hash=generate_password_hash(password, method="scrypt"),
                                             role=role)


def key_dict(key: ApiKey) -> dict:
    return {
        "key_id": key.id, "customer_id": key.customer_id, "name": key.name, "prefix": key.prefix,
        "last4": key.last4, "created_at": iso(key.created_at), "last_used_at": iso(key.last_used_at),
        "revoked_at": iso(key.revoked_at), "status": _status(key),
        "mode": "live" if key.livemode else "test",
        "webhook_url": key.webhook_url, "has_webhook_secret": bool(key.webhook_secret_enc),
        "webhook_payload": key.webhook_payload, **access.access_of(key),
    }


def _status(key: ApiKey) -> str:
    if not key.is_live:
        return "revoked"
    return "expired" if access.is_expired(key, utcnow()) else "active"
