"""Queue names and dispatch helpers, shared by the API (which enqueues) and workers.

Jobs are referenced by dotted path so the API process never imports job code.
Dispatch never raises: the rows it points at are committed first (D13), and a
dispatch that Redis refused is found and redone by the recovery sweep.

A delayed job is put into RQ's ScheduledJobRegistry here (``_save_scheduled``, ``_due``),
not by ``Queue.enqueue_in``: RQ 2.12 writes the registry entry outside the pipeline it
is given (one round trip per job, and for a moment an id without its job) and rounds
the due time down to the whole second (so a job may run up to a second early). Here
the jobs and their entries (one ZADD for a whole bulk) go in one pipeline, and an
entry's score is the due time to the millisecond: the workers' scheduler
(``workers.__main__.PreciseScheduler``) runs it then, and RQ's own scheduler
(``rq worker --with-scheduler``) at the next whole second, never early.
"""
from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError
from rq import Queue
from rq.job import JobStatus
from rq.registry import ScheduledJobRegistry

from app import runtime

log = logging.getLogger(__name__)

ENGINE_QUEUE = "engine"
WEBHOOK_QUEUE = "webhooks"
TRACK_JOB = "workers.engine_jobs.track_scan"
DELIVER_JOB = "workers.webhook_jobs.deliver"
JOB_TTL = 24 * 3600
TRACK_JOB_TIMEOUT = 60
# RQ's hard limit for one delivery job; the sweep treats an attempt older than this as abandoned.
DELIVERY_JOB_TIMEOUT = 120


def queue(name: str) -> Queue:
    return Queue(name, connection=runtime.redis())


def tracking_job_id(scan_id: str, generation: int) -> str:
    return f"trk-{scan_id}-{generation}"


def _save_scheduled(q: Queue, pipe, func: str, job_id: str, args: tuple, **options) -> None:
    """Queue.enqueue_at's work for one job but its registry entry (``_due``), in ``pipe``."""
    job = q.create_job(func, args=args, job_id=job_id, status=JobStatus.SCHEDULED, **options)
    job.save(pipeline=pipe)
    if job.ttl:
        pipe.expire(job.key, job.ttl)


def _due(q: Queue, pipe, due: dict[str, float]) -> None:
    """The registry entries of jobs saved by ``_save_scheduled``: one ZADD for all of them."""
    if due:
        pipe.zadd(ScheduledJobRegistry(queue=q).key, due)


def enqueue_tracking(job_ids: dict[str, str], delay_seconds: float | dict[str, float] = 0) -> bool:
    """Enqueue a tracking job per ``{scan_id: job_id}`` in one Redis round trip.

    ``delay_seconds`` is one delay for all, or a delay per scan id.
    """
    if not job_ids:
        return True
    try:
        q = queue(ENGINE_QUEUE)
        now = time.time()
        due = {}
        with runtime.redis().pipeline() as pipe:
            pipe.multi()  # explicit MULTI first: RQ's enqueue with a pipeline expects one
            pipe.sadd(q.redis_queues_keys, q.key)
            for scan_id, job_id in job_ids.items():
                delay = delay_seconds.get(scan_id, 0) if isinstance(delay_seconds, dict) else delay_seconds
                if delay > 0:
                    _save_scheduled(q, pipe, TRACK_JOB, job_id, (scan_id,), result_ttl=0, failure_ttl=JOB_TTL,
                                    ttl=JOB_TTL, timeout=TRACK_JOB_TIMEOUT)
                    due[job_id] = now + delay
                else:
                    q.enqueue(TRACK_JOB, args=(scan_id,), job_id=job_id, result_ttl=0, failure_ttl=JOB_TTL,
                              ttl=JOB_TTL, job_timeout=TRACK_JOB_TIMEOUT, pipeline=pipe)
            _due(q, pipe, due)  # in the same MULTI: no job is ever seen without its entry
            pipe.execute()
        return True
    except RedisError as exc:
        log.warning("could not dispatch %d tracking job(s), the sweep will: %s", len(job_ids), exc)
        return False


def enqueue_delivery(delivery_id: str, job_id: str, delay_seconds: float = 0) -> bool:
    try:
        q = queue(WEBHOOK_QUEUE)
        if delay_seconds > 0:
            with runtime.redis().pipeline() as pipe:
                pipe.sadd(q.redis_queues_keys, q.key)
                _save_scheduled(q, pipe, DELIVER_JOB, job_id, (delivery_id,), result_ttl=0, failure_ttl=JOB_TTL,
                                ttl=JOB_TTL, timeout=DELIVERY_JOB_TIMEOUT)
                _due(q, pipe, {job_id: time.time() + delay_seconds})
                pipe.execute()
        else:
            q.enqueue(DELIVER_JOB, args=(delivery_id,), job_id=job_id, result_ttl=0, failure_ttl=JOB_TTL,
                      ttl=JOB_TTL, job_timeout=DELIVERY_JOB_TIMEOUT)
        return True
    except RedisError as exc:
        log.warning("could not dispatch delivery %s, the sweep will: %s", delivery_id, exc)
        return False
