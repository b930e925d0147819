"""Scan reads: the bodies of ``GET /scan/{id}`` and ``GET /scan/bulk/{id}`` (D5),
and the fields a scan's final state adds to any body (reads, bulk entries, webhook events).

Every read runs these, so their statements are written once (``app.db.execute``), and
a completed scan's stored result goes into the body as its JSON text (``RawJSON``).
The bodies have exactly the fields, types and order of ScanSchema / BulkStateSchema,
which dump them unchanged (tests/unit/test_response_bodies.py holds them to it).
"""
from __future__ import annotations

import json
import math

from app.db import columns, execute, instance, table
from app.models import BulkBatch, Scan, iso, utcnow
from app.models.scans import COMPLETED, FAILED, QUEUED, RUNNING
from app.rawjson import RawJSON
from app.services.errors import Forbidden, NotFound

SCAN_BY_ID = f"SELECT {columns(Scan)} FROM {table(Scan)} WHERE id = ?"
BATCH_BY_ID = f"SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?"
BATCH_SCANS = (f"SELECT id, status, target, kind, completed_at, result_json, failed_at, failure_code, "
               f"failure_message FROM {table(Scan)} WHERE bulk_id = ? ORDER BY bulk_index")


def _owned(model, object_id: str, customer_id: str, what: str):
    row = execute(SCAN_BY_ID if model is Scan else BATCH_BY_ID, (object_id,)).fetchone()
    if row is None:
        raise NotFound(f"no {what} with this id")
    row = instance(model, row)
    if row.customer_id != customer_id:
        raise Forbidden(f"this {what} belongs to another customer")
    return row


def remaining_eta(scan, now) -> int:
    if scan.eta_at is None:
        return 0
    return max(0, math.ceil((scan.eta_at - now).total_seconds()))


def final_fields(status: str, completed_at, result_json: str | None, failed_at, failure_code: str | None,
                 failure_message: str | None, *, raw_result: bool = False) -> dict | None:
    """``completed_at`` and ``result`` of a completed scan, or ``failed_at`` and ``failure`` of a
    failed one, in that order; None for a scan in flight."""
    if status == COMPLETED:
        return {"completed_at": iso(completed_at),
                "result": RawJSON(result_json) if raw_result else json.loads(result_json)}
    if status == FAILED:
        return {"failed_at": iso(failed_at), "failure": {"code": failure_code, "message": failure_message or ""}}
    return None


def final_state(scan, *, raw_result: bool = False) -> dict | None:
    """``final_fields`` of a scan row."""
    return final_fields(scan.status, scan.completed_at, scan.result_json, scan.failed_at, scan.failure_code,
                        scan.failure_message, raw_result=raw_result)


def scan_view(scan, now, *, raw_result: bool = False) -> dict:
    """The read body of D5 for one scan in any state (``raw_result``: the result as RawJSON)."""
    body = {"ok": True, "scan_id": scan.id, "status": scan.status, "target": scan.target, "kind": scan.kind,
            "created_at": iso(scan.created_at)}
    if scan.bulk_id:
        body["bulk_id"] = scan.bulk_id
    final = final_state(scan, raw_result=raw_result)
    if final is not None:
        body.update(final)
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
        final = final_fields(status, as_time(completed_at), result_json, as_time(failed_at), failure_code,
                             failure_message, raw_result=True)
        if final is None:
            all_done = False
        else:
            entry.update(final)
        entries.append(entry)
    return {"ok": True, "bulk_id": batch.id, "total": batch.total, **counts,
            "rejected_count": max(0, batch.total - len(entries)), "all_done": all_done, "scans": entries}
