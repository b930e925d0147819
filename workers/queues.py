"""Queue names and dispatch helpers, shared by the API (which enqueues) and workers.

Jobs are referenced by dotted path so the API process never imports job code.
Dispatch never raises: the rows it points at are committed first (D13), and a
dispatch that Redis refused is found and redone by the recovery sweep.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from redis.exceptions import RedisError
from rq import Queue

from app import runtime

log = logging.getLogger(__name__)

ENGINE_QUEUE = "engine"
WEBHOOK_QUEUE = "webhooks"
TRACK_JOB = "workers.engine_jobs.track_scan"
DELIVER_JOB = "workers.webhook_jobs.deliver"
JOB_TTL = 24 * 3600
# RQ's hard limit for one delivery job; the sweep treats an attempt older than this as abandoned.
DELIVERY_JOB_TIMEOUT = 120


def queue(name: str) -> Queue:
    return Queue(name, connection=runtime.redis())


def tracking_job_id(scan_id: str, generation: int) -> str:
    return f"trk-{scan_id}-{generation}"


def enqueue_tracking(job_ids: dict[str, str], delay_seconds: float = 0) -> bool:
    """Enqueue a tracking job per ``{scan_id: job_id}`` in one Redis round trip."""
    if not job_ids:
        return True
    try:
        q = queue(ENGINE_QUEUE)
        with runtime.redis().pipeline() as pipe:
            for scan_id, job_id in job_ids.items():
                kwargs = dict(args=(scan_id,), job_id=job_id, result_ttl=0, failure_ttl=JOB_TTL, ttl=JOB_TTL,
                              job_timeout=60, pipeline=pipe)
                if delay_seconds > 0:
                    q.enqueue_in(timedelta(seconds=delay_seconds), TRACK_JOB, **kwargs)
                else:
                    q.enqueue(TRACK_JOB, **kwargs)
            pipe.execute()
        return True
    except RedisError as exc:
        log.warning("could not dispatch %d tracking job(s), the sweep will: %s", len(job_ids), exc)
        return False


def enqueue_delivery(delivery_id: str, job_id: str, delay_seconds: float = 0) -> bool:
    try:
        q = queue(WEBHOOK_QUEUE)
        kwargs = dict(args=(delivery_id,), job_id=job_id, result_ttl=0, failure_ttl=JOB_TTL, ttl=JOB_TTL,
                      job_timeout=DELIVERY_JOB_TIMEOUT)
        if delay_seconds > 0:
            q.enqueue_in(timedelta(seconds=delay_seconds), DELIVER_JOB, **kwargs)
        else:
            q.enqueue(DELIVER_JOB, **kwargs)
        return True
    except RedisError as exc:
        log.warning("could not dispatch delivery %s, the sweep will: %s", delivery_id, exc)
        return False
