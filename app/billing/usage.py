"""Usage figures for the portal (issue 19): activity per day and per hour, the ledger
described for a person, and the ledger of a period for a CSV export; and the account's read
(``account_view``, ``GET /api/v1/account``): the balance, limits and usage a key's customer stands at.

Aggregations run in SQL (``GROUP BY`` the day or hour of ``created_at``) over the
customer's rows of the period, which the ``(customer, created_at)`` indexes of ``scan``
and ``credit_ledger`` select; Python only fills the buckets with no row with zeros.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from app.accounts import access
from app.accounts.models import ApiKey, CreditLedger
from app.activity import entries
from app.billing import charges, quotas
from app.billing.limits import Limits, limits_for
from app.billing.statements import balances
from app.plumbing.errors import InsufficientBalance, InvalidRequest
from app.plumbing.models import utcnow
from app.plumbing.paging import Page

MAX_PER_PAGE = 100
MAX_EXPORT_DAYS = 366
EXPORT_CHUNK = 1000
# The ledger reasons of an operator's movements, a credit and a debit (the note is the reason given, if any).
OPERATOR_KINDS = ("grant", "debit")

@dataclass
class Bucket:
    start: datetime
    label: str
    scans: int
    credits: int


def activity(customer_id: str, unit: str = "day", now: datetime | None = None) -> list[Bucket]:
    """Scans created and credits spent per day over the last 30 days (today included), or
    per hour over the last 48 hours (this hour included), oldest first.

    Credits spent are the charges net of refunds: an operator's credits are not spending.
    """
    now = now or utcnow()
    if unit == "day":
        first = datetime.combine(now.date() - timedelta(days=29), time())
        starts = [first + timedelta(days=i) for i in range(30)]
        label_of = "%Y-%m-%d"
    elif unit == "hour":
        first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=47)
        starts = [first + timedelta(hours=i) for i in range(48)]
        label_of = "%Y-%m-%d %H"
    else:
        raise ValueError(f"unknown unit {unit}")
    # Live scans only: a test key's scans are free and count apart (D15).
    scans = balances.scans_by_bucket(customer_id, since=first, unit=unit, livemode=True)
    spent = balances.spent_by_bucket(customer_id, since=first, unit=unit, except_reasons=OPERATOR_KINDS)
    return [Bucket(start, start.strftime(label_of), scans.get(start.strftime(label_of), 0),
                   spent.get(start.strftime(label_of), 0)) for start in starts]


# --- the ledger, described ------------------------------------------------------------

def describe(row: CreditLedger) -> dict:
    """What a credit movement was: the API endpoint and resource it paid for, or the
    operator's reason for a credit."""
    note = row.note or ""
    entry = {"id": row.id, "created_at": row.created_at, "delta": row.delta, "balance_after": row.balance_after,
             "kind": row.reason, "scan_id": row.scan_id, "bulk_id": row.bulk_id, "request_id": row.request_id,
             "endpoint": "", "what": "", "reason": "", "reads": row.reads}
    if row.reason == charges.READS_REASON:
        # A minute's reads of one endpoint, summed (D24): dated by the latest, with the balance
        # after it (a movement between them is listed before the row: not a running balance row
        # by row, but the changes add up to the balance); each read is in the activity log.
        entry.update(what=charges.reads_words(row.reads or 0), endpoint=note)
    elif row.reason in OPERATOR_KINDS:
        entry["what"] = "Credits added by your account manager" if row.delta >= 0 else \
            "Credits taken back by your account manager"
        entry["reason"] = note
    elif row.reason == "scan":
        entry.update(what="Scan created", endpoint="POST /api/v1/scan")
    elif row.reason == "bulk":
        entry.update(what="Bulk batch created", endpoint="POST /api/v1/scan/bulk")
    elif row.reason == "refund":
        entry.update(what="Refund", reason=note)
    elif row.reason == "call":
        # A served call's note is its method and path, kept by the API when it charged.
        entry.update(what="API call", endpoint=note)
    else:
        entry.update(what=row.reason, reason=note)
    return entry


def ledger_page(customer_id: str, page: int = 1, per_page: int = 25) -> Page:
    page, per_page = max(1, page), min(MAX_PER_PAGE, max(1, per_page))
    total = balances.ledger_count(customer_id)
    rows = balances.ledger_page(customer_id, page=page, per_page=per_page)
    return Page([describe(r) for r in rows], total, page, per_page)


def check_period(start: date, end: date, today: date | None = None) -> tuple[datetime, datetime]:
    """The half-open UTC interval of the days ``start`` to ``end`` included; ``InvalidRequest``
    says why a period is refused (the portal shows it on the form)."""
    today = today or utcnow().date()
    if start > end:
        raise InvalidRequest("the first day must not be after the last day")
    if (end - start).days + 1 > MAX_EXPORT_DAYS:
        raise InvalidRequest(f"a period covers at most {MAX_EXPORT_DAYS} days")
    if start > today:
        raise InvalidRequest("the period starts in the future")
    return datetime.combine(start, time()), datetime.combine(end + timedelta(days=1), time())


def ledger_export(customer_id: str, since: datetime, until: datetime):
    """The movements of ``[since, until)``, oldest first, described; read in chunks
    (keyset on created_at, id) so a long period never sits in memory at once."""
    last = None
    while True:
        rows = balances.ledger_chunk(customer_id=customer_id, since=since, until=until, after=last,
                                           limit=EXPORT_CHUNK)
        for row in rows:
            yield describe(row)
        if len(rows) < EXPORT_CHUNK:
            return
        last = (rows[-1].created_at, rows[-1].id)


def latest_ledger(customer_id: str, limit: int) -> list[CreditLedger]:
    """The customer's latest ``limit`` ledger rows, newest first (an operator's overview)."""
    return balances.latest_ledger(customer_id, limit)


@dataclass(frozen=True)
class AccountView:
    """The answer of ``GET /api/v1/account``: its body, and the balance after its charge with the
    limits and window usage the answer's headers report, and the activity entry written with the
    charge (None: not charged)."""

    body: dict
    balance: int
    limits: Limits
    usage: quotas.Usage
    credits: int = 0  # what the call cost (the activity log's entry says it)
    recorded: entries.Recorded | None = None


def account_view(key: ApiKey, *, request_id: str | None, endpoint: str | None,
                 entry: entries.CallEntry) -> AccountView:
    """The calling key's account (D21): customer, tier, balance, limits, usage of the key's mode,
    and what the key may do. It costs one call like any other, charged here so that the
    balance shown is the one after it (``endpoint``: the ledger row's note; ``entry``: the
    call's activity entry, written with the charge, D25); a test key pays nothing and sees the
    live balance and its own windows (D15)."""
    now = utcnow()
    customer = key.customer
    credits = 0
    recorded = None
    if charges.is_billed(key.livemode):
        balance, usage = charges.charge_call(customer.id, request_id, now, endpoint, read_of=key.livemode,
                                             entry=entry.row(credits=charges.CALL_PRICE))
        if balance is None:  # the balance ran out since the key was read: not served
            raise InsufficientBalance(charges.balance_of(customer.id))
        credits = charges.CALL_PRICE
        recorded = entry.recorded()
    else:
        balance, usage = charges.balance_of(customer.id), quotas.window_usage(customer.id, now, key.livemode)
    limits = limits_for(customer)
    inflight = customer.in_flight if key.livemode else customer.test_in_flight
    body = {"ok": True, "customer_id": customer.id, "tier": customer.tier, "balance": balance,
            "limits": {"inflight": limits.inflight, "hour": limits.hour, "day": limits.day},
            "usage": {"inflight": inflight, "hour": usage.hour, "day": usage.day},
            "key": {"key_id": key.id, "livemode": key.livemode, **access.access_of(key)}}
    return AccountView(body, balance, limits, usage, credits, recorded)
