"""Watches (D28): their rows, the customer's count, the due ones claimed, a watch's scans."""
from __future__ import annotations

from datetime import datetime

from peewee import Case

from app.plumbing.db import Statement, execute, insert_rows_statement, table
from app.scans.models import COMPLETED, Scan
from app.watches.models import ACTIVE, ENDED, Watch

CLAIM = (f"UPDATE {table(Watch)} SET next_scan_at = ? WHERE id IN (SELECT id FROM {table(Watch)} "
         "WHERE status = ? AND next_scan_at <= ?%s ORDER BY next_scan_at LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING id")


def insert_statement(rows: list[dict]) -> Statement:
    """One INSERT of watches (keyed by field name), to run with an admission's other writes."""
    sql, params = insert_rows_statement(Watch, rows)
    return sql, tuple(params)


def count_open(customer_id: str, livemode: bool) -> int:
    """The customer's watches of one mode not ended: what the watch limit counts."""
    return (Watch.select().where((Watch.customer == customer_id) & (Watch.livemode == livemode)
                                 & (Watch.status != ENDED)).count())


def taken_slots(customer_id: str, livemode: bool, interval: str) -> set[int]:
    """The slots of the customer's watches of one mode and interval not ended (``watch_times``)."""
    query = Watch.select(Watch.slot).where(
        (Watch.customer == customer_id) & (Watch.livemode == livemode) & (Watch.interval == interval)
        & (Watch.status != ENDED))
    return {row.slot for row in query if row.slot is not None}


def get(watch_id: str) -> Watch | None:
    return Watch.get_or_none(Watch.id == watch_id)


def get_many(watch_ids: list[str]) -> list[Watch]:
    return list(Watch.select().where(Watch.id.in_(watch_ids))) if watch_ids else []


def lock_status(watch_id: str) -> str | None:
    """The watch's status, its row locked until the transaction ends (a change or an end waits)."""
    row = Watch.select(Watch.status).where(Watch.id == watch_id).for_update().first()
    return None if row is None else row.status


def delete_many(watch_ids: list[str]) -> None:
    if watch_ids:
        Watch.delete().where(Watch.id.in_(watch_ids)).execute()


def set_last_scans(scan_of: dict[str, str]) -> None:
    """Each watch's ``last_scan_id`` (watch id -> scan id), in one UPDATE."""
    if scan_of:
        Watch.update(last_scan_id=Case(Watch.id, list(scan_of.items()))).where(
            Watch.id.in_(list(scan_of))).execute()


def update(watch_id: str, changes: dict, *, unless_status: str | None = None, only_status: str | None = None) -> bool:
    """Write ``changes``; with ``unless_status``, only to a watch not in that status; with
    ``only_status``, only to one in it. Whether it took."""
    query = Watch.update(changes).where(Watch.id == watch_id)
    if unless_status is not None:
        query = query.where(Watch.status != unless_status)
    if only_status is not None:
        query = query.where(Watch.status == only_status)
    return query.execute() > 0


def page(customer_id: str, *, livemode: bool, status: str | None, kind: str | None,
         before: tuple | None, limit: int) -> list[Watch]:
    """Up to ``limit`` of the customer's watches of one mode, newest first by ``(created_at, id)``;
    ``before``: ``(created_at, id)`` of the watch the page starts after."""
    query = Watch.select().where((Watch.customer == customer_id) & (Watch.livemode == livemode))
    if status is not None:
        query = query.where(Watch.status == status)
    if kind is not None:
        query = query.where(Watch.kind == kind)
    if before is not None:
        query = query.where((Watch.created_at < before[0]) | ((Watch.created_at == before[0]) & (Watch.id < before[1])))
    return list(query.order_by(Watch.created_at.desc(), Watch.id.desc()).limit(limit))


def portal_page(customer_id: str, *, livemode: bool | None, status: str | None, offset: int,
                limit: int) -> tuple[int, list[Watch]]:
    """``(total, rows)``: the customer's watches of one mode or both (``livemode`` None), newest first."""
    query = Watch.select().where(Watch.customer == customer_id)
    if livemode is not None:
        query = query.where(Watch.livemode == livemode)
    if status is not None:
        query = query.where(Watch.status == status)
    rows = list(query.order_by(Watch.created_at.desc(), Watch.id.desc()).offset(offset).limit(limit))
    return query.count(), rows


def claim_due(now: datetime, hold_until: datetime, limit: int, *, customer_id: str | None = None) -> list[Watch]:
    """Up to ``limit`` active watches due at ``now`` (of one customer's, with ``customer_id``),
    claimed: their due time moved to ``hold_until`` in the same statement, rows another claim
    holds skipped (``SKIP LOCKED``). A claimer that dies leaves them due again at ``hold_until``."""
    if customer_id is None:
        rows = execute(CLAIM % "", (hold_until, ACTIVE, now, limit))
    else:
        rows = execute(CLAIM % " AND customer_id = ?", (hold_until, ACTIVE, now, customer_id, limit))
    ids = [row[0] for row in rows.fetchall()]
    return list(Watch.select().where(Watch.id.in_(ids)).order_by(Watch.id)) if ids else []


def next_due() -> datetime | None:
    """The earliest due time of an active watch, or None."""
    row = (Watch.select(Watch.next_scan_at).where((Watch.status == ACTIVE) & Watch.next_scan_at.is_null(False))
           .order_by(Watch.next_scan_at).first())
    return None if row is None else row.next_scan_at


def previous_completed_scan(watch_id: str, scan: Scan) -> Scan | None:
    """The watch's completed scan made before ``scan`` (the one its changes are counted from)."""
    return (Scan.select().where((Scan.watch_id == watch_id) & (Scan.status == COMPLETED) & (Scan.id != scan.id)
                                & (Scan.created_at <= scan.created_at))
            .order_by(Scan.created_at.desc(), Scan.id.desc()).first())


def open_with_optout_hash(target_hashes: set[str]) -> list[Watch]:
    """The watches not ended whose opt-out hash is one of ``target_hashes``, locked in id order."""
    return list(Watch.select().where(Watch.optout_hash.in_(sorted(target_hashes)) & (Watch.status != ENDED))
                .order_by(Watch.id).for_update())
