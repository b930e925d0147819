"""What the phases share: the percentiles and summaries they report, a small API client and bulk
creations to seed with, the scans' statuses, the jobs' figures from the workers' log, when the
simulator's investigation finished, and the workers' start and stop."""
from __future__ import annotations

import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from bench.stack import Stack, local_only, wait_until
from simulator.investigations import decode_id, plan_for


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    data = sorted(values)
    if not data:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(data)))
    return data[rank - 1]


def summary(values, unit_digits: int = 1) -> dict:
    values = [v for v in values if v == v]  # drop NaN
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(percentile(values, 50), unit_digits),
            "p95": round(percentile(values, 95), unit_digits), "p99": round(percentile(values, 99), unit_digits),
            "max": round(max(values), unit_digits), "mean": round(statistics.fmean(values), unit_digits)}


class Api:
    """A tiny client of the API for seeding (not for the measured load: that is wrk)."""

    def __init__(self, base: str, key: str):
        self.base = local_only(base)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def scan(self, target: str) -> dict:
        answer = self.session.post(f"{self.base}/api/v1/scan", json={"target": target, "kind": "email"}, timeout=30)
        if answer.status_code != 202:
            raise RuntimeError(f"creation answered {answer.status_code}: {answer.text[:500]}")
        return answer.json()

    def bulk(self, targets: list[str]) -> dict:
        answer = self.session.post(f"{self.base}/api/v1/scan/bulk",
                                   json={"targets": [{"target": t, "kind": "email"} for t in targets]}, timeout=60)
        if answer.status_code != 202:
            raise RuntimeError(f"bulk creation answered {answer.status_code}: {answer.text[:500]}")
        return answer.json()


def create_scans(api: Api, tag: str, n: int, threads: int = 4) -> tuple[list[str], list[str], float]:
    """Create ``n`` scans in bulk calls of 100, ``threads`` calls at a time; (scan ids, bulk ids, seconds)."""
    chunks = [[f"{tag}.{i}.{k}@example.com" for k in range(min(100, n - i))] for i in range(0, n, 100)]
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        answers = list(pool.map(api.bulk, chunks))
    elapsed = time.monotonic() - started
    return [s["scan_id"] for a in answers for s in a["scans"]], [a["bulk_id"] for a in answers], elapsed


def status_counts(stack: Stack) -> dict:
    return dict(stack.sql("SELECT status, count(*) FROM scan GROUP BY status"))


def job_stats(rows: list[dict], kind: str | None = None) -> dict:
    rows = [r for r in rows if kind is None or r["kind"] == kind]
    if not rows:
        return {"jobs": 0}
    first = min(r["started"] for r in rows)
    last = max(r["started"] + r["exec_ms"] / 1000 for r in rows)
    span = last - first
    return {"jobs": len(rows), "span_s": round(span, 2),
            "jobs_per_s": round(len(rows) / span, 1) if span > 0 else None,
            "exec_ms": summary([r["exec_ms"] for r in rows]), "func_ms": summary([r["func_ms"] for r in rows]),
            "queue_wait_ms": summary([r["wait_ms"] for r in rows])}


def engine_done_ms(engine_id: str, time_scale: float) -> float | None:
    """When the simulator's investigation ``engine_id`` reached ``done``, in unix ms.

    The id carries its creation time and (kind, target), and the plan gives the duration
    at the simulator's time scale (simulator/investigations.py).
    """
    inv = decode_id(engine_id)
    if inv is None:
        return None
    return inv.created_ms + plan_for(inv.kind, inv.target, time_scale).duration_s * 1000


def wait_for_workers(stack: Stack, n: int, queue: str = "engine", timeout: float = 60) -> None:
    """Until ``n`` workers are registered and one holds the scheduler lock of ``queue``."""
    conn = stack.redis()
    wait_until(lambda: conn.scard("rq:workers") >= n and conn.exists(f"rq:scheduler-lock:{queue}"),
               timeout, f"{n} worker(s) and the {queue} scheduler")


def stop_workers(stack: Stack, procs) -> None:
    for proc in procs:
        stack.stop(proc)
