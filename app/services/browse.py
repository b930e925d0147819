"""Read services for the portal's scan and batch pages (issue 19).

Every function takes the logged-in customer's id and raises ``LookupError`` for an
object of another customer or an unknown one alike, which the portal answers as 404,
so ids cannot be probed. Lists are newest first and paged by offset: the portal shows
page numbers; ``(customer, created_at)`` serves the order and the customer's filter.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from peewee import fn

from app.models import ApiKey, BulkBatch, Scan, WebhookDelivery, utcnow
from app.models.scans import COMPLETED, FAILED, QUEUED, RUNNING

STATUSES = (QUEUED, RUNNING, COMPLETED, FAILED)
KINDS = ("email", "phone", "username")
MAX_PER_PAGE = 100
MAX_SEARCH = 300


@dataclass
class Page:
    items: list
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def _eta(scan: Scan, now) -> int:
    """Seconds until the engine's expected end, never negative (as the API's read says)."""
    return 0 if scan.eta_at is None else max(0, math.ceil((scan.eta_at - now).total_seconds()))


def _summary(scan: Scan, now) -> dict:
    """What a list row shows: no result body (a page of 100 results is a lot of JSON)."""
    row = {"scan_id": scan.id, "status": scan.status, "kind": scan.kind, "target": scan.target,
           "created_at": scan.created_at, "completed_at": scan.completed_at, "failed_at": scan.failed_at,
           "failure_code": scan.failure_code, "bulk_id": scan.bulk_id, "key_id": scan.api_key_id,
           "recipes_total": scan.recipes_total, "recipes_done": scan.recipes_done}
    if scan.status in (QUEUED, RUNNING):
        row["eta_seconds"] = _eta(scan, now)
    return row


def customer_keys(customer_id: str) -> list[dict]:
    """The customer's keys for a filter's choices: id, name and display (never the digest)."""
    return [{"key_id": k.id, "name": k.name, "display": k.display}
            for k in ApiKey.select().where(ApiKey.customer == customer_id).order_by(ApiKey.created_at.desc())]


def list_scans(customer_id: str, *, status: str | None = None, kind: str | None = None,
               key_id: str | None = None, bulk_id: str | None = None, search: str | None = None,
               page: int = 1, per_page: int = 25) -> Page:
    """The customer's scans, newest first; filters that are not for this customer find nothing."""
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
    """One scan in any state, with its result parsed, its key and its webhook deliveries."""
    scan = Scan.get_or_none((Scan.id == scan_id) & (Scan.customer == customer_id))
    if scan is None:
        raise LookupError(f"no scan {scan_id}")
    detail = _summary(scan, utcnow())
    detail.update(started_at=scan.started_at, failure_message=scan.failure_message or "",
                  result=json.loads(scan.result_json) if scan.status == COMPLETED and scan.result_json else None)
    key = ApiKey.get_by_id(scan.api_key_id)
    detail["key"] = {"key_id": key.id, "name": key.name, "display": key.display}
    deliveries = (WebhookDelivery.select()
                  .where((WebhookDelivery.scan_id == scan.id) & (WebhookDelivery.customer == customer_id))
                  .order_by(WebhookDelivery.created_at.desc()))
    detail["deliveries"] = [{"delivery_id": d.id, "event": d.event, "status": d.status, "attempts": d.attempts,
                             "created_at": d.created_at, "key_id": d.api_key_id,
                             "next_attempt_at": d.next_attempt_at if d.status == "pending" else None}
                            for d in deliveries]
    return detail


def batch_detail(customer_id: str, bulk_id: str) -> dict:
    """A batch's counters (counted in SQL) and its scans in request order."""
    batch = BulkBatch.get_or_none((BulkBatch.id == bulk_id) & (BulkBatch.customer == customer_id))
    if batch is None:
        raise LookupError(f"no batch {bulk_id}")
    counts = {status: 0 for status in STATUSES}
    for status, count in (Scan.select(Scan.status, fn.COUNT(Scan.id)).where(Scan.bulk == batch.id)
                          .group_by(Scan.status).tuples()):
        counts[status] = count
    now = utcnow()
    scans = [_summary(s, now) for s in Scan.select().where(Scan.bulk == batch.id).order_by(Scan.bulk_index)]
    queued_total = sum(counts.values())
    key = ApiKey.get_by_id(batch.api_key_id)
    return {"bulk_id": batch.id, "created_at": batch.created_at, "total": batch.total, "counts": counts,
            "rejected_count": max(0, batch.total - queued_total),
            "all_done": counts[QUEUED] + counts[RUNNING] == 0, "scans": scans,
            "key": {"key_id": key.id, "name": key.name, "display": key.display}}
