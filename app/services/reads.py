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
from dataclasses import dataclass

from app.db import columns, execute, execute_prepared, instance, is_postgres, table
from app.models import ApiKey, BulkBatch, CreditLedger, Customer, Scan, iso, utcnow
from app.models.scans import COMPLETED, FAILED, QUEUED, RUNNING
from app.rawjson import RawJSON
from app.services import billing, keyauth, quotas
from app.services.errors import Forbidden, InsufficientBalance, NotFound, ServiceError

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
    return bulk_body(batch, execute(BATCH_SCANS, (batch.id,)))


def bulk_body(batch, scans) -> dict:
    """The aggregate body of ``batch`` from its scans' rows (the columns of ``BATCH_SCANS``, in order)."""
    counts = {QUEUED: 0, RUNNING: 0, COMPLETED: 0, FAILED: 0}
    entries = []
    all_done = True
    as_time = Scan.completed_at.python_value  # raw rows: SQLite hands back text, PostgreSQL datetimes
    for (scan_id, status, target, kind, completed_at, result_json, failed_at, failure_code,
         failure_message) in scans:
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


# --- served reads: authentication, charge and read in one statement ---------------------
# A read is always charged once its key is live and its balance covers it (200, 403 and 404
# are all charged, D3), so on PostgreSQL the key look-up, the conditional charge with its
# ledger row, the quota windows the answer reports (D8) and the scan (or the batch and its
# scans) are one statement, prepared once per connection: one round trip and one commit per
# read, where authentication, read and charge took three. The rules stay those of ``keyauth``, ``billing`` and the
# reads above; SQLite runs them one after the other, as before.

@dataclass
class ServedRead:
    """A read by a live key: its body, or the refusal it answers (402, 403, 404); with the
    balance and quota usage after its charge (None when it was not charged)."""

    key: ApiKey
    body: dict | None = None
    error: ServiceError | None = None
    balance: int | None = None
    usage: quotas.Usage | None = None


_CHARGED = f"""
WITH k AS (SELECT {keyauth.KEY_COLUMNS} FROM {table(ApiKey)} AS k JOIN {table(Customer)} AS c
           ON c.id = k.customer_id WHERE k.digest = ?),
charged AS (
    UPDATE {table(Customer)} SET balance = balance - {billing.CALL_PRICE}
    WHERE id = (SELECT customer_id FROM k WHERE revoked_at IS NULL) AND balance >= {billing.CALL_PRICE}
    RETURNING id, balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, request_id, created_at)
    SELECT id, -{billing.CALL_PRICE}, balance, 'call', ?, ? FROM charged RETURNING balance_after),
w AS MATERIALIZED (
    SELECT (SELECT balance_after FROM ledger), {quotas.window_columns_for("(SELECT customer_id FROM k)")})
"""
_WINDOWS = 7  # the new balance, then the six window columns
READ_SCAN_CHARGED = _CHARGED + f"SELECT k.*, w.*, {columns(Scan, 's')} FROM k CROSS JOIN w " \
                               f"LEFT JOIN {table(Scan)} AS s ON s.id = ?"
_BATCH_WIDTH = len(BulkBatch._meta.sorted_fields)
_SCAN_ENTRY = "s.id, s.status, s.target, s.kind, s.completed_at, s.result_json, s.failed_at, s.failure_code, " \
              "s.failure_message"  # the columns of BATCH_SCANS
# The key, charge and batch on the first row, then one row per scan with only its own
# columns: the key's and windows' columns are not sent (nor decoded) a hundred times.
READ_BULK_CHARGED = _CHARGED + (
    f", b AS (SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?)\n"
    f"SELECT k.*, w.*, b.*, {', '.join(['NULL'] * 9)}, -1 AS position FROM k CROSS JOIN w LEFT JOIN b ON true\n"
    f"UNION ALL\n"
    f"SELECT {', '.join(['NULL'] * (keyauth.KEY_ROW_LENGTH + _WINDOWS + _BATCH_WIDTH))}, {_SCAN_ENTRY}, s.bulk_index "
    f"FROM b JOIN {table(Scan)} AS s ON s.bulk_id = b.id WHERE b.customer_id = (SELECT customer_id FROM k)\n"
    f"ORDER BY position")


def serve_scan_read(token: str, scan_id: str, request_id: str | None) -> ServedRead:
    """``GET /scan/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401), else the read."""
    return _serve(token, scan_id, request_id, READ_SCAN_CHARGED, _scan_body, read_scan)


def serve_bulk_read(token: str, bulk_id: str, request_id: str | None) -> ServedRead:
    """``GET /scan/bulk/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401), else the read."""
    return _serve(token, bulk_id, request_id, READ_BULK_CHARGED, _bulk_body, read_bulk)


def _serve(token, object_id, request_id, statement, body_of_rows, read) -> ServedRead:
    now = utcnow()
    token_digest = keyauth.digest_of(token)
    if not is_postgres():
        key = keyauth.authenticate(token)
        if key.customer.balance < billing.CALL_PRICE:
            return ServedRead(key, error=InsufficientBalance(key.customer.balance))
        served = ServedRead(key)
        try:
            served.body = read(key.customer_id, object_id)
        except (NotFound, Forbidden) as exc:
            served.error = exc
        served.balance, served.usage = billing.charge_call(key.customer_id, request_id, now)
        if served.balance is None:  # the balance ran out since the key was read: not served
            return ServedRead(key, error=InsufficientBalance(billing.balance_of(key.customer_id)))
        return served
    rows = execute_prepared(statement, (token_digest, request_id, now) + quotas.window_times(now)
                            + (object_id,)).fetchall()
    key = keyauth.live_key(keyauth.key_from_row(rows[0]) if rows else None, token_digest, now)
    n = keyauth.KEY_ROW_LENGTH
    balance = rows[0][n]
    if balance is None:  # nothing was charged: the balance is short (read again: the row may have just changed)
        return ServedRead(key, error=InsufficientBalance(billing.balance_of(key.customer_id)))
    served = ServedRead(key, balance=balance, usage=quotas.usage_from(rows[0][n + 1:n + _WINDOWS], now))
    try:
        served.body = body_of_rows([row[n + _WINDOWS:] for row in rows], key.customer_id, now)
    except (NotFound, Forbidden) as exc:
        served.error = exc
    return served


def _owned_row(model, values, customer_id: str, what: str):
    if values[0] is None:
        raise NotFound(f"no {what} with this id")
    row = instance(model, values)
    if row.customer_id != customer_id:
        raise Forbidden(f"this {what} belongs to another customer")
    return row


def _scan_body(rows, customer_id: str, now) -> dict:
    return scan_view(_owned_row(Scan, rows[0], customer_id, "scan"), now, raw_result=True)


def _bulk_body(rows, customer_id: str, now) -> dict:
    batch = _owned_row(BulkBatch, rows[0][:_BATCH_WIDTH], customer_id, "bulk batch")
    return bulk_body(batch, [row[_BATCH_WIDTH:-1] for row in rows[1:]])
