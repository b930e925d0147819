"""Runs RQ jobs and batch looks in the test process on scheduled time, never on wall-clock sleeps.

Jobs scheduled with ``enqueue_in`` wait in RQ's ScheduledJobRegistry. ``run`` moves
the due ones to their queue and works the queues in burst mode with a real
``SimpleWorker``, and runs the batch looks that are due (``app.tracking.looks``, as a
worker's lookers do, when the engine queue is among its queues); when only future work is
left and a freezegun ``freezer`` is given, it moves frozen time to the next scheduled job
or due look, as RQ's scheduler and the lookers would reach it, and goes on.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry

from app.plumbing.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE, promote_due
from app.plumbing.jobs import queue as job_queue
from app.tracking import looks


class JobRunner:
    def __init__(self, connection, queue_names=(ENGINE_QUEUE, WEBHOOK_QUEUE)):
        self.connection = connection
        self.queues = [Queue(name, connection=connection) for name in queue_names]
        self.looks = ENGINE_QUEUE in queue_names
        self.executed = 0
        self.looked = 0  # scans the batch looks took

    def _promote_due(self) -> None:
        now = datetime.now(UTC).timestamp()
        for queue in self.queues:
            promote_due(queue, now)

    def next_scheduled(self) -> float | None:
        times = []
        for queue in self.queues:
            registry = ScheduledJobRegistry(queue=queue)
            first = self.connection.zrange(registry.key, 0, 0, withscores=True)
            if first:
                times.append(first[0][1])
        due = looks.next_due() if self.looks else None
        if due is not None:
            times.append(due.replace(tzinfo=UTC).timestamp())
        return min(times) if times else None

    def _look_due(self) -> bool:
        """Run the due batch looks, and the moves to running callbacks reported, as a looker's
        turn does; whether any scan was looked at or moved."""
        looked = moved = 0
        while self.looks:
            started, claimed = looks.move_reported_starts(), looks.look_due()["claimed"]
            if not (started or claimed):
                break
            looked, moved = looked + claimed, moved + started
        self.looked += looked
        return looked + moved > 0

    def pending(self) -> int:
        return sum(q.count for q in self.queues)

    def run(self, freezer=None, until=None, max_rounds=2000) -> bool:
        """Work until ``until()`` holds (or nothing is left); returns whether it holds."""
        worker = SimpleWorker(self.queues, connection=self.connection)
        for _ in range(max_rounds):
            if until is not None and until():
                return True
            self._promote_due()
            if self.pending():
                before = worker.successful_job_count + worker.failed_job_count
                worker.work(burst=True, with_scheduler=False, logging_level="WARNING")
                self.executed += worker.successful_job_count + worker.failed_job_count - before
                continue
            if self._look_due():
                continue
            upcoming = self.next_scheduled()
            if upcoming is None or freezer is None:
                break
            now = datetime.now(UTC).timestamp()
            freezer.tick(max(0.0, upcoming - now) + 0.001)
        return until() if until is not None else True


def enqueue_old_tracking_job(scan_id, job_id, delay=0.0):
    """A tracking job as the RQ job chains of before the upgrade left them in Redis (D24), due in
    ``delay`` seconds: what the upgrade's hand-over must absorb."""
    q = job_queue(ENGINE_QUEUE)
    if delay:
        q.enqueue_at(datetime.now(UTC) + timedelta(seconds=delay), "workers.engine_jobs.track_scan", scan_id,
                     job_id=job_id)
    else:
        q.enqueue("workers.engine_jobs.track_scan", scan_id, job_id=job_id)
