"""Scan state transitions (decisions D5), shared by the tracking jobs and the sweep.

A final state is set by compare-and-set: ``UPDATE ... WHERE status IN ('queued',
'running')``. Only the first writer sees one row changed, so a duplicate or replayed
job finishes a scan once and records its webhook event once, in the same transaction.
"""
from __future__ import annotations

import json
import logging

from app.extensions import db
from app.models import Scan, utcnow
from app.models.scans import COMPLETED, FAILED, IN_FLIGHT, QUEUED, RUNNING
from app.services import webhooks

log = logging.getLogger(__name__)


def record_progress(scan_id: str, *, running: bool, recipes_total: int | None, recipes_done: int | None) -> None:
    changes = {"last_checked_at": utcnow(), "check_errors": 0}
    if recipes_total is not None:
        changes["recipes_total"] = recipes_total
    if recipes_done is not None:
        changes["recipes_done"] = recipes_done
    query = Scan.update(**changes).where((Scan.id == scan_id) & Scan.status.in_(IN_FLIGHT))
    query.execute()
    if running:
        Scan.update(status=RUNNING, started_at=utcnow()).where((Scan.id == scan_id) & (Scan.status == QUEUED)).execute()


def _finish(scan_id: str, changes: dict) -> bool:
    delivery = None
    with db.atomic():
        changed = Scan.update(**changes).where((Scan.id == scan_id) & Scan.status.in_(IN_FLIGHT)).execute()
        if changed:
            delivery = webhooks.record_event(Scan.get_by_id(scan_id))
    if delivery is not None:
        webhooks.dispatch(delivery)
    return bool(changed)


def complete(scan_id: str, result: dict) -> bool:
    """Mark completed with ``result``; False when the scan was already final."""
    now = utcnow()
    done = _finish(scan_id, {"status": COMPLETED, "completed_at": now, "last_checked_at": now,
                             "result_json": json.dumps(result, separators=(",", ":")),
                             "recipes_done": Scan.recipes_total})
    if done:
        log.info("scan %s completed", scan_id)
    return done


def fail(scan_id: str, code: str, message: str) -> bool:
    now = utcnow()
    done = _finish(scan_id, {"status": FAILED, "failed_at": now, "last_checked_at": now,
                             "failure_code": code, "failure_message": message[:500]})
    if done:
        log.info("scan %s failed: %s", scan_id, code)
    return done
