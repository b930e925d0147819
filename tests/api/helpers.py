"""Small helpers for API tests."""
import requests

from app.accounts.models import CreditLedger
from app.billing import charges
from app.extensions import db
from app.scans.models import Scan


def balance(account) -> int:
    with db.connection_context():
        return charges.balance_of(account.id)


def ledger(account) -> list[tuple[int, str]]:
    with db.connection_context():
        return [(r.delta, r.reason) for r in
                CreditLedger.select().where(CreditLedger.customer == account.id).order_by(CreditLedger.id)]


def assert_books_balance(account) -> None:
    """D3: the ledger always sums to the balance, and the balance is never negative; a row of
    summed reads (D24) took one call's price per read it counts, one row per mode, endpoint and
    minute; the quota counters agree with the scans themselves (in flight, both windows)."""
    with db.connection_context():
        total, current = charges.ledger_sum(account.id), charges.balance_of(account.id)
        reads = read_rows(account)
        assert_counters_match(account.id)
    assert total == current >= 0
    assert all(r.reads >= 1 and r.delta == -r.reads * charges.CALL_PRICE for r in reads)
    assert len({(r.livemode, r.note, r.minute) for r in reads}) == len(reads)


def read_rows(account) -> list[CreditLedger]:
    """The customer's ledger rows of summed reads (D24), oldest first."""
    with db.connection_context():
        return list(CreditLedger.select().where((CreditLedger.customer == account.id)
                                                & (CreditLedger.reason == charges.READS_REASON))
                    .order_by(CreditLedger.id))


def assert_counters_match(customer_id: str) -> None:
    """``Customer.in_flight`` and the per-minute windows equal what counting the scans gives."""
    from datetime import timedelta

    from app.accounts.models import Customer
    from app.billing import quotas
    from app.plumbing.models import utcnow
    now = utcnow()
    customer = Customer.get_by_id(customer_id)
    for livemode, in_flight in ((True, customer.in_flight), (False, customer.test_in_flight)):  # apart (D15)
        assert in_flight == quotas.inflight_count(customer_id, livemode)
        usage = quotas.window_usage(customer_id, now, livemode)
        created = Scan.select().where((Scan.customer == customer_id) & (Scan.livemode == livemode))
        assert usage.day == created.where(Scan.created_at > now - timedelta(days=1)).count()
        assert usage.hour == created.where(Scan.created_at > now - timedelta(hours=1)).count()


def scans_of(account) -> list:
    with db.connection_context():
        return list(Scan.select().where(Scan.customer == account.id))


def engine_mode(simulator, mode, **extra):
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": mode, **extra}, timeout=5).raise_for_status()


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def parse_ratelimit(value: str) -> dict:
    """'"hour";r=42;t=1200, "day";r=900;t=50000' -> {"hour": {"r": 42, "t": 1200}, ...}"""
    out = {}
    for item in value.split(","):
        name, *params = item.strip().split(";")
        out[name.strip('"')] = {k: int(v) for k, v in (p.split("=") for p in params)}
    return out


def status_of(scan_id) -> str:
    with db.connection_context():
        return Scan.get_by_id(scan_id).status


def complete(client, account, jobs, frozen, target, **body) -> str:
    """A scan of ``target`` created (with ``body``'s other fields) and run until completed; its id."""
    answer = client.post("/api/v1/scan", json={"target": target, **body}, headers=account.headers)
    assert answer.status_code == 202, answer.json
    scan_id = answer.json["scan_id"]
    assert jobs.run(frozen, until=lambda: status_of(scan_id) == "completed")
    return scan_id


def rerun(client, account, scan_id, **headers):
    """``POST /scan/{scan_id}/rerun`` with the account's key (and ``headers``)."""
    return client.post(f"/api/v1/scan/{scan_id}/rerun", headers={**account.headers, **headers})
