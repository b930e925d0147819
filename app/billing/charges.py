"""Credits: every change is one conditional UPDATE plus a ledger row (D3).

The balance is never read, changed and written back: the update takes ``n`` only where
the balance is at least ``n`` and returns the new one (``app.billing.statements.balances.APPLY``),
so it either succeeds whole or touches no row, and concurrent calls can neither overdraw
nor lose a credit. Callers run these inside their own transaction when the charge must
commit together with other rows (a scan and its charge, D3/D13). The statements are the
store's; the price, the reasons and which modes are billed are decided here.

``charge_call`` is the charge of every served call: on PostgreSQL the conditional
UPDATE, its ledger row and the quota windows the answer reports (D8) are one
statement, so a read pays one round trip and one commit for all three. A read's charge
does not add a row: it grows its minute's row of summed reads (D24, ``READS_REASON``), in
the same statement as the UPDATE, so the ledger still sums to the balance.
"""
from __future__ import annotations

from app.billing import quotas
from app.billing.statements import balances
from app.plumbing.db import transaction
from app.plumbing.errors import InsufficientBalance
from app.plumbing.models import utcnow

# What a call costs (D3). A served call costs CALL_PRICE when its answer is one of these
# statuses (2xx: 200, 201, 202; 400, 403, 404; no 401, 402, 409, 429 or 5xx); a creation costs what
# ``admission_cost`` says, charged with the scans. Prices live here and nowhere else: the
# words customers read (OpenAPI, the portal) are rendered from them (``PRICE_WORDS``).
CALL_PRICE = 1
SCAN_PRICE = 1  # each scan a creation queues
CHARGED_STATUSES = frozenset({200, 201, 202, 400, 403, 404})


def is_billed(livemode: bool) -> bool:
    """Whether a key's calls and scans are paid for: live ones are, test ones never (D15:
    no charge, no credit needed, no ledger row). The one place that decides it."""
    return bool(livemode)


def billed_modes() -> list[bool]:
    """The key modes (``livemode`` values) whose calls are paid for, as ``is_billed`` decides:
    for a statement that finds the key itself and charges it only if its mode is billed."""
    return [mode for mode in (True, False) if is_billed(mode)]


def call_is_charged(status: int, livemode: bool = True) -> bool:
    return is_billed(livemode) and status in CHARGED_STATUSES


# Refusals that cost nothing although their status is charged: a data subject's opt-out (D20)
# must not cost the customer who ran into it.
FREE_REFUSALS = frozenset({"target_suppressed"})


def refusal_is_charged(code: str | None) -> bool:
    return code not in FREE_REFUSALS


def admission_cost(queued: int, *, bulk: bool = False, livemode: bool = True) -> int:
    """The credits a creation of ``queued`` scans costs: a scan's price each, and a bulk call
    that queued none one call's price; nothing in test mode."""
    if not is_billed(livemode):
        return 0
    return max(queued * SCAN_PRICE, CALL_PRICE) if bulk else queued * SCAN_PRICE


def unsubmitted_scan_refund(*, bulk: bool, livemode: bool) -> int:
    """What one scan reserved but never submitted to the engine gives back: what it added to
    its creation's cost (``bulk``: it was one of a bulk call's)."""
    return SCAN_PRICE if is_billed(livemode) else 0


def creation_refund(livemode: bool) -> int:
    """What a completed scan that did not meet its ``required`` rule gives back (D29): the price
    its creation paid for it; nothing when it paid nothing (test mode)."""
    return SCAN_PRICE if is_billed(livemode) else 0


def credits(n: int) -> str:
    return f"{n} credit" if n == 1 else f"{n} credits"


# The prices as customers read them, from the prices above.
PRICE_WORDS = {
    "call": credits(CALL_PRICE),
    "scan": credits(SCAN_PRICE),
    "bulk": f"{credits(SCAN_PRICE)} per queued scan, {credits(CALL_PRICE)} if none",
    # The 403s that cost nothing: the key's own refusals (hooks, D21) and the opt-out (FREE_REFUSALS).
    "free_403": "a 403 `insufficient_scope`, `ip_not_allowed` or `target_suppressed`",
}


def check_can_pay(balance: int, livemode: bool = True) -> None:
    """Refuse a call from a balance below one call's price (before any validation, D3);
    a test key needs no credit."""
    if is_billed(livemode) and balance < CALL_PRICE:
        raise InsufficientBalance(balance)


MAX_ENDPOINT_NOTE = 300
LEDGER_REFS = {"scan_id", "bulk_id", "request_id", "note"}
# The ledger reason of a served call's charge.
CALL_REASON = "call"
# The ledger reason of a row of summed reads (D24): the charges of one customer's reads of one
# mode and endpoint in one minute are one row, its ``reads`` their count, its delta their sum.
# Reads are the calls that look and change nothing (GET); every other call (a refused creation,
# an erasure, a redelivery, feedback) keeps a row of its own, with its path and request id.
READS_REASON = "reads"
READ_METHODS = frozenset({"GET"})


def is_read(method: str) -> bool:
    """Whether a call by ``method`` is a read, whose charge is summed into its minute's row (D24)."""
    return method in READ_METHODS


def reads_words(n: int) -> str:
    """A row of summed reads as customers read it: "1 read", "12 reads"."""
    return f"{n} read" if n == 1 else f"{n} reads"


def apply_statement(customer_id: str, delta: int, reason: str, *, in_flight: int = 0, **ref) -> tuple[str, tuple]:
    """The SQL and parameters of ``apply`` (one row, the new balance, or none), to run with others."""
    unknown = set(ref) - LEDGER_REFS
    if unknown:
        raise TypeError(f"unknown ledger fields: {', '.join(sorted(unknown))}")
    return balances.apply_statement(customer_id=customer_id, delta=delta, reason=reason, in_flight=in_flight,
                                          scan_id=ref.get("scan_id"), bulk_id=ref.get("bulk_id"),
                                          request_id=ref.get("request_id"), note=ref.get("note"), now=utcnow())


def apply(customer_id: str, delta: int, reason: str, *, in_flight: int = 0, **ref) -> int | None:
    """Change the balance by ``delta`` with its ledger row; ``in_flight`` moves the scans in
    flight in the same UPDATE (admissions and their reversals change both at once).

    Runs in the caller's transaction (``charge`` and ``credit`` open their own); returns
    the new balance, or None when a debit would overdraw it (nothing is written then)."""
    # The conditional UPDATE and its ledger row in one statement (one round trip).
    return balances.apply(apply_statement(customer_id, delta, reason, in_flight=in_flight, **ref))


def apply_after(statements: list, customer_id: str, delta: int, reason: str, *, in_flight: int = 0,
                **ref) -> int | None:
    """Run ``statements`` (``(sql, params)``), then ``apply``, in one round trip."""
    return balances.apply_after(statements, apply_statement(customer_id, delta, reason, in_flight=in_flight,
                                                                  **ref))


def move_reservation(customer_id: str, livemode: bool, delta: int, reason: str, *, in_flight: int, **ref) -> None:
    """Give back (or take) a scan reservation: ``delta`` credits with their ledger row and the scans
    in flight moved by ``in_flight``, in the caller's transaction; a mode that is not billed (test
    keys, D15) moves only its own count in flight. The one place that says so for every reversal."""
    if is_billed(livemode):
        apply(customer_id, delta, reason, in_flight=in_flight, **ref)
    else:
        quotas.move_in_flight(customer_id, livemode, in_flight)


def charge(customer_id: str, amount: int, reason: str, **ref) -> int | None:
    """Take ``amount`` credits; the new balance, or None when the balance is short."""
    with transaction():
        return apply(customer_id, -amount, reason, **ref)


def credit(customer_id: str, amount: int, reason: str, **ref) -> int:
    """Give ``amount`` credits (a grant or a refund); returns the new balance."""
    with transaction():
        balance = apply(customer_id, amount, reason, **ref)
    if balance is None:
        raise LookupError(f"no customer {customer_id}")
    return balance


def balance_of(customer_id: str) -> int:
    return balances.balance_of(customer_id)


def ledger_sum(customer_id: str) -> int:
    return balances.ledger_sum(customer_id)


def call_note(endpoint: str | None) -> str | None:
    """The ledger note of a call to ``endpoint``: a path may carry any decoded character and
    PostgreSQL's text refuses NUL, so controls go; at most MAX_ENDPOINT_NOTE characters."""
    return "".join(c if c.isprintable() else "?" for c in endpoint[:MAX_ENDPOINT_NOTE]) if endpoint else None


def charge_call(customer_id: str, request_id: str | None, now, endpoint: str | None = None, *,
                entry: dict, read_of: bool | None = None):
    """Charge one served call: ``(new balance or None when short, quotas.Usage at ``now``)``.

    ``endpoint`` (method and path) is kept as the ledger row's note, so the customer's
    ledger says what each credit paid for. ``entry``: the call's activity entry (a row,
    ``entries.CallEntry.row``), written by the same statement when it charges (D25: a charge
    never commits without its entry). ``read_of``: the mode of the key when the call is a
    read (``is_read``; ``endpoint`` then its route, e.g. ``GET /api/v1/scan/{scan_id}``): its
    charge is added to the minute's row of summed reads (D24) rather than a row of its own."""
    balance, windows = balances.charge_with_windows(
        customer_id=customer_id, price=CALL_PRICE, reason=CALL_REASON if read_of is None else READS_REASON,
        request_id=request_id, note=call_note(endpoint), now=now, starts=quotas.window_starts(now),
        entry=entry, read_of=read_of)
    return balance, quotas.usage_from(windows, now)
