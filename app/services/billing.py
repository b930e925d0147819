"""Credits: every change is one conditional UPDATE plus a ledger row (D3).

The balance is never read, changed and written back: ``UPDATE ... SET balance =
balance - n WHERE id = ? AND balance >= n RETURNING balance`` either succeeds whole
or touches no row, so concurrent calls can neither overdraw nor lose a credit.
Callers run these inside their own transaction when the charge must commit together
with other rows (a scan and its charge, D3/D13).

``charge_call`` is the charge of every served read: on PostgreSQL the conditional
UPDATE, its ledger row and the quota windows the answer reports (D8) are one
statement, so a read pays one round trip and one commit for all three.
"""
from __future__ import annotations

from app.db import db, execute_prepared, execute_prepared_batch, table
from app.models import CreditLedger, Customer, utcnow
from app.services import quotas
from app.services.errors import InsufficientBalance

# What a call costs (D3). A served call costs 1 credit when its answer is one of these
# statuses (2xx, 400, 403, 404; no 401, 402, 409, 429 or 5xx); a creation costs one
# credit per scan it queues (``admission_cost``), charged with the scans.
CALL_PRICE = 1
CHARGED_STATUSES = frozenset({200, 202, 400, 403, 404})


def is_billed(livemode: bool) -> bool:
    """Whether a key's calls and scans are paid for: live ones are, test ones never (D15:
    no charge, no credit needed, no ledger row). The one place that decides it."""
    return bool(livemode)


def call_is_charged(status: int, livemode: bool = True) -> bool:
    return is_billed(livemode) and status in CHARGED_STATUSES


def admission_cost(queued: int, livemode: bool = True) -> int:
    """The credits a creation of ``queued`` scans costs: one per scan, one for a bulk call that
    queued none; nothing in test mode."""
    return max(queued, 1) if is_billed(livemode) else 0


def check_can_pay(balance: int, livemode: bool = True) -> None:
    """Refuse a call from a balance below one call's price (before any validation, D3);
    a test key needs no credit."""
    if is_billed(livemode) and balance < CALL_PRICE:
        raise InsufficientBalance(balance)


MAX_ENDPOINT_NOTE = 300
LEDGER_REFS = {"scan_id", "bulk_id", "request_id", "note"}
APPLY = f"""
WITH changed AS (
    UPDATE {table(Customer)} SET balance = balance + ?, in_flight = in_flight + ?
    WHERE id = ? AND (? OR balance >= ?) RETURNING balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, scan_id, bulk_id, request_id, note,
                                       created_at)
    SELECT ?, ?, balance, ?, ?, ?, ?, ?, ? FROM changed RETURNING balance_after)
SELECT balance_after FROM ledger"""


def apply_statement(customer_id: str, delta: int, reason: str, *, in_flight: int = 0, **ref) -> tuple[str, tuple]:
    """The SQL and parameters of ``apply`` (one row, the new balance, or none), to run with others."""
    unknown = set(ref) - LEDGER_REFS
    if unknown:
        raise TypeError(f"unknown ledger fields: {', '.join(sorted(unknown))}")
    return APPLY, (delta, in_flight, customer_id, delta >= 0, -delta, customer_id, delta, reason, ref.get("scan_id"),
                   ref.get("bulk_id"), ref.get("request_id"), ref.get("note"), utcnow())


def apply(customer_id: str, delta: int, reason: str, *, in_flight: int = 0, **ref) -> int | None:
    """Change the balance by ``delta`` with its ledger row; ``in_flight`` moves the scans in
    flight in the same UPDATE (admissions and their reversals change both at once).

    Runs in the caller's transaction (``charge`` and ``credit`` open their own); returns
    the new balance, or None when a debit would overdraw it (nothing is written then)."""
    # The conditional UPDATE and its ledger row in one statement (one round trip).
    row = execute_prepared(*apply_statement(customer_id, delta, reason, in_flight=in_flight, **ref)).fetchone()
    return row[0] if row else None


def apply_after(statements: list, customer_id: str, delta: int, reason: str, *, in_flight: int = 0,
                **ref) -> int | None:
    """Run ``statements`` (``(sql, params)``), then ``apply``, in one round trip."""
    row = execute_prepared_batch(statements + [apply_statement(customer_id, delta, reason, in_flight=in_flight,
                                                               **ref)]).fetchone()
    return row[0] if row else None


def charge(customer_id: str, amount: int, reason: str, **ref) -> int | None:
    """Take ``amount`` credits; the new balance, or None when the balance is short."""
    with db.atomic():
        return apply(customer_id, -amount, reason, **ref)


def credit(customer_id: str, amount: int, reason: str, **ref) -> int:
    """Give ``amount`` credits (a grant or a refund); returns the new balance."""
    with db.atomic():
        balance = apply(customer_id, amount, reason, **ref)
    if balance is None:
        raise LookupError(f"no customer {customer_id}")
    return balance


def balance_of(customer_id: str) -> int:
    return Customer.select(Customer.balance).where(Customer.id == customer_id).scalar()


def ledger_sum(customer_id: str) -> int:
    from peewee import fn
    return CreditLedger.select(fn.COALESCE(fn.SUM(CreditLedger.delta), 0)).where(
        CreditLedger.customer == customer_id).scalar()


CHARGE_AND_USAGE = f"""
WITH charged AS (
    UPDATE {table(Customer)} SET balance = balance - ? WHERE id = ? AND balance >= ? RETURNING balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, request_id, note, created_at)
    SELECT ?, ?, balance, ?, ?, ?, ? FROM charged RETURNING balance_after)
SELECT (SELECT balance_after FROM ledger), {quotas.WINDOW_COLUMNS}"""


def call_note(endpoint: str | None) -> str | None:
    """The ledger note of a call to ``endpoint``: a path may carry any decoded character and
    PostgreSQL's text refuses NUL, so controls go; at most MAX_ENDPOINT_NOTE characters."""
    return "".join(c if c.isprintable() else "?" for c in endpoint[:MAX_ENDPOINT_NOTE]) if endpoint else None


def charge_call(customer_id: str, request_id: str | None, now, endpoint: str | None = None):
    """Charge one served call: ``(new balance or None when short, quotas.Usage at ``now``)``.

    ``endpoint`` (method and path) is kept as the ledger row's note, so the customer's
    ledger says what each credit paid for."""
    endpoint = call_note(endpoint)
    row = execute_prepared(CHARGE_AND_USAGE, (CALL_PRICE, customer_id, CALL_PRICE, customer_id, -CALL_PRICE, "call",
                                              request_id, endpoint, now) + quotas.window_params(customer_id, now)
                           ).fetchone()
    return row[0], quotas.usage_from(row[1:], now)
