"""Scan reads: the bodies of ``GET /scan/{id}`` and ``GET /scan/bulk/{id}`` (decisions D5),
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
BATCH_SCANS = (f"SELECT id, status, target, kind, result_json, failure_code, failure_message FROM {table(Scan)} "
               f"WHERE bulk_id = ? ORDER BY bulk_index")


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


def final_fields(status: str, result_json: str | None, failure_code: str | None, failure_message: str | None,
                 *, raw_result: bool = False) -> dict | None:
    """``{"result"}`` of a completed scan or ``{"failure"}`` of a failed one; None in flight."""
    if status == COMPLETED:
        return {"result": RawJSON(result_json) if raw_result else json.loads(result_json)}
    if status == FAILED:
        return {"failure": {"code": failure_code, "message": failure_message or ""}}
    return None


def final_state(scan, *, raw_result: bool = False) -> dict | None:
    """A final scan's ``completed_at`` and ``result``, or ``failed_at`` and ``failure``; None in flight."""
    fields = final_fields(scan.status, scan.result_json, scan.failure_code, scan.failure_message,
                          raw_result=raw_result)
    if fields is None:
        return None
    moment = ({"completed_at": iso(scan.completed_at)} if scan.status == COMPLETED
              else {"failed_at": iso(scan.failed_at)})
    return {**moment, **fields}


def scan_view(scan, now, *, raw_result: bool = False) -> dict:
    """The read body of decisions D5 for one scan in any state (``raw_result``: the result as RawJSON)."""
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
    """The body of ``GET /scan/bulk/{id}``; completed scans' results are ``RawJSON``."""
    batch = _owned(BulkBatch, bulk_id, customer_id, "bulk batch")
    counts = {QUEUED: 0, RUNNING: 0, COMPLETED: 0, FAILED: 0}
    entries = []
    all_done = True
    for scan_id, status, target, kind, result_json, failure_code, failure_message in execute(BATCH_SCANS,
                                                                                            (batch.id,)):
        counts[status] += 1
        entry = {"scan_id": scan_id, "status": status, "target": target, "kind": kind}
        final = final_fields(status, result_json, failure_code, failure_message, raw_result=True)
        if final is None:
            all_done = False
        else:
            entry.update(final)
        entries.append(entry)
    return {"ok": True, "bulk_id": batch.id, "total": batch.total, **counts, "all_done": all_done,
            "scans": entries}
