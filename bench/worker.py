"""``python -m workers`` with a per-job timing log, for the benchmark.

It runs the real worker (``workers.__main__.main``: ScanWorker, its RQ scheduler, the
recovery sweep) unchanged, and only wraps two things to time them:
- ``ScanWorker.execute_job``: one job as RQ runs it, its own bookkeeping included;
- the job functions ``track_scan`` and ``deliver`` (RQ imports them by dotted path
  when it runs a job, so it finds the wrapped ones).

Each job appends one line to ``--jobs-log``:
``kind,started_unix,exec_ms,func_ms,queue_wait_ms`` where ``queue_wait_ms`` is the
time from the job's ``enqueued_at`` (the scheduler moving it to its queue, or an
immediate enqueue) to the start of its execution.

With ``--looks-log``, ``app.tracking.looks.look_due`` (the batch look, D24, run by the
worker's looker thread) is wrapped too, before the worker's modules import it: each call
that claimed scans appends
``started_unix,exec_ms,claimed,engine_requests,completed,failed,unfinished,LAGS`` where LAGS
is each claimed scan's lag past its due time in integer milliseconds, space-separated.

    python -m bench.worker --queues engine,webhooks --jobs-log /tmp/jobs.csv [--looks-log F] [--burst] [--name N]
"""
from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from datetime import UTC

_func_ms = threading.local()


def _timed_function(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            _func_ms.value = (time.perf_counter() - started) * 1000
    return wrapper


def install(jobs_log: str) -> None:
    import workers.engine_jobs as engine_jobs
    import workers.webhook_jobs as webhook_jobs
    from workers.__main__ import ScanWorker

    engine_jobs.track_scan = _timed_function(engine_jobs.track_scan)
    webhook_jobs.deliver = _timed_function(webhook_jobs.deliver)
    out = open(jobs_log, "a", buffering=1)  # a line per job, flushed as written
    original = ScanWorker.execute_job

    def execute_job(self, job, queue):
        started_wall, started = time.time(), time.perf_counter()
        _func_ms.value = float("nan")
        try:
            return original(self, job, queue)
        finally:
            exec_ms = (time.perf_counter() - started) * 1000
            enqueued = job.enqueued_at
            wait_ms = ((started_wall - enqueued.replace(tzinfo=UTC).timestamp()) * 1000
                       if enqueued is not None else float("nan"))
            kind = job.id.split("-", 1)[0]  # trk / dlv
            out.write(f"{kind},{started_wall:.3f},{exec_ms:.2f},{_func_ms.value:.2f},{wait_ms:.1f}\n")

    ScanWorker.execute_job = execute_job


def install_looks(looks_log: str) -> bool:
    """Wrap ``look_due`` when this code base has it (False when not: no batch look yet)."""
    try:
        import app.tracking.looks as looks
    except ImportError:
        return False
    out = open(looks_log, "a", buffering=1)
    lock = threading.Lock()
    original = looks.look_due

    @functools.wraps(original)
    def look_due(*args, **kwargs):
        started_wall, started = time.time(), time.perf_counter()
        answer = original(*args, **kwargs)
        exec_ms = (time.perf_counter() - started) * 1000
        if answer.get("claimed"):
            lags = " ".join(str(max(0, round(lag * 1000))) for lag in answer.get("lags", ()))
            line = (f"{started_wall:.3f},{exec_ms:.2f},{answer['claimed']},{answer.get('engine_requests', 0)},"
                    f"{answer.get('completed', 0)},{answer.get('failed', 0)},{answer.get('unfinished', 0)},{lags}\n")
            with lock:  # several looker threads may share the file
                out.write(line)
        return answer

    looks.look_due = look_due
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("--jobs-log", default=None)
    parser.add_argument("--looks-log", default=None)
    args, rest = parser.parse_known_args(argv)
    if args.looks_log:
        install_looks(args.looks_log)  # first: the worker's modules may import look_due by name
    if args.jobs_log:
        install(args.jobs_log)
    from workers.__main__ import main as worker_main
    return worker_main(rest)


if __name__ == "__main__":
    sys.exit(main())
