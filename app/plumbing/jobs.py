"""Job dispatch: queue names, job ids, enqueue helpers and the one due-job promoter.

Shared by the services (which enqueue) and the workers (which run the jobs); the app
never imports ``workers``: jobs are referenced by dotted path, so the API process never
imports job code. Dispatch never raises: the
rows it points at are committed first (D13), and a dispatch that Redis refused is
found and redone by the recovery sweep. Committed first by construction: an enqueue called
inside a transaction waits for its commit (``_after_commit``, as warehouse's tasks do), so no
caller has to remember to defer it and none can send a job for rows that may roll back.

A delayed job is put into RQ's ScheduledJobRegistry here (``_save_scheduled``, ``_due``),
not by ``Queue.enqueue_in``: RQ 2.12 writes the registry entry outside the pipeline it
is given (one round trip per job, and for a moment an id without its job) and rounds
the due time down to the whole second (so a job may run up to a second early). Here
a job and its entry go in one pipeline, and an
entry's score is the due time to the millisecond: the workers' scheduler
(``workers.__main__.PreciseScheduler``) runs it then, and RQ's own scheduler
(``rq worker --with-scheduler``) at the next whole second, never early.
"""
from __future__ import annotations

import functools
import logging
import time

from redis.exceptions import RedisError
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

from app.plumbing import runtime
from app.plumbing.db import after_commit, db

log = logging.getLogger(__name__)

ENGINE_QUEUE = "engine"
WEBHOOK_QUEUE = "webhooks"
QUEUES = (ENGINE_QUEUE, WEBHOOK_QUEUE)
DELIVER_JOB = "workers.webhook_jobs.deliver"
FORGET_JOB = "workers.engine_jobs.forget_investigation"
# Seconds between the tries of an engine deletion (D25) after its first; past the last one the
# recovery sweep enqueues it again, so it is retried until the engine answers.
FORGET_RETRY_SCHEDULE = (10, 60, 300, 1800, 3600)
JOB_TTL = 24 * 3600
# RQ's hard limit for one engine deletion job.
FORGET_JOB_TIMEOUT = 60
# RQ's hard limit for one delivery job; the sweep treats an attempt older than this as abandoned.
DELIVERY_JOB_TIMEOUT = 120

ALIVE = {JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED}
FETCH_BATCH = 500


def queue(name: str) -> Queue:
    return Queue(name, connection=runtime.redis())


# --- Job ids: ``<prefix>-<row id>-<number>``; the number is a fencing generation ---------


def _job_number(job_id: str | None) -> int | None:
    """The number a job id ends with (row ids may contain ``-``, numbers do not)."""
    try:
        return int((job_id or "").rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None


def delivery_job_id(delivery_id: str, number: int) -> str:
    """The id of the job that makes attempt ``number`` of a delivery."""
    return f"dlv-{delivery_id}-{number}"


def forget_job_id(deletion_id: str) -> str:
    """The job that asks the engine to delete the investigation of an ``EngineDeletion`` row."""
    return f"fgt-{deletion_id}"


def job_attempt_number(job_id: str | None) -> int | None:
    """The attempt a delivery job id stands for."""
    return _job_number(job_id)


# --- Enqueueing -------------------------------------------------------------------------


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


def _after_commit(send):
    """``send`` once the caller's transaction commits (never if it rolls back), at once outside one.
    Deferred, it returns True: it is on its way, and if Redis refuses it then, the sweep redoes it."""
    @functools.wraps(send)
    def enqueue(*args, **kwargs) -> bool:
        if db.in_transaction():
            after_commit(send, *args, **kwargs)
            return True
        return send(*args, **kwargs)
    return enqueue


@_after_commit
def enqueue_delivery(delivery_id: str, job_id: str | None, delay_seconds: float = 0) -> bool:
    if job_id is None:  # the row's column may be null in type only: a pending delivery always has its job
        raise ValueError(f"delivery {delivery_id} has no job to enqueue")
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


@_after_commit
def enqueue_engine_deletions(deletion_ids: list[str]) -> bool:
    """Enqueue the job of each engine deletion, retried on ``FORGET_RETRY_SCHEDULE``, in one round
    trip. Its argument is the row's id, not the engine id: the engine id stays in the database."""
    if not deletion_ids:
        return True
    try:
        q = queue(ENGINE_QUEUE)
        with runtime.redis().pipeline() as pipe:
            pipe.multi()
            for deletion_id in deletion_ids:
                q.enqueue(FORGET_JOB, args=(deletion_id,), job_id=forget_job_id(deletion_id), result_ttl=0,
                          failure_ttl=JOB_TTL, ttl=JOB_TTL, job_timeout=FORGET_JOB_TIMEOUT,
                          retry=Retry(max=len(FORGET_RETRY_SCHEDULE), interval=list(FORGET_RETRY_SCHEDULE)),
                          pipeline=pipe)
            pipe.execute()
        return True
    except RedisError as exc:
        log.warning("could not dispatch %d engine deletion(s), the sweep will: %s", len(deletion_ids), exc)
        return False


# --- Reading and moving jobs ------------------------------------------------------------


def live_job_ids(job_ids: list[str]) -> set[str]:
    """Those of ``job_ids`` that Redis still holds as waiting to run."""
    alive = set()
    conn = runtime.redis()
    for start in range(0, len(job_ids), FETCH_BATCH):
        chunk = job_ids[start:start + FETCH_BATCH]
        for job_id, job in zip(chunk, Job.fetch_many(chunk, connection=conn)):
            if job is not None and job.get_status(refresh=False) in ALIVE:
                alive.add(job_id)
    return alive


def promote_due(q: Queue, before: float) -> int:
    """Move the scheduled jobs of ``q`` due at ``before`` (a Unix time) to the queue, in one
    pipeline; returns how many moved. The one promoter: the workers' scheduler, the
    recovery sweep and the tests' job runner all call this."""
    conn = q.connection
    registry = ScheduledJobRegistry(queue=q)
    job_ids = registry.get_jobs_to_schedule(before)  # type: ignore[arg-type]  # a score: fractions count
    if not job_ids:
        return 0
    moved = 0
    with conn.pipeline() as pipe:
        for job in Job.fetch_many(job_ids, connection=conn, serializer=q.serializer):
            if job is not None:
                # Public ``enqueue_job``: our jobs have no dependencies, so it adds no round trip
                # to what RQ's own scheduler does with the private ``_enqueue_job``.
                q.enqueue_job(job, pipeline=pipe, at_front=job.should_enqueue_at_front())
                moved += 1
        for job_id in job_ids:
            registry.remove(job_id, pipeline=pipe)
        pipe.execute()
    return moved


def workers_alive() -> int | None:
    """How many workers are registered and beating (RQ's registry); None when Redis does not answer."""
    from redis.exceptions import RedisError
    from rq import Worker
    try:
        return Worker.count(connection=runtime.redis())
    except RedisError:
        return None
