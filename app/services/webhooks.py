"""Webhook events: the delivery row written with a scan's final state (D11, D13).

The row (with the exact body bytes every attempt will send) is committed in the
transaction that finishes the scan; only then is its job enqueued, and a job Redis
refused is enqueued later by the recovery sweep. Delivery itself is
``workers.webhook_jobs``.
"""
from __future__ import annotations

import json
import logging

from app.models import ApiKey, WebhookDelivery, iso, new_id
from app.models.scans import COMPLETED

log = logging.getLogger(__name__)


def event_body(scan) -> dict:
    """The body of ``scan.completed`` (spec §6.4) or ``scan.failed`` (D11)."""
    event = "scan.completed" if scan.status == COMPLETED else "scan.failed"
    body = {"event": event, "scan_id": scan.id}
    if scan.bulk_id:
        body["bulk_id"] = scan.bulk_id
    body.update(target=scan.target, kind=scan.kind, status=scan.status)
    if scan.status == COMPLETED:
        body["completed_at"] = iso(scan.completed_at)
        body["result"] = json.loads(scan.result_json)
    else:
        body["failed_at"] = iso(scan.failed_at)
        body["failure"] = {"code": scan.failure_code, "message": scan.failure_message or ""}
    return body


def record_event(scan) -> WebhookDelivery | None:
    """Write the delivery row for a scan that just became final; None when the key has no URL."""
    key = ApiKey.get_by_id(scan.api_key_id)
    if not key.webhook_url:
        return None
    body = event_body(scan)
    delivery_id = new_id("dlv")
    return WebhookDelivery.create(
        id=delivery_id, customer=scan.customer_id, api_key=key.id, scan_id=scan.id, event=body["event"],
        url=key.webhook_url, body=json.dumps(body, separators=(",", ":")), job_id=f"dlv-{delivery_id}-1")


def dispatch(delivery: WebhookDelivery) -> bool:
    from workers.queues import enqueue_delivery
    return enqueue_delivery(delivery.id, delivery.job_id)
