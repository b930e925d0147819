"""``GET /api/v1/scans``: a customer's scans, newest first, with cursor pagination (D17).

Order is ``(created_at, id)`` descending: a bulk call's scans share one ``created_at``, so the id
breaks the tie and the cursor (``starting_after``: the last scan id of the previous page) is exact.
The query walks the ``(customer, created_at)`` index and reads one row more than the page to
know ``has_more`` without counting.
"""
from __future__ import annotations

from datetime import datetime

from app.db import execute, table
from app.errors import ApiError
from app.models import Scan, iso
from app.models.scans import COMPLETED, FAILED
from app.rawjson import RawJSON

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
COLUMNS = ("id, status, target, kind, bulk_id, created_at, completed_at, result_json, failed_at, failure_code, "
           "failure_message")


def _entry(row) -> dict:
    (scan_id, status, target, kind, bulk_id, created_at, completed_at, result_json, failed_at, failure_code,
     failure_message) = row
    as_time = Scan.created_at.python_value  # raw rows: SQLite hands back text, PostgreSQL datetimes
    entry = {"scan_id": scan_id, "status": status, "target": target, "kind": kind,
             "created_at": iso(as_time(created_at))}
    if bulk_id:
        entry["bulk_id"] = bulk_id
    if status == COMPLETED:
        entry["completed_at"] = iso(as_time(completed_at))
        entry["result"] = RawJSON(result_json)
    elif status == FAILED:
        entry["failed_at"] = iso(as_time(failed_at))
        entry["failure"] = {"code": failure_code, "message": failure_message or ""}
    return entry


def list_scans(customer_id: str, *, status: str | None = None, kind: str | None = None, bulk_id: str | None = None,
               created_after: datetime | None = None, created_before: datetime | None = None,
               limit: int = DEFAULT_LIMIT, starting_after: str | None = None) -> dict:
    """The body ``{ok, data, has_more}``; times are naive UTC, both bounds exclusive."""
    where, params = ["customer_id = ?"], [customer_id]
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
        cursor = execute(f"SELECT created_at FROM {table(Scan)} WHERE id = ? AND customer_id = ?",
                         (starting_after, customer_id)).fetchone()
        if cursor is None:  # unknown, or another customer's: the same answer, nothing disclosed
            raise ApiError(400, "invalid_request", "starting_after is not the id of one of your scans",
                           details={"starting_after": ["no scan of yours has this id"]})
        where.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [cursor[0], cursor[0], starting_after]
    limit = max(1, min(MAX_LIMIT, int(limit)))
    rows = execute(f"SELECT {COLUMNS} FROM {table(Scan)} WHERE {' AND '.join(where)} "
                   f"ORDER BY created_at DESC, id DESC LIMIT ?", params + [limit + 1]).fetchall()
    return {"ok": True, "data": [_entry(row) for row in rows[:limit]], "has_more": len(rows) > limit}
