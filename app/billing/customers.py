"""A customer's money and limits as the operator sees and moves them (the CLI, the bench, the
development data): a new customer with its initial credits, credits added or taken back, the
customer with its limits, the overview with its usage and ledger, and the quota counters
rebuilt from the scans. Billing's, as it stands above the accounts: the customer's row and
keys are the accounts' (``app.accounts.admin``), the credits and quotas billing's."""
from __future__ import annotations

from app.accounts import admin
from app.accounts.models import Customer
from app.billing import charges, quotas, usage
from app.billing.limits import limits_for, watch_limit_for
from app.plumbing.db import transaction, write_transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import iso, utcnow
from app.plumbing.operator_input import check_range, check_text

# Balances and ledger deltas are BIGINT: a number outside its range would fail in the database.
BIGINT_MAX = 2**63 - 1
MAX_REASON_LENGTH = 500


def create_customer(name: str, tier: str, credits: int = 0) -> Customer:
    """A new customer (``admin.create_customer``) and its initial ``credits`` as one grant, in one
    transaction: a refused grant leaves no customer."""
    with transaction():
        customer = admin.create_customer(name, tier)
        check_range("credits", credits, 0, BIGINT_MAX)
        if credits:
            charges.credit(customer.id, credits, "grant", note="initial credits")
    return admin.get_customer(customer.id)


def add_credits(customer_id: str, amount: int, reason: str | None = None) -> int:
    """Add ``amount`` credits (negative: take them back) with the operator's optional ``reason``,
    which the ledger row keeps (its ``note``) and the customer sees with the movement; returns
    the new balance. A credit is a ``grant``, a debit a ``debit`` (``usage.OPERATOR_KINDS``)."""
    customer = admin.get_customer(customer_id)
    if amount == 0:
        raise AccountError("amount must not be zero")
    check_range("amount", amount, -BIGINT_MAX, BIGINT_MAX)
    reason = check_text("reason", reason, MAX_REASON_LENGTH, required=False) or None
    if amount > 0:
        if customer.balance > BIGINT_MAX - amount:
            raise AccountError(f"the balance would exceed {BIGINT_MAX}")
        return charges.credit(customer_id, amount, "grant", note=reason)
    balance = charges.charge(customer_id, -amount, "debit", note=reason)
    if balance is None:
        raise AccountError("the balance is smaller than the debit")
    return balance


def customer_dict(customer: Customer) -> dict:
    limits = limits_for(customer)
    return {
        "customer_id": customer.id, "name": customer.name, "tier": customer.tier, "balance": customer.balance,
        "limits": {"inflight": limits.inflight, "hour": limits.hour, "day": limits.day,
                   "watches": watch_limit_for(customer)},
        "overrides": {"inflight": customer.inflight_limit, "hour": customer.hour_limit, "day": customer.day_limit,
                      "watches": customer.watch_limit},
        "settings": {"require_purpose": customer.require_purpose,
                     "result_retention_days": customer.result_retention_days, "require_2fa": customer.require_2fa},
    }


def customer_overview(customer_id: str, now=None, ledger_rows: int = 10) -> dict:
    """What an operator needs to know about a customer at once: the balance, tier and
    limits, the usage ``now`` (as the portal's usage page counts it), the keys, and the
    latest credit movements with their notes (an operator's credit keeps its reason there)."""
    customer = admin.get_customer(customer_id)
    now = now or utcnow()
    window = quotas.window_usage(customer.id, now)
    keys = admin.list_keys(customer.id)
    ledger = usage.latest_ledger(customer.id, ledger_rows)
    return {
        **customer_dict(customer),
        "created_at": iso(customer.created_at),
        "usage": {"in_flight": quotas.inflight_count(customer.id), "hour": window.hour, "day": window.day},
        "keys": [admin.key_dict(k) for k in keys],
        "ledger": [{"created_at": iso(row.created_at), "delta": row.delta, "balance_after": row.balance_after,
                    "kind": row.reason, "note": row.note, "scan_id": row.scan_id or row.bulk_id,
                    "reads": row.reads}
                   for row in ledger],
    }


def recount(customer_id: str) -> dict:
    """Rebuild the customer's quota counters from its scans (``flask customers recount``).

    The counters move with every scan in the code, so this only matters after scans were
    changed by hand in the database. Under the admission's lock: an admission waits, and a
    scan finishing meanwhile is counted in flight here and taken out after (its UPDATE of
    the customer waits for this transaction), so the counters stay right.
    """
    now = utcnow()
    with write_transaction():
        customer = admin.lock_customer(customer_id)
        counted, minutes = quotas.counted_from_scans(now, customer_id)
        test_counted, test_minutes = quotas.counted_from_scans(now, customer_id, livemode=False)
        in_flight, test_in_flight = counted[customer_id], test_counted[customer_id]
        quotas.reset_counters(customer_id, in_flight=in_flight, test_in_flight=test_in_flight)
        for livemode, counts in ((True, minutes), (False, test_minutes)):
            for (_, minute), count in counts.items():
                quotas.count_created(customer_id, minute, count, livemode)
    return {"customer_id": customer_id, "in_flight": {"was": customer.in_flight, "now": in_flight},
            "day": sum(minutes.values())}
