"""Credits: every change is one conditional UPDATE plus a ledger row (D3).

The balance is never read, changed and written back: ``UPDATE ... SET balance =
balance - n WHERE id = ? AND balance >= n RETURNING balance`` either succeeds whole
or touches no row, so concurrent calls can neither overdraw nor lose a credit.
Callers run these inside their own transaction when the charge must commit together
with other rows (a scan and its charge, D3/D13).
"""
from __future__ import annotations

from app.extensions import db
from app.models import CreditLedger, Customer


def _apply(customer_id: str, delta: int, reason: str, **ref) -> int | None:
    query = Customer.update(balance=Customer.balance + delta).where(Customer.id == customer_id)
    if delta < 0:
        query = query.where(Customer.balance >= -delta)
    rows = list(query.returning(Customer.balance).tuples().execute())
    if not rows:
        return None
    balance = rows[0][0]
    CreditLedger.create(customer=customer_id, delta=delta, balance_after=balance, reason=reason, **ref)
    return balance


def charge(customer_id: str, amount: int, reason: str, **ref) -> int | None:
    """Take ``amount`` credits; the new balance, or None when the balance is short."""
    with db.atomic():
        return _apply(customer_id, -amount, reason, **ref)


def credit(customer_id: str, amount: int, reason: str, **ref) -> int:
    """Give ``amount`` credits (a grant or a refund); returns the new balance."""
    with db.atomic():
        balance = _apply(customer_id, amount, reason, **ref)
    if balance is None:
        raise LookupError(f"no customer {customer_id}")
    return balance


def balance_of(customer_id: str) -> int:
    return Customer.select(Customer.balance).where(Customer.id == customer_id).scalar()


def ledger_sum(customer_id: str) -> int:
    from peewee import fn
    return CreditLedger.select(fn.COALESCE(fn.SUM(CreditLedger.delta), 0)).where(
        CreditLedger.customer == customer_id).scalar()
