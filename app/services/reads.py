"""Scan reads: the bodies of ``GET /scan/{id}`` and ``GET /scan/bulk/{id}`` (D5), the
scans list ``GET /scans`` (D17), and the fields a scan's final state adds to any body
(reads, bulk entries, list entries, webhook events).

Every read runs these, so their statements are written once (``app.db.execute``), and
a completed scan's stored result goes into the body as its JSON text (``RawJSON``).
The bodies have exactly the fields, types and order of ScanSchema / BulkStateSchema,
which dump them unchanged (tests/unit/test_response_bodies.py holds them to it).

The portal's scan pages (issue 19) read here too (``portal_scans``, ``scan_detail``,
``batch_detail``): their rows carry datetimes for the templates, and an object of
another customer is ``NotFound`` like an unknown one (the portal's 404), so ids cannot
be probed.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from app.db import columns, execute, execute_prepared, instance, table
from app.models import ApiKey, BulkBatch, CreditLedger, Customer, Scan, iso, utcnow
from app.models.scans import COMPLETED, FAILED, QUEUED, RUNNING
from app.rawjson import RawJSON
from app.services import billing, keyauth, quotas
from app.services.errors import Forbidden, InsufficientBalance, InvalidRequest, NotFound, ServiceError
from app.services.paging import Page

SCAN_BY_ID = f"SELECT {columns(Scan)} FROM {table(Scan)} WHERE id = ?"
BATCH_BY_ID = f"SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?"
BATCH_SCANS = (f"SELECT id, status, target, kind, completed_at, result_json, failed_at, failure_code, "
               f"failure_message FROM {table(Scan)} WHERE bulk_id = ? ORDER BY bulk_index")
LIST_COLUMNS = ("id, status, target, kind, bulk_id, created_at, completed_at, result_json, failed_at, failure_code, "
                "failure_message")
LIST_CURSOR = f"SELECT created_at FROM {table(Scan)} WHERE id = ? AND customer_id = ? AND livemode = ?"
LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT = 20, 100


def _owned(model, object_id: str, customer_id: str, what: str, livemode: bool):
    row = execute(SCAN_BY_ID if model is Scan else BATCH_BY_ID, (object_id,)).fetchone()
    if row is None:
        raise NotFound(f"no {what} with this id")
    row = instance(model, row)
    if row.livemode != livemode:  # test and live data never mix (D15): as if it did not exist
        raise NotFound(f"no {what} with this id")
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
        text = result_json or "null"  # a completed scan always has one; erased ones will not
        return {"completed_at": iso(completed_at), "result": RawJSON(text) if raw_result else json.loads(text)}
    if status == FAILED:
        return {"failed_at": iso(failed_at), "failure": {"code": failure_code, "message": failure_message or ""}}
    return None


def final_state(scan, *, raw_result: bool = False) -> dict | None:
    """``final_fields`` of a scan row."""
    return final_fields(scan.status, scan.completed_at, scan.result_json, scan.failed_at, scan.failure_code,
                        scan.failure_message, raw_result=raw_result)


def scan_view(scan, now, *, raw_result: bool = False) -> dict:
    """The read body of D5 for one scan in any state (``raw_result``: the result as RawJSON)."""
    body = {"ok": True, "scan_id": scan.id, "livemode": scan.livemode, "status": scan.status, "target": scan.target,
            "kind": scan.kind,
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


def read_scan(customer_id: str, scan_id: str, livemode: bool = True) -> dict:
    """The body of ``GET /scan/{id}``; a completed scan's result is ``RawJSON``. A scan of the
    other mode than the calling key's is not found (D15)."""
    return scan_view(_owned(Scan, scan_id, customer_id, "scan", livemode), utcnow(), raw_result=True)


def read_bulk(customer_id: str, bulk_id: str, livemode: bool = True) -> dict:
    """The body of ``GET /scan/bulk/{id}``; completed scans' results are ``RawJSON``.

    ``rejected_count`` (amended D7) is the targets refused at creation: the batch stores
    the number submitted (``total``) and has a scan for every target it queued, so it is
    their difference, and ``total`` = queued + running + completed + failed + rejected_count.
    """
    batch = _owned(BulkBatch, bulk_id, customer_id, "bulk batch", livemode)
    return bulk_body(batch, execute(BATCH_SCANS, (batch.id,)))


def bulk_body(batch, scans) -> dict:
    """The aggregate body of ``batch`` from its scans' rows (the columns of ``BATCH_SCANS``, in order)."""
    counts = {QUEUED: 0, RUNNING: 0, COMPLETED: 0, FAILED: 0}
    entries = []
    all_done = True
    as_time = Scan.completed_at.python_value  # raw rows, as the model would read them
    for (scan_id, status, target, kind, completed_at, result_json, failed_at, failure_code,
         failure_message) in scans:
        counts[status] += 1
        entry = {"scan_id": scan_id, "livemode": batch.livemode, "status": status, "target": target, "kind": kind}
        final = final_fields(status, as_time(completed_at), result_json, as_time(failed_at), failure_code,
                             failure_message, raw_result=True)
        if final is None:
            all_done = False
        else:
            entry.update(final)
        entries.append(entry)
    return {"ok": True, "bulk_id": batch.id, "livemode": batch.livemode, "total": batch.total, **counts,
            "rejected_count": max(0, batch.total - len(entries)), "all_done": all_done, "scans": entries}


def _list_entry(row, livemode: bool) -> dict:
    (scan_id, status, target, kind, bulk_id, created_at, completed_at, result_json, failed_at, failure_code,
     failure_message) = row
    as_time = Scan.created_at.python_value  # raw rows, as the model would read them
    entry = {"scan_id": scan_id, "livemode": livemode, "status": status, "target": target, "kind": kind,
             "created_at": iso(as_time(created_at))}
    if bulk_id:
        entry["bulk_id"] = bulk_id
    final = final_fields(status, as_time(completed_at), result_json, as_time(failed_at), failure_code,
                         failure_message, raw_result=True)
    if final is not None:
        entry.update(final)
    return entry


def list_scans(customer_id: str, *, status: str | None = None, kind: str | None = None, bulk_id: str | None = None,
               created_after=None, created_before=None, limit: int = LIST_DEFAULT_LIMIT,
               starting_after: str | None = None, livemode: bool = True) -> dict:
    """The body of ``GET /scans``: ``{ok, data, has_more}``, newest first (D17), the scans of the
    calling key's mode only (D15).

    Order is ``(created_at, id)`` descending: a bulk call's scans share one ``created_at``, so the
    id breaks the tie and the cursor (``starting_after``: the last scan id of the previous page)
    is exact. The query walks the ``(customer, created_at)`` index and reads one row more than
    the page to know ``has_more`` without counting. Times are naive UTC, both bounds exclusive.
    """
    where, params = ["customer_id = ?", "livemode = ?"], [customer_id, livemode]
    for column, value in (("status", status), ("kind", kind), ("bulk_id", bulk_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if created_after is not None:
        where.append("created_at > ?")
        params.append(created_after)
    if created_before is not None:
        where.append("created_at < ?")
        params.append(created_before)
    if starting_after is not None:
        cursor = execute(LIST_CURSOR, (starting_after, customer_id, livemode)).fetchone()
        if cursor is None:  # unknown, another customer's or mode's: the same answer, nothing disclosed
            raise InvalidRequest("starting_after is not the id of one of your scans",
                                 details={"starting_after": ["no scan of yours has this id"]})
        where.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [cursor[0], cursor[0], starting_after]
    limit = max(1, min(LIST_MAX_LIMIT, int(limit)))
    rows = execute(f"SELECT {LIST_COLUMNS} FROM {table(Scan)} WHERE {' AND '.join(where)} "
                   f"ORDER BY created_at DESC, id DESC LIMIT ?", params + [limit + 1]).fetchall()
    return {"ok": True, "data": [_list_entry(row, livemode) for row in rows[:limit]], "has_more": len(rows) > limit}


# --- the portal's scans list, scan and batch pages ---------------------------------------

STATUSES = (QUEUED, RUNNING, COMPLETED, FAILED)
MAX_PER_PAGE = 100
MAX_SEARCH = 300


def _summary(scan, now) -> dict:
    """What a list row shows: no result body (a page of 100 results is a lot of JSON)."""
    row = {"scan_id": scan.id, "status": scan.status, "kind": scan.kind, "target": scan.target,
           "created_at": scan.created_at, "completed_at": scan.completed_at, "failed_at": scan.failed_at,
           "failure_code": scan.failure_code, "bulk_id": scan.bulk_id, "key_id": scan.api_key_id,
           "recipes_total": scan.recipes_total, "recipes_done": scan.recipes_done, "livemode": scan.livemode}
    if scan.status in (QUEUED, RUNNING):
        row["eta_seconds"] = remaining_eta(scan, now)
    return row


def _key_ref(key_id: str) -> dict:
    key = ApiKey.get_by_id(key_id)
    return {"key_id": key.id, "name": key.name, "display": key.display}


def portal_scans(customer_id: str, *, status: str | None = None, kind: str | None = None,
                 key_id: str | None = None, bulk_id: str | None = None, search: str | None = None,
                 page: int = 1, per_page: int = 25) -> Page:
    """The portal's scans list: newest first, a batch's scans in request order, numbered pages
    with a total, a key filter and a search in the target (the API's ``list_scans`` pages by
    cursor); filters that are not for this customer find nothing."""
    for name, value in (("batch", bulk_id), ("search", search)):
        if value and "\x00" in value:  # PostgreSQL refuses a NUL even in a comparison: a 400, not a 500
            raise InvalidRequest(f"the {name} filter must not contain a NUL byte")
    page, per_page = max(1, page), min(MAX_PER_PAGE, max(1, per_page))
    query = Scan.select().where(Scan.customer == customer_id)
    if status:
        query = query.where(Scan.status == status)
    if kind:
        query = query.where(Scan.kind == kind)
    if key_id:
        query = query.where(Scan.api_key == key_id)
    if bulk_id:
        query = query.where(Scan.bulk == bulk_id)
    search = (search or "").strip()[:MAX_SEARCH]
    if search:
        query = query.where(Scan.target.contains(search))  # escaped LIKE: % and _ are literal
    total = query.count()
    # A batch's scans share one created_at: they follow the request's order.
    rows = query.order_by(Scan.created_at.desc(), Scan.bulk_index, Scan.id.desc()).paginate(page, per_page)
    now = utcnow()
    return Page([_summary(s, now) for s in rows], total, page, per_page)


def scan_detail(customer_id: str, scan_id: str) -> dict:
    """One scan in any state with its key, and its ``final_state`` (``result`` parsed, or ``failure``)."""
    scan = Scan.get_or_none((Scan.id == scan_id) & (Scan.customer == customer_id))
    if scan is None:
        raise NotFound("no scan with this id")
    detail = _summary(scan, utcnow())
    detail.update(final_state(scan) or {})
    detail.update(started_at=scan.started_at, key=_key_ref(scan.api_key_id))
    return detail


def batch_detail(customer_id: str, bulk_id: str) -> dict:
    """A batch's counters and its scans in request order (``rejected_count`` as in ``read_bulk``)."""
    batch = BulkBatch.get_or_none((BulkBatch.id == bulk_id) & (BulkBatch.customer == customer_id))
    if batch is None:
        raise NotFound("no bulk batch with this id")
    now = utcnow()
    scans = [_summary(s, now) for s in Scan.select().where(Scan.bulk == batch.id).order_by(Scan.bulk_index)]
    counts = dict.fromkeys(STATUSES, 0)
    for scan in scans:
        counts[scan["status"]] += 1
    return {"bulk_id": batch.id, "livemode": batch.livemode, "created_at": batch.created_at, "total": batch.total,
            "counts": counts,
            "rejected_count": max(0, batch.total - len(scans)),
            "all_done": counts[QUEUED] + counts[RUNNING] == 0, "scans": scans, "key": _key_ref(batch.api_key_id)}


# --- served reads: authentication, charge and read in one statement ---------------------
# A read is always charged once its key is live and its balance covers it (200, 403 and 404
# are all charged, D3), so the key look-up, the conditional charge with its
# ledger row, the quota windows the answer reports (D8) and the scan (or the batch and its
# scans) are one statement, prepared once per connection: one round trip and one commit per
# read, where authentication, read and charge took three. The rules stay those of ``keyauth``, ``billing`` and the
# reads above; a test key's read runs them one after the other (``_serve_in_turn``).

@dataclass
class ServedRead:
    """A read by a live key: its body, or the refusal it answers (402, 403, 404); with the
    balance and quota usage after its charge (None when it was not charged)."""

    key: ApiKey
    body: dict | None = None
    error: ServiceError | None = None
    balance: int | None = None
    usage: quotas.Usage | None = None


def _charged(owner: str) -> str:
    """The key, the charge with its ledger row and the live windows; ``owner`` selects the
    customer of the live object read (none: 404), which picks the ledger row's note (200, 403
    or 404). A test key is charged nothing here (D15): ``_serve`` reads for it as before."""
    return f"""
WITH k AS (SELECT {keyauth.KEY_COLUMNS} FROM {table(ApiKey)} AS k JOIN {table(Customer)} AS c
           ON c.id = k.customer_id WHERE k.digest = ?),
charged AS (
    UPDATE {table(Customer)} SET balance = balance - {billing.CALL_PRICE}
    WHERE id = (SELECT customer_id FROM k WHERE revoked_at IS NULL AND livemode) AND balance >= {billing.CALL_PRICE}
    RETURNING id, balance),
ledger AS (
    INSERT INTO {table(CreditLedger)} (customer_id, delta, balance_after, reason, request_id, note, created_at)
    SELECT id, -{billing.CALL_PRICE}, balance, 'call', ?,
           (SELECT CASE WHEN o.owner IS NULL THEN ? WHEN o.owner = charged.id THEN ? ELSE ? END
            FROM (SELECT ({owner}) AS owner) AS o), ?
    FROM charged RETURNING balance_after),
w AS MATERIALIZED (
    SELECT (SELECT balance_after FROM ledger), {quotas.window_columns_for("(SELECT customer_id FROM k)")})
"""
_WINDOWS = 7  # the new balance, then the six window columns
READ_SCAN_CHARGED = (_charged(f"SELECT customer_id FROM {table(Scan)} WHERE id = ? AND livemode")
                     + f"SELECT k.*, w.*, {columns(Scan, 's')} FROM k CROSS JOIN w LEFT JOIN {table(Scan)} AS s "
                       f"ON s.id = ?")
_BATCH_WIDTH = len(BulkBatch._meta.sorted_fields)
_SCAN_ENTRY = ("s.id, s.status, s.target, s.kind, s.completed_at, s.result_json, s.failed_at, s.failure_code, "
               "s.failure_message")  # the columns of BATCH_SCANS
# The key, charge and batch on the first row, then one row per scan with only its own
# columns: the key's and windows' columns are not sent (nor decoded) a hundred times.
READ_BULK_CHARGED = _charged(f"SELECT customer_id FROM {table(BulkBatch)} WHERE id = ? AND livemode") + (
    f", b AS (SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?)\n"
    f"SELECT k.*, w.*, b.*, {', '.join(['NULL'] * 9)}, -1 AS position FROM k CROSS JOIN w LEFT JOIN b ON true\n"
    f"UNION ALL\n"
    f"SELECT {', '.join(['NULL'] * (keyauth.KEY_ROW_LENGTH + _WINDOWS + _BATCH_WIDTH))}, {_SCAN_ENTRY}, s.bulk_index "
    f"FROM b JOIN {table(Scan)} AS s ON s.bulk_id = b.id WHERE b.customer_id = (SELECT customer_id FROM k)\n"
    f"ORDER BY position")


def serve_scan_read(token: str, scan_id: str, request_id: str | None, notes: dict[int, str]) -> ServedRead:
    """``GET /scan/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401), else the read.
    ``notes``: the charge's ledger note for an answer 200, 403 and 404 (``billing.charge_call``)."""
    return _serve(token, scan_id, request_id, notes, READ_SCAN_CHARGED, _scan_body, read_scan)


def serve_bulk_read(token: str, bulk_id: str, request_id: str | None, notes: dict[int, str]) -> ServedRead:
    """``GET /scan/bulk/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401), else the read."""
    return _serve(token, bulk_id, request_id, notes, READ_BULK_CHARGED, _bulk_body, read_bulk)


def _serve(token, object_id, request_id, notes, statement, body_of_rows, read) -> ServedRead:
    now = utcnow()
    token_digest = keyauth.digest_of(token)
    notes = {status: billing.call_note(note) for status, note in notes.items()}
    rows = execute_prepared(statement, (token_digest, request_id, notes[404], notes[200], notes[403], object_id, now)
                            + quotas.window_times(now) + (object_id,)).fetchall()
    key = keyauth.live_key(keyauth.key_from_row(rows[0]) if rows else None, token_digest, now)
    if not key.livemode:  # a test key: nothing was charged; its read as before (D15)
        return _serve_in_turn(key, object_id, request_id, notes, read, now)
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


def _serve_in_turn(key, object_id, request_id, notes, read, now) -> ServedRead:
    """Authentication done: the balance check, the read and the charge one after the other
    (test keys, which are charged nothing and read only test data: D15)."""
    if billing.is_billed(key.livemode) and key.customer.balance < billing.CALL_PRICE:
        return ServedRead(key, error=InsufficientBalance(key.customer.balance))
    served = ServedRead(key)
    try:
        served.body = read(key.customer_id, object_id, key.livemode)
    except (NotFound, Forbidden) as exc:
        served.error = exc
    if not billing.is_billed(key.livemode):
        return served  # the hooks report the live balance and the test windows, as for any test call
    status = 200 if served.error is None else 404 if isinstance(served.error, NotFound) else 403
    served.balance, served.usage = billing.charge_call(key.customer_id, request_id, now, notes[status])
    if served.balance is None:  # the balance ran out since the key was read: not served
        return ServedRead(key, error=InsufficientBalance(billing.balance_of(key.customer_id)))
    return served


def _owned_row(model, values, customer_id: str, what: str):
    if values[0] is None:
        raise NotFound(f"no {what} with this id")
    row = instance(model, values)
    if not row.livemode:  # a live key reads live data only (D15): the mode before the owner
        raise NotFound(f"no {what} with this id")
    if row.customer_id != customer_id:
        raise Forbidden(f"this {what} belongs to another customer")
    return row


def _scan_body(rows, customer_id: str, now) -> dict:
    return scan_view(_owned_row(Scan, rows[0], customer_id, "scan"), now, raw_result=True)


def _bulk_body(rows, customer_id: str, now) -> dict:
    batch = _owned_row(BulkBatch, rows[0][:_BATCH_WIDTH], customer_id, "bulk batch")
    return bulk_body(batch, [row[_BATCH_WIDTH:-1] for row in rows[1:]])
