"""What the watches' scheduler costs (issue 41 item 5), in one process: ``python -m bench.watch_cost``.

Run by the ``watches`` phase (``bench/watchlist.py``) on its database, once the watches are stored.
It runs the periodic ``watches`` job's function (``app.watches.watchlist.run_due``) as a worker
does, from one thread, and times it with the CPU of this process and of its PostgreSQL backend
(the one connection a worker's periodic turn uses; ``pg_backend_pid()``, read from ``/proc``):

- ``--ticks`` runs with nothing due (``now`` a second before the earliest due time): what the
  scheduler costs between due times;
- then ``now`` moved to where ``--due`` watches are due, and ``run_due`` called until none is
  left: each one's scan admitted and submitted to the engine (``ENGINE_URL``, the simulator), its
  next due time written. CPU per due watch.

Prints one JSON object. ``DATABASE_URL``, ``REDIS_URL``, ``ENGINE_URL`` as for a worker.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu_s(pid: int) -> float:
    raw = (Path("/proc") / str(pid) / "stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(step, backend: int) -> dict:
    """Wall, process CPU and backend CPU seconds of ``step()``, and what it returned."""
    wall, own, pg = time.perf_counter(), time.process_time(), backend_cpu_s(backend)
    answer = step()
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - own,
            "pg_cpu_s": backend_cpu_s(backend) - pg, "answer": answer}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.watch_cost", description=__doc__.splitlines()[0])
    p.add_argument("--ticks", type=int, default=200, help="runs of the job with nothing due (default 200)")
    p.add_argument("--due", type=int, default=1000, help="watches made due, then scanned (default 1000)")
    opts = p.parse_args(argv)
    from app import create_app
    from app.extensions import db
    from app.watches import watchlist
    create_app()
    out: dict = {}
    with db.connection_context():
        backend = db.execute_sql("SELECT pg_backend_pid()").fetchone()[0]
        earliest = db.execute_sql("SELECT min(next_scan_at) FROM watch WHERE status = 'active'").fetchone()[0]
        idle_now = earliest - timedelta(seconds=1)
        watchlist.run_due(idle_now)  # warm: plans cached, modules imported
        idle = [measure(lambda: watchlist.run_due(idle_now), backend) for _ in range(opts.ticks)]
        if any(sum(r["answer"].values()) for r in idle):
            raise SystemExit("a watch was due during the idle ticks")
        n = len(idle)
        out["idle_tick"] = {"ticks": n, "wall_ms": round(sum(r["wall_s"] for r in idle) * 1000 / n, 3),
                            "worker_cpu_ms": round(sum(r["cpu_s"] for r in idle) * 1000 / n, 3),
                            "postgres_cpu_ms": round(sum(r["pg_cpu_s"] for r in idle) * 1000 / n, 3)}
        due_now = db.execute_sql("SELECT next_scan_at FROM watch WHERE status = 'active' ORDER BY next_scan_at "
                                 "OFFSET %s LIMIT 1", (opts.due - 1,)).fetchone()[0]
        runs, scanned = [], 0
        while True:
            run = measure(lambda: watchlist.run_due(due_now), backend)
            runs.append(run)
            scanned += run["answer"]["watch_scans"]
            if not sum(run["answer"].values()):
                break
        reports: dict = {}
        for r in runs:
            for k, v in r["answer"].items():
                reports[k] = reports.get(k, 0) + v
        handled = max(1, sum(reports.values()))
        out["due"] = {"watches_due": opts.due, "report": reports, "job_runs": len(runs),
                      "wall_s": round(sum(r["wall_s"] for r in runs), 2),
                      "per_due_watch_ms": {
                          "wall": round(sum(r["wall_s"] for r in runs) * 1000 / handled, 3),
                          "worker_cpu": round(sum(r["cpu_s"] for r in runs) * 1000 / handled, 3),
                          "postgres_cpu": round(sum(r["pg_cpu_s"] for r in runs) * 1000 / handled, 3)}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
