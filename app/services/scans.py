"""Scans: admission (limits + charge + rows in one transaction), engine submission,
reads, bulk batches and aggregate reads.

Admission follows D3, D7, D8 and D13:
1. One write transaction serialises a customer's admissions (``BEGIN IMMEDIATE`` on
   SQLite, ``SELECT ... FOR UPDATE`` of the customer row on PostgreSQL). Inside it:
   balance, in-flight, hour and day checks, the scan rows and the charge with its
   ledger row. The scans exist, ``queued``, before the engine is called, so the
   in-flight limit holds while that call is pending.
2. The engine call, outside the transaction (no lock is held across the network).
3. On engine failure the reservation is reversed: the scans are deleted and a refund
   ledger row cancels the charge (502, no scan, no net charge). On success the
   engine's ids are stored and the tracking jobs dispatched; a failed dispatch is
   left to the recovery sweep.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from datetime import timedelta

from app.db import columns, execute, insert_rows, instance, is_postgres, table, write_transaction
from app.errors import ApiError
from app.extensions import db
from app.models import BulkBatch, CreditLedger, Customer, QuotaMinute, Scan, iso, new_id, utcnow
from app.models.scans import COMPLETED, FAILED, QUEUED, RUNNING
from app.rawjson import RawJSON
from app.services import billing, engine, quotas
from app.services.limits import BULK_TIERS, MAX_BULK_TARGETS, limits_for
from app.services.targets import TargetError, normalize
from workers.queues import tracking_job_id

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """A served answer: its body plus what the response headers report."""

    body: dict
    balance: int
    headers: dict = field(default_factory=dict)


def insufficient_balance(balance: int, needed: int = 1) -> ApiError:
    if needed <= 1:
        message = "the account balance is below 1 credit"
    else:
        message = f"the account balance ({balance}) is below the {needed} credits this bulk call needs"
    return ApiError(402, "insufficient_balance", message)


CUSTOMER_BY_ID = f"SELECT {columns(Customer)} FROM {table(Customer)} WHERE id = ?"


def _lock_customer(customer_id: str) -> Customer:
    sql = CUSTOMER_BY_ID + (" FOR UPDATE" if is_postgres() else "")
    row = execute(sql, (customer_id,)).fetchone()
    if row is None:
        raise Customer.DoesNotExist(f"no customer {customer_id}")
    return instance(Customer, row)


def _admit(customer_id, api_key_id, items, *, request_id, bulk_total=None):
    """Step 1: check and reserve in one transaction. Returns (scans, batch, balance, limits, usage)."""
    now = utcnow()
    n = len(items)
    cost = max(n, 1)
    with write_transaction():
        customer = _lock_customer(customer_id)
        if customer.balance < cost:
            raise insufficient_balance(customer.balance, cost if bulk_total is not None else 1)
        limits = limits_for(customer)
        if n:
            usage = quotas.check(customer, limits, n, now, bulk=bulk_total is not None)
        else:
            usage = quotas.window_usage(customer_id, now)
        batch = None
        if bulk_total is not None:
            batch = BulkBatch(id=new_id("blk"), customer=customer_id, api_key=api_key_id, total=bulk_total,
                              created_at=now)
            insert_rows(BulkBatch, [{"id": batch.id, "customer": customer_id, "api_key": api_key_id,
                                     "total": bulk_total, "created_at": now}])
        rows = []
        for index, (kind, target) in items:
            scan_id = new_id("scn")
            rows.append({
                "id": scan_id, "customer": customer_id, "api_key": api_key_id, "bulk": batch.id if batch else None,
                "bulk_index": index if batch else None, "kind": kind, "target": target, "status": QUEUED,
                "created_at": now, "tracking_job_id": tracking_job_id(scan_id, 0),
            })
        insert_rows(Scan, rows)
        balance = billing._apply(customer_id, -cost, "bulk" if batch else "scan", in_flight=n, request_id=request_id,
                                 scan_id=rows[0]["id"] if rows and not batch else None,
                                 bulk_id=batch.id if batch else None)
        if balance is None:  # cannot happen under the lock; never let it pass silently
            raise insufficient_balance(customer.balance, cost)
        quotas.count_created(customer_id, now, n)
    # Counted under the lock, plus the scans this call created: ``r`` counts them (D8).
    return rows, batch, balance, limits, quotas.with_new_scans(usage, n, now)


def _reverse(customer_id, rows, batch, cost, request_id) -> None:
    """Undo a reservation whose engine submission failed: no scan, no net charge (D13)."""
    with db.atomic():
        if rows:
            Scan.delete().where(Scan.id.in_([r["id"] for r in rows])).execute()
        if batch:
            BulkBatch.delete().where(BulkBatch.id == batch.id).execute()
        billing._apply(customer_id, cost, "refund", in_flight=-len(rows), request_id=request_id,
                       bulk_id=batch.id if batch else None,
                       scan_id=rows[0]["id"] if rows and not batch else None,
                       note="engine submission failed")
        if rows:  # after the customer's row, as admissions lock them (quotas: lock order)
            quotas.count_created(customer_id, rows[0]["created_at"], -len(rows))


def _engine_failed() -> ApiError:
    return ApiError(502, "engine_submit_failed", "the investigation engine cannot be reached; retry in 30 seconds",
                    headers={"Retry-After": 30})


def _record_submissions(rows, answers) -> None:
    """Store the engine's ids and etas for all scans in one UPDATE, whatever their number."""
    now = utcnow()
    etas = [now + timedelta(seconds=a["eta_seconds"]) for a in answers]
    if len(rows) == 1:
        execute(f"UPDATE {table(Scan)} SET engine_id = ?, recipes_total = ?, eta_at = ? WHERE id = ?",
                (answers[0]["id"], answers[0]["recipes"], etas[0], rows[0]["id"]))
        return
    ids = [r["id"] for r in rows]
    if is_postgres():  # a join with the new values: linear in the batch, where CASE is quadratic
        values = ", ".join(["(?, ?, ?, ?)"] * len(ids))
        execute(f"UPDATE {table(Scan)} AS s SET engine_id = v.engine_id, recipes_total = v.recipes, eta_at = v.eta "
                f"FROM (VALUES {values}) AS v(id, engine_id, recipes, eta) WHERE s.id = v.id",
                [v for i, a, eta in zip(ids, answers, etas) for v in (i, a["id"], a["recipes"], eta)])
        return
    cases = " ".join(["WHEN ? THEN ?"] * len(ids))
    params = [v for pair in zip(ids, (a["id"] for a in answers)) for v in pair]
    params += [v for pair in zip(ids, (a["recipes"] for a in answers)) for v in pair]
    params += [v for pair in zip(ids, etas) for v in pair]
    execute(f"UPDATE {table(Scan)} SET engine_id = CASE id {cases} END, recipes_total = CASE id {cases} END, "
            f"eta_at = CASE id {cases} END WHERE id IN ({', '.join('?' * len(ids))})", params + ids)


def _dispatch(rows, answers) -> None:
    """Each scan's first look: half a second before its eta, at most ENGINE_POLL_SECONDS away."""
    from workers.queues import enqueue_tracking
    from app import runtime
    from app.services.tracking import first_look_delay
    poll = runtime.config["ENGINE_POLL_SECONDS"]
    enqueue_tracking({r["id"]: r["tracking_job_id"] for r in rows},
                     delay_seconds={r["id"]: first_look_delay(a["eta_seconds"], poll) for r, a in zip(rows, answers)})


def _submit(customer_id, rows, batch, cost, request_id) -> list[dict]:
    items = [{"target": r["target"], "kind": r["kind"], "reference": r["id"]} for r in rows]
    try:
        if batch is None:
            answers = [engine.submit(**items[0])]
        else:
            answers = engine.submit_batch(items)
    except engine.EngineError:
        _reverse(customer_id, rows, batch, cost, request_id)
        raise _engine_failed() from None
    _record_submissions(rows, answers)
    _dispatch(rows, answers)
    return answers


def poll_url(base_url: str, scan_id: str) -> str:
    return f"{base_url}/api/v1/scan/{scan_id}"


def _count_created(rows, customer, batch=None) -> None:
    """Metrics and the log: a line per single scan, one line per bulk batch (its scans are
    the batch's rows; a hundred lines per call cost more than the call's SQL)."""
    from collections import Counter

    from app.metrics import SCANS_CREATED
    kinds = Counter(row["kind"] for row in rows)
    for kind, count in kinds.items():
        SCANS_CREATED.labels(kind=kind, tier=customer.tier).inc(count)
    if batch is None:
        log.info("scan created (%s)", rows[0]["kind"], extra={"scan_id": rows[0]["id"]})
    else:
        log.info("bulk %s created: %d scans (%s)", batch.id, len(rows),
                 ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())))


def create_scan(customer, api_key_id, target, kind, *, base_url, request_id) -> Outcome:
    try:
        kind, target = normalize(target, kind)
    except TargetError as exc:
        raise ApiError(400, exc.code, exc.message) from None
    rows, _, balance, limits, usage = _admit(customer.id, api_key_id, [(0, (kind, target))], request_id=request_id)
    answer = _submit(customer.id, rows, None, 1, request_id)[0]
    _count_created(rows, customer)
    scan_id = rows[0]["id"]
    body = {"ok": True, "scan_id": scan_id, "kind": kind, "recipes_to_run": answer["recipes"],
            "eta_seconds": answer["eta_seconds"], "poll_url": poll_url(base_url, scan_id)}
    return Outcome(body, balance, quotas.limit_headers(limits, usage))


def _bulk_item(index, item):
    """One bulk target -> ``(kind, target)`` or a rejected entry (D7)."""
    if not isinstance(item, dict):
        return None, {"index": index, "target": None, "kind": None, "error": "invalid_request",
                      "message": "each target must be an object {target, kind}"}
    raw_target, raw_kind = item.get("target"), item.get("kind")
    shown_target = raw_target if isinstance(raw_target, str) else None
    shown_kind = raw_kind if isinstance(raw_kind, str) else None
    if not isinstance(raw_target, str) or (raw_kind is not None and not isinstance(raw_kind, str)):
        return None, {"index": index, "target": shown_target, "kind": shown_kind, "error": "invalid_request",
                      "message": "target must be a string and kind, when given, a string"}
    try:
        return normalize(raw_target, raw_kind), None
    except TargetError as exc:
        return None, {"index": index, "target": raw_target, "kind": exc.kind or shown_kind,
                      "error": exc.code, "message": exc.message}


def create_bulk(customer, api_key_id, targets, *, base_url, request_id) -> Outcome:
    if not targets:
        raise ApiError(400, "no_targets", "targets must hold at least one target")
    if len(targets) > MAX_BULK_TARGETS:
        raise ApiError(400, "too_many_targets", f"a bulk call takes at most {MAX_BULK_TARGETS} targets")
    if customer.tier not in BULK_TIERS:
        raise ApiError(403, "bulk_not_allowed", "bulk calls are available on the Business and Enterprise tiers")
    accepted, rejected = [], []
    for index, item in enumerate(targets):
        ok, bad = _bulk_item(index, item)
        if bad:
            rejected.append(bad)
        else:
            accepted.append((index, ok))
    rows, batch, balance, limits, usage = _admit(customer.id, api_key_id, accepted, request_id=request_id,
                                                 bulk_total=len(targets))
    cost = max(len(rows), 1)
    if rows:
        _submit(customer.id, rows, batch, cost, request_id)
        _count_created(rows, customer, batch)
    body = {
        "ok": True, "bulk_id": batch.id, "total": len(targets), "queued": len(rows), "rejected": rejected,
        "scans": [{"scan_id": r["id"], "target": r["target"], "kind": r["kind"],
                   "poll_url": poll_url(base_url, r["id"])} for r in rows],
        "aggregate_poll_url": f"{base_url}/api/v1/scan/bulk/{batch.id}",
    }
    return Outcome(body, balance, quotas.limit_headers(limits, usage))


# --- reads -------------------------------------------------------------------------
# Every read runs these, so their statements are written once (``app.db.execute``), and
# a completed scan's stored result goes into the body as its JSON text (``RawJSON``).
# The bodies have exactly the fields, types and order of ScanSchema / BulkStateSchema,
# which dump them unchanged (tests/unit/test_response_bodies.py holds them to it).

SCAN_BY_ID = f"SELECT {columns(Scan)} FROM {table(Scan)} WHERE id = ?"
BATCH_BY_ID = f"SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?"
BATCH_SCANS = (f"SELECT id, status, target, kind, completed_at, result_json, failed_at, failure_code, "
               f"failure_message FROM {table(Scan)} WHERE bulk_id = ? ORDER BY bulk_index")


def _owned(model, object_id: str, customer_id: str, what: str):
    row = execute(SCAN_BY_ID if model is Scan else BATCH_BY_ID, (object_id,)).fetchone()
    if row is None:
        raise ApiError(404, "not_found", f"no {what} with this id")
    row = instance(model, row)
    if row.customer_id != customer_id:
        raise ApiError(403, "forbidden", f"this {what} belongs to another customer")
    return row


def remaining_eta(scan, now) -> int:
    if scan.eta_at is None:
        return 0
    return max(0, math.ceil((scan.eta_at - now).total_seconds()))


def _failure(scan) -> dict:
    return {"code": scan.failure_code, "message": scan.failure_message or ""}


def scan_view(scan, now, *, raw_result: bool = False) -> dict:
    """The read body of D5 for one scan in any state (``raw_result``: the result as RawJSON)."""
    body = {"ok": True, "scan_id": scan.id, "status": scan.status, "target": scan.target, "kind": scan.kind,
            "created_at": iso(scan.created_at)}
    if scan.bulk_id:
        body["bulk_id"] = scan.bulk_id
    if scan.status == COMPLETED:
        body["completed_at"] = iso(scan.completed_at)
        body["result"] = RawJSON(scan.result_json) if raw_result else json.loads(scan.result_json)
    elif scan.status == FAILED:
        body["failed_at"] = iso(scan.failed_at)
        body["failure"] = _failure(scan)
    else:
        body["eta_seconds"] = remaining_eta(scan, now)
        body["progress"] = {"recipes_total": scan.recipes_total, "recipes_done": scan.recipes_done}
    return body


def read_scan(customer_id: str, scan_id: str) -> dict:
    """The body of ``GET /scan/{id}``; a completed scan's result is ``RawJSON``."""
    return scan_view(_owned(Scan, scan_id, customer_id, "scan"), utcnow(), raw_result=True)


def read_bulk(customer_id: str, bulk_id: str) -> dict:
    """The body of ``GET /scan/bulk/{id}``; completed scans' results are ``RawJSON``.

    ``rejected_count`` (amended D7) is the targets refused at creation: the batch stores
    the number submitted (``total``) and has a scan for every target it queued, so it is
    their difference, and ``total`` = queued + running + completed + failed + rejected_count.
    """
    batch = _owned(BulkBatch, bulk_id, customer_id, "bulk batch")
    counts = {QUEUED: 0, RUNNING: 0, COMPLETED: 0, FAILED: 0}
    entries = []
    all_done = True
    as_time = Scan.completed_at.python_value  # raw rows: SQLite hands back text, PostgreSQL datetimes
    for (scan_id, status, target, kind, completed_at, result_json, failed_at, failure_code,
         failure_message) in execute(BATCH_SCANS, (batch.id,)):
        counts[status] += 1
        entry = {"scan_id": scan_id, "status": status, "target": target, "kind": kind}
        if status == COMPLETED:
            entry["completed_at"] = iso(as_time(completed_at))
            entry["result"] = RawJSON(result_json)
        elif status == FAILED:
            entry["failed_at"] = iso(as_time(failed_at))
            entry["failure"] = {"code": failure_code, "message": failure_message or ""}
        else:
            all_done = False
        entries.append(entry)
    return {"ok": True, "bulk_id": batch.id, "total": batch.total, **counts,
            "rejected_count": max(0, batch.total - len(entries)), "all_done": all_done, "scans": entries}


def recount(customer_id: str) -> dict:
    """Rebuild the customer's quota counters from its scans (``flask customers recount``).

    The counters move with every scan in the code, so this only matters after scans were
    changed by hand in the database. Under the admission's lock: an admission waits, and a
    scan finishing meanwhile is counted in flight here and taken out after (its UPDATE of
    the customer waits for this transaction), so the counters stay right.
    """
    now = utcnow()
    with write_transaction():
        customer = _lock_customer(customer_id)
        counted, minutes = quotas.counted_from_scans(now, customer_id)
        in_flight = counted[customer_id]
        execute(f"UPDATE {table(Customer)} SET in_flight = ? WHERE id = ?", (in_flight, customer_id))
        QuotaMinute.delete().where(QuotaMinute.customer == customer_id).execute()
        for (_, minute), count in minutes.items():
            quotas.count_created(customer_id, minute, count)
    return {"customer_id": customer_id, "in_flight": {"was": customer.in_flight, "now": in_flight},
            "day": sum(minutes.values())}


def ledger_rows(customer_id: str, limit: int = 50):
    return list(CreditLedger.select().where(CreditLedger.customer == customer_id)
                .order_by(CreditLedger.id.desc()).limit(limit))


def reverse_reservation(scan) -> bool:
    """Undo one scan reserved but never submitted (its creator died mid-call): delete, refund 1."""
    with db.atomic():
        deleted = Scan.delete().where((Scan.id == scan.id) & Scan.engine_id.is_null()
                                      & (Scan.status == QUEUED)).execute()
        if not deleted:
            return False
        billing._apply(scan.customer_id, 1, "refund", in_flight=-1, scan_id=scan.id, bulk_id=scan.bulk_id,
                       note="reservation never submitted to the engine")
        quotas.count_created(scan.customer_id, scan.created_at, -1)  # after the customer's row
        if scan.bulk_id and not Scan.select().where(Scan.bulk == scan.bulk_id).exists():
            BulkBatch.delete().where(BulkBatch.id == scan.bulk_id).execute()
    return True
