"""Scans and bulk batches: the admission's writes and their reversal, the reads of the API
and of the portal (the served read, which charges the key in the same statement, is billing's:
``app.billing.statements.served_reads``).

Every read runs these, so their statements are written once as SQL (``app.plumbing.db.execute``).
The rules (the price of a call, which key modes are billed, which
status an unsubmitted scan has) are the services' and come in as parameters.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.accounts.models import Customer
from app.plumbing.cursor_pages import newest_first_where
from app.plumbing.db import Statement, columns, execute, execute_batch, insert_rows_statement, instance, table
from app.scans.models import BulkBatch, FindingFeedback, Scan

# --- the admission's writes and their reversal ----------------------------------------------

def insert_batch_statement(row: dict) -> Statement:
    """The INSERT of one bulk batch (``row`` keyed by field name), to run with others."""
    sql, params = insert_rows_statement(BulkBatch, [row])
    return sql, tuple(params)



def run_together(statements: list[Statement]) -> None:
    """An admission's writes (its batch, scans, watches, in-flight count) in order, in one round trip."""
    execute_batch(statements)


def insert_scans_statement(rows: list[dict]) -> Statement:
    """One INSERT of all ``rows`` (keyed by field name, a non-empty list), to run with others."""
    sql, params = insert_rows_statement(Scan, rows)
    return sql, tuple(params)


def scan_exists(scan_id: str) -> bool:
    return Scan.select().where(Scan.id == scan_id).exists()


def batch_exists(bulk_id: str) -> bool:
    return BulkBatch.select().where(BulkBatch.id == bulk_id).exists()


def batch_has_scans(bulk_id: str) -> bool:
    return Scan.select().where(Scan.bulk == bulk_id).exists()


def delete_scans(scan_ids: list[str]) -> None:
    Scan.delete().where(Scan.id.in_(scan_ids)).execute()


def delete_batch(bulk_id: str) -> None:
    BulkBatch.delete().where(BulkBatch.id == bulk_id).execute()


def delete_unsubmitted(scan_id: str, status: str) -> int:
    """Delete the scan if the engine never had it (no ``engine_id``) and it is still in
    ``status``; how many rows went (0 or 1)."""
    return Scan.delete().where((Scan.id == scan_id) & Scan.engine_id.is_null() & (Scan.status == status)).execute()


def record_submissions(submissions: Sequence[tuple[str, str, int, datetime, datetime | None, bool]]) -> None:
    """Store ``(scan id, engine id, recipes, eta, next look or None, whether the engine calls back)``
    for each scan in one UPDATE, whatever their number."""
    if len(submissions) == 1:
        scan_id, engine_id, recipes, eta, next_look, callbacks = submissions[0]
        execute(f"UPDATE {table(Scan)} SET engine_id = ?, recipes_total = ?, eta_at = ?, next_look_at = ?, "
                f"callbacks = ? WHERE id = ?", (engine_id, recipes, eta, next_look, callbacks, scan_id))
        return
    # A join with the new values: linear in the batch, where CASE is quadratic.
    values = ", ".join(["(?, ?, ?::integer, ?::timestamp, ?::timestamp, ?::boolean)"] * len(submissions))
    execute(f"UPDATE {table(Scan)} AS s SET engine_id = v.engine_id, recipes_total = v.recipes, eta_at = v.eta, "
            f"next_look_at = v.next_look, callbacks = v.callbacks "
            f"FROM (VALUES {values}) AS v(id, engine_id, recipes, eta, next_look, callbacks) "
            f"WHERE s.id = v.id", [v for submission in submissions for v in submission])


# --- reads -----------------------------------------------------------------------------------

SCAN_BY_ID = f"SELECT {columns(Scan)} FROM {table(Scan)} WHERE id = ?"
BATCH_BY_ID = f"SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = ?"
# A batch's scans as its read shows them (here, and in billing's served read of a batch).
BATCH_SCAN_COLUMNS = ("id", "status", "target", "kind", "purpose", "case_ref", "completed_at", "result_json",
                      "failed_at", "failure_code", "failure_message", "erased_at", "min_confidence", "required")
BATCH_SCANS = f"SELECT {', '.join(BATCH_SCAN_COLUMNS)} FROM {table(Scan)} WHERE bulk_id = ? ORDER BY bulk_index"
LIST_COLUMNS = ("id, status, target, kind, purpose, case_ref, bulk_id, watch_id, created_at, completed_at, "
                "result_json, failed_at, failure_code, failure_message, erased_at, min_confidence, required")
LIST_CURSOR = f"SELECT created_at FROM {table(Scan)} WHERE id = ? AND customer_id = ? AND livemode = ?"


def scan_by_id(scan_id: str) -> Scan | None:
    row = execute(SCAN_BY_ID, (scan_id,)).fetchone()
    return None if row is None else instance(Scan, row)


def batch_by_id(bulk_id: str) -> BulkBatch | None:
    row = execute(BATCH_BY_ID, (bulk_id,)).fetchone()
    return None if row is None else instance(BulkBatch, row)


def batch_scan_rows(bulk_id: str) -> Iterable[tuple]:
    """The batch's scans in request order, as raw rows of the columns of ``BATCH_SCANS``."""
    return execute(BATCH_SCANS, (bulk_id,))


def created_at_of(scan_id: str, *, customer_id: str, livemode: bool):
    """The raw ``created_at`` of the customer's scan of this mode (a list's cursor), or None."""
    row = execute(LIST_CURSOR, (scan_id, customer_id, livemode)).fetchone()
    return None if row is None else row[0]


def list_rows(customer_id: str, *, livemode: bool, status: str | None, kind: str | None, bulk_id: str | None,
              created_after, created_before, before: tuple | None, limit: int) -> list[tuple]:
    """Up to ``limit`` raw rows (the columns of ``LIST_COLUMNS``) of the customer's scans of one
    mode, newest first by ``(created_at, id)``, filtered; ``before``: ``(created_at, id)`` of
    the scan the page starts after. Both time bounds are exclusive."""
    where, params = newest_first_where({"customer_id": customer_id, "livemode": livemode, "status": status,
                                        "kind": kind, "bulk_id": bulk_id},
                                       created_after=created_after, created_before=created_before, before=before)
    return execute(f"SELECT {LIST_COLUMNS} FROM {table(Scan)} WHERE {' AND '.join(where)} "
                   f"ORDER BY created_at DESC, id DESC LIMIT ?", params + [limit]).fetchall()


def portal_page(customer_id: str, *, status: str | None, kind: str | None, key_id: str | None,
                bulk_id: str | None, search: str | None, page: int, per_page: int) -> tuple[int, list[Scan]]:
    """The customer's scans matching the filters (``search``: in the target, literally):
    their number, and page ``page`` of them, newest first, a batch's in request order."""
    query = Scan.select().where(Scan.customer == customer_id)
    if status:
        query = query.where(Scan.status == status)
    if kind:
        query = query.where(Scan.kind == kind)
    if key_id:
        query = query.where(Scan.api_key == key_id)
    if bulk_id:
        query = query.where(Scan.bulk == bulk_id)
    if search:
        query = query.where(Scan.target.contains(search))  # escaped LIKE: % and _ are literal
    total = query.count()
    # A batch's scans share one created_at: they follow the request's order.
    return total, list(query.order_by(Scan.created_at.desc(), Scan.bulk_index, Scan.id.desc()).paginate(page, per_page))


def owned_scan(scan_id: str, customer_id: str) -> Scan | None:
    return Scan.get_or_none((Scan.id == scan_id) & (Scan.customer == customer_id))


def reruns_of(scan_id: str, customer_id: str, *, since, limit: int) -> list[tuple[str, str, object]]:
    """(id, status, created_at) of the customer's re-runs of ``scan_id``, oldest first. A re-run
    is created after its original: ``since`` (the original's creation) bounds the walk of the
    (customer, created_at) index, as no index of its own serves ``rerun_of``."""
    query = (Scan.select(Scan.id, Scan.status, Scan.created_at)
             .where((Scan.customer == customer_id) & (Scan.created_at >= since) & (Scan.rerun_of == scan_id))
             .order_by(Scan.created_at, Scan.id).limit(limit).tuples())
    return [(row[0], row[1], row[2]) for row in query.execute()]


def owned_batch(bulk_id: str, customer_id: str) -> BulkBatch | None:
    return BulkBatch.get_or_none((BulkBatch.id == bulk_id) & (BulkBatch.customer == customer_id))


def lock_scan(scan_id: str) -> Scan | None:
    """The scan's row, locked until the transaction ends (a change of its stored result)."""
    return Scan.select().where(Scan.id == scan_id).for_update().first()


def set_result_json(scan_id: str, result_json: str) -> None:
    Scan.update(result_json=result_json).where(Scan.id == scan_id).execute()


def insert_feedback(row: dict) -> None:
    FindingFeedback.insert(**row).execute()


def erase_feedback(scan_ids: Sequence[str]) -> None:
    """Delete the feedback given on these scans' findings (its notes are about the person)."""
    FindingFeedback.delete().where(FindingFeedback.scan.in_(list(scan_ids))).execute()


def feedback_rows(scan_id: str) -> list[FindingFeedback]:
    """Every feedback given on the scan's findings, oldest first."""
    return list(FindingFeedback.select().where(FindingFeedback.scan == scan_id).order_by(FindingFeedback.id))


@dataclass(frozen=True)
class GivenFeedback:
    """One feedback given on a finding, with the scan it was given on (its owner, mode, creation)."""
    finding_id: str
    verdict: str
    note: str
    created_at: datetime
    scan_id: str
    customer_id: str
    livemode: bool
    scan_created_at: datetime


FEEDBACK_ON = f"""
SELECT f.finding_id, f.verdict, f.note, f.created_at, s.id, s.customer_id, s.livemode, s.created_at
FROM {table(FindingFeedback)} AS f JOIN {table(Scan)} AS s ON s.id = f.scan_id
WHERE f.finding_id = ANY(?) AND s.customer_id = ANY(?) ORDER BY f.created_at, f.id"""


def feedback_on(finding_ids: Sequence[str], customer_ids: Sequence[str]) -> list[GivenFeedback]:
    """Every feedback given on these findings in these customers' scans, oldest first (one
    statement, on the index of ``finding_id``)."""
    if not finding_ids or not customer_ids:
        return []
    rows = execute(FEEDBACK_ON, (list(finding_ids), list(customer_ids))).fetchall()
    as_time = Scan.created_at.python_value
    return [GivenFeedback(row[0], row[1], row[2], as_time(row[3]), row[4], row[5], row[6], as_time(row[7]))
            for row in rows]


def lock_later_scans_with(scan: Scan, finding_id: str, *, status: str) -> list[Scan]:
    """The scans of ``scan``'s customer, mode and kind created after it, in ``status``, not erased,
    whose stored result names ``finding_id``, locked in creation order (two feedbacks at once
    lock forwards, never in a circle)."""
    return list(Scan.select().where(
        (Scan.customer == scan.customer_id) & (Scan.livemode == scan.livemode) & (Scan.kind == scan.kind)
        & (Scan.created_at > scan.created_at) & (Scan.status == status) & Scan.erased_at.is_null()
        & Scan.result_json.contains(f'"{finding_id}"')).order_by(Scan.created_at, Scan.id).for_update())


def batch_scans(bulk_id: str) -> list[Scan]:
    """The batch's scans in request order."""
    return list(Scan.select().where(Scan.bulk == bulk_id).order_by(Scan.bulk_index))


# --- erasure (D20) ---------------------------------------------------------------------------

def erase(scan_ids: Sequence[str], *, final: Sequence[str], now: datetime) -> list[tuple[str, str | None, bool]]:
    """Remove the target, result, failure message and engine id of those of ``scan_ids`` that
    are in a ``final`` status and not yet erased, stamping ``erased_at``: ``(id, engine id it
    had, livemode)`` of each scan erased now. The rows are locked first (``FOR UPDATE``), so a
    concurrent erasure of the same scan waits and then finds it erased: each engine id is
    returned once."""
    rows = execute(f"WITH old AS (SELECT id, engine_id FROM {table(Scan)} WHERE id = ANY(?) AND erased_at IS NULL "
                   f"AND status = ANY(?) FOR UPDATE) "
                   f"UPDATE {table(Scan)} AS s SET target = NULL, result_json = NULL, failure_message = NULL, "
                   f"engine_id = NULL, erased_at = ? FROM old WHERE s.id = old.id "
                   f"RETURNING s.id, old.engine_id, s.livemode",
                   (list(scan_ids), list(final), now)).fetchall()
    return [(scan_id, engine_id, livemode) for scan_id, engine_id, livemode in rows]


def batch_states(bulk_id: str) -> list[tuple[str, str, datetime | None]]:
    """``(scan id, status, erased_at)`` of each scan of the batch."""
    as_time = Scan.erased_at.python_value
    return [(scan_id, status, as_time(erased_at)) for scan_id, status, erased_at in
            execute(f"SELECT id, status, erased_at FROM {table(Scan)} WHERE bulk_id = ?", (bulk_id,)).fetchall()]


# The retention job's look (parameters: final statuses, now - 1 day, now; then the limit); see past_retention.
_PAST_RETENTION_FROM = (
    f"FROM {table(Scan)} s JOIN {table(Customer)} c ON c.id = s.customer_id "
    f"WHERE s.erased_at IS NULL AND s.status = ANY(?) AND COALESCE(s.completed_at, s.failed_at) < ? "
    f"AND COALESCE(s.completed_at, s.failed_at) < ?::timestamp - make_interval(days => c.result_retention_days)")
PAST_RETENTION = f"SELECT s.id {_PAST_RETENTION_FROM} ORDER BY COALESCE(s.completed_at, s.failed_at) LIMIT ?"
# How many scans the look would find, whatever the limit (the operator's progress bar).
PAST_RETENTION_COUNT = f"SELECT count(*) {_PAST_RETENTION_FROM}"


def count_past_retention(*, final: Sequence[str], now: datetime) -> int:
    return int(execute(PAST_RETENTION_COUNT, past_retention_params(final=final, now=now, limit=0)[:-1]).fetchone()[0])


def past_retention_params(*, final: Sequence[str], now: datetime, limit: int) -> tuple:
    return list(final), now - timedelta(days=1), now, limit


def past_retention(*, final: Sequence[str], now: datetime, limit: int) -> list[str]:
    """Up to ``limit`` ids of final scans not yet erased whose end (``completed_at`` or
    ``failed_at``) is more than their customer's ``result_retention_days`` before ``now``,
    the oldest first. The partial index ``scan_erasable_finished_at`` serves it: every
    retention is at least a day, so only scans that ended before ``now - 1 day`` are read."""
    rows = execute(PAST_RETENTION, past_retention_params(final=final, now=now, limit=limit)).fetchall()
    return [row[0] for row in rows]
