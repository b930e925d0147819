"""Customers' rows (name, tier, limits, settings, SCIM token) and the portal users made with them.

Their balance and ledger, quota windows and counts of scans in flight are billing's statements
(``app.billing.statements.balances``), on the same row: ``LOCK_CUSTOMER`` is the one lock of it
both take.
"""
from __future__ import annotations

from app.accounts.models import Customer, PortalUser
from app.plumbing.db import columns, execute, instance, table

# --- the customer's row -----------------------------------------------------------------

CUSTOMER_BY_ID = f"SELECT {columns(Customer)} FROM {table(Customer)} WHERE id = ?"
# The customer's row, locked until the transaction ends (an admission's lock). NO KEY UPDATE:
# admissions still queue on it, while an insert of a row that refers to the customer (an event,
# a scan, a ledger line) takes its foreign key check's KEY SHARE without waiting for them
# (``app.events.statements.stored.lock_customers``: the order a customer's locks are taken in).
LOCK_CUSTOMER = CUSTOMER_BY_ID + " FOR NO KEY UPDATE"


def lock(customer_id: str) -> Customer | None:
    """The customer's row locked until the transaction ends (``SELECT ... FOR NO KEY UPDATE``), or None."""
    row = execute(LOCK_CUSTOMER, (customer_id,)).fetchone()
    return None if row is None else instance(Customer, row)


def set_scim_token(customer_id: str, token_digest: str | None, at) -> bool:
    """Store (or, with None, clear) the customer's SCIM token digest and its time; whether the customer exists."""
    return Customer.update(scim_token_digest=token_digest, scim_token_set_at=at).where(
        Customer.id == customer_id).execute() == 1


def by_scim_token(token_digest: str) -> Customer | None:
    return Customer.get_or_none(Customer.scim_token_digest == token_digest)


def find(customer_id: str) -> Customer | None:
    return Customer.get_or_none(Customer.id == customer_id)


def get(customer_id: str) -> Customer:
    """The customer's row (``Customer.DoesNotExist`` if there is none)."""
    return Customer.get_by_id(customer_id)


def all_oldest_first() -> list[Customer]:
    return list(Customer.select().order_by(Customer.created_at))


def insert(*, customer_id: str, name: str, tier: str, balance: int) -> Customer:
    return Customer.create(id=customer_id, name=name, tier=tier, balance=balance)


def update(customer_id: str, changes: dict) -> None:
    """Set the fields ``changes`` names (tier, limit overrides) on the customer's row."""
    Customer.update(**changes).where(Customer.id == customer_id).execute()


# --- portal users, created with their customer's accounts ---------------------------------

def portal_user_by_email(email: str) -> PortalUser | None:
    return PortalUser.get_or_none(PortalUser.email == email)


def insert_portal_user(*, user_id: str, customer_id: str, email: str, password_hash: str,
                       role: str = "owner") -> PortalUser:
    return PortalUser.create(id=user_id, customer=customer_id, email=email, password_hash=password_hash, role=role)
