"""The scale phase: many scans in flight, tracked by two worker processes (issue 32, D24).

Each run starts from an empty schema and a flushed Redis db, a simulator at its real
durations (scans of 60 to 180 s), the API and two workers, all with
``ENGINE_POLL_SECONDS`` = ``--scale-poll``. The one mode now is ``auto``; ``off`` (an RQ job
per scan, ``ENGINE_BATCH_LOOK=off``) is gone with that setting, and what is said of it below
describes the runs that compared the two (docs/performance.md):

- ``auto``: the batch look (``app.tracking.looks.look_due``, claimed from PostgreSQL by the
  workers' looker threads); ``bench.worker`` logs every batch it claimed: its lags (seconds
  past each scan's due time), engine requests and outcomes;
- ``off``: today's tracking, an RQ job per scan chained with ``enqueue_in``; the lag of a look
  is its job's wait in the queue after the scheduler moved it there when due (``bench.worker``'s
  job log; the scheduler moves due jobs every 0.2 s, not counted).

How the scans are created (``--scale-seed``): ``api`` through the API's bulk creation (100 a
call, ``--scale-seed-threads`` at a time): real admissions, engine submissions and whatever
creation does to schedule the first look (a job, or ``next_look_at``). On this machine that is
about 1,000 scans a second, so 100,000 take longer than the shortest scan lasts (60 s) and
would never all be in flight at once. ``sql`` (the default for ``auto``): the engine
submissions are real (batches of 100 to the simulator, which then answers for 60-180 s
investigations), and each chunk of 5,000 is written at once with ``COPY`` as creation writes
it: the scan rows (queued, engine id, recipes, eta, ``next_look_at`` at min(eta - 0.5 s, poll)
after the submission, as ``app.tracking.states.first_look_delay``) and the customer's
in-flight counter; the admission's charge, quota counter and ledger row are left out (they
are not tracking's). ``off`` always uses ``api``: its scans need their RQ jobs.

A sampler records every ``SAMPLE_S`` s: the scans in flight (the customers' counters), Redis ``used_memory`` and queue sizes,
the simulator's call counters (``/_sim/engine/stats``) and batch-look volume
(``/_sim/engine/volume``), and the CPU seconds of the workers, API, simulator, PostgreSQL and
Redis (``bench.cpu``). The run ends when every scan is final (or ``--scale-max-s``).

The figures that the goals compare are taken over the *steady window*: from the end of the
creation plus one poll (every scan has had its first look scheduled) until fewer than 90% of
the scans are still in flight (the shortest scans end 60 s after creation). Looks over the
whole run are reported beside.

An ``off`` run stops ``--scale-off-max-s`` after its creation began (default 150 s): two
processes fall far behind a job per scan, and its figures per scan and per look are what it is
there for. ``--scale-mode both`` runs ``off`` first at ``--scale-off-scans`` (today's tracking cannot hold
100,000 scans on two processes, nor 190 MB of Redis in a bench), then ``auto`` at
``--scale-scans``; today's per-scan figures (Redis bytes per scan in flight, engine requests
per look, worker CPU per look, looks per second per worker process) are scaled to
``--scale-scans`` at the same poll and labelled extrapolated. The ledger's bytes per read
(``bench.ledger_bytes``: a row per read as before D24, against reads summed per minute) are
measured on the same database after the runs.
"""
from __future__ import annotations

import io
import json
import math
import random
import secrets
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg2
import requests

from bench import cpu
from bench.stack import (
    BIN,
    DATABASE,
    DATABASE_URL,
    ENGINE_TOKEN,
    PG_DSN,
    REDIS_URL,
    ROOT,
    Stack,
    jobs_from_log,
    local_only,
    wait_until,
)

SAMPLE_S = 1.0
STEADY_FRACTION = 0.9
# Goals of issue 32 (item 3).
MAX_WORKERS = 2
MAX_LAG_P95_S = 2.0
MAX_REDIS_BYTES = 50 * 1024 * 1024
REQUESTS_DIVISOR = 50  # engine requests per second at most in flight / (50 x poll)
MIN_LEDGER_FACTOR = 100.0


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    data = sorted(values)
    return data[max(1, math.ceil(q / 100 * len(data))) - 1]


def lag_summary(lags_s: list[float]) -> dict:
    if not lags_s:
        return {"n": 0}
    return {"n": len(lags_s), "p50_s": round(percentile(lags_s, 50), 3), "p95_s": round(percentile(lags_s, 95), 3),
            "p99_s": round(percentile(lags_s, 99), 3), "max_s": round(max(lags_s), 3)}


class ScaleSampler(threading.Thread):
    def __init__(self, stack: Stack, sim: str, groups: dict[str, int], interval: float = SAMPLE_S,
                 callbacks: bool = False):
        super().__init__(daemon=True)
        self.stack, self.sim, self.groups, self.interval = stack, sim, groups, interval
        self.callbacks = callbacks
        self.database_backends = cpu.DatabaseBackends(DATABASE)
        self.rows: list[dict] = []
        self.errors = 0
        self.stopping = threading.Event()
        self.http = requests.Session()

    def sample(self) -> dict:
        conn = self.stack.redis()
        t = time.time()
        # The customers' in-flight counters (kept by creation and by the final states), not a
        # count of ``scan``: counting 100,000 rows every second cost PostgreSQL 0.12 of a core.
        [(in_flight,)] = self.stack.sql("SELECT COALESCE(sum(in_flight), 0) FROM customer")
        stats = self.http.get(f"{self.sim}/_sim/engine/stats", timeout=5).json()
        volume = self.http.get(f"{self.sim}/_sim/engine/volume", timeout=5).json()
        row = {"t": t, "in_flight": int(in_flight),
               "redis_used_memory": conn.info("memory")["used_memory"], "redis_keys": conn.dbsize(),
               "engine_queue": conn.llen("rq:queue:engine"), "engine_scheduled": conn.zcard("rq:scheduled:engine"),
               "sim_submit_calls": stats["submit"] + stats["batch"],
               "sim_look_calls": stats["status"] + stats["looks"], "sim_ids_looked": volume["looked"],
               # Looks counted as scan ids looked at, one by one (E1's status) or in a batch (E6).
               "sim_ids_looked_any": volume["looked"] + stats["status"]}
        if self.callbacks:
            sent = self.http.get(f"{self.sim}/_sim/engine/callbacks", timeout=5).json()
            row.update(callbacks_sent=sent["sent"], callbacks_failed=sent["failed"],
                       callbacks_scheduled=sent["scheduled"])
        for name, seconds in cpu.snapshot(self.groups).items():
            row[f"cpu_{name}"] = round(seconds, 2)
        # PostgreSQL's backends of this bench's database only: ``cpu_postgres`` counts every
        # client of the machine's server, other helpers' tests too.
        row["cpu_postgres_db"] = round(self.database_backends.total(), 2)
        return row

    def run(self):
        while not self.stopping.is_set():
            try:
                self.rows.append(self.sample())
            except Exception:  # a sample lost is no reason to stop sampling; counted
                self.errors += 1
            self.stopping.wait(self.interval)

    def stop(self):
        self.stopping.set()
        self.join(15)


def looks_from_log(path: Path) -> list[dict]:
    """``bench.worker``'s batch-look lines: ``started,exec_ms,claimed,requests,completed,failed,unfinished,lags``."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) < 8:
            continue
        rows.append({"started": float(fields[0]), "exec_ms": float(fields[1]), "claimed": int(fields[2]),
                     "requests": int(fields[3]), "completed": int(fields[4]), "failed": int(fields[5]),
                     "unfinished": int(fields[6]),
                     "lags": [int(v) / 1000 for v in fields[7].split()] if fields[7] else []})
    return rows


def _rate(rows: list[dict], key: str) -> float:
    if len(rows) < 2 or rows[-1]["t"] <= rows[0]["t"]:
        return float("nan")
    return (rows[-1][key] - rows[0][key]) / (rows[-1]["t"] - rows[0]["t"])


def _window(rows: list[dict], start: float, n: int) -> list[dict]:
    """The steady window's samples: from ``start`` while at least 90% of the scans are in flight."""
    out = []
    for row in rows:
        if row["t"] < start:
            continue
        if row["in_flight"] < STEADY_FRACTION * n:
            break
        out.append(row)
    return out


def _figures(rows: list[dict], n: int, poll: float, worker_groups: list[str]) -> dict:
    """Rates over ``rows`` (the window's samples): engine calls, ids looked at, CPU by component."""
    if len(rows) < 2:
        return {"samples": len(rows)}
    span = rows[-1]["t"] - rows[0]["t"]
    in_flight = sum(r["in_flight"] for r in rows) / len(rows)
    look_calls = _rate(rows, "sim_look_calls")
    figures = {"samples": len(rows), "span_s": round(span, 1), "in_flight_mean": round(in_flight),
               "engine_look_requests_per_s": round(look_calls, 2),
               "engine_submit_requests_per_s": round(_rate(rows, "sim_submit_calls"), 2),
               "ids_per_batch_look": (round((rows[-1]["sim_ids_looked"] - rows[0]["sim_ids_looked"])
                                            / max(1, rows[-1]["sim_look_calls"] - rows[0]["sim_look_calls"]), 1)),
               "engine_requests_goal_per_s": round(in_flight / (REQUESTS_DIVISOR * poll), 2),
               "redis_used_memory_peak": max(r["redis_used_memory"] for r in rows)}
    cores = {}
    for key in rows[0]:
        if key.startswith("cpu_"):
            cores[key[4:]] = round((rows[-1][key] - rows[0][key]) / span, 3)
    cores["workers"] = round(sum(cores.get(g, 0) for g in worker_groups), 3)
    figures["cpu_cores"] = cores
    return figures


def run(stack: Stack, opts, out: Path, log, mode: str, n: int) -> dict:
    poll, scale = opts.scale_poll, opts.scale_time_scale
    stack.reset_database()
    stack.flush_redis()
    calls_back = mode == "callbacks"
    secret = callback_secret() if calls_back else None
    sim = stack.start_simulator(scale, f"sim-scale-{mode}", **({"ENGINE_CALLBACK_SECRET": secret} if secret else {}))
    env = {"ENGINE_POLL_SECONDS": poll, "ENGINE_BATCH_SIZE": opts.scale_batch_size}
    api_url, api_proc = stack.start_api(sim, f"api-scale-{mode}", callback_secret=secret, **env)
    if calls_back:  # the workers' settings as the API's (a look follows the scan's own flag)
        env.update(ENGINE_CALLBACK_URL=stack.callback_url(api_url), ENGINE_CALLBACK_SECRET=secret)
    owners = stack.customers(opts.scale_customers, f"bench-scale-{mode}")
    customer_id, key = owners[0]
    seed = "api" if mode == "off" else opts.scale_seed
    job_logs = [stack.logdir / f"jobs-scale-{mode}-{i}.csv" for i in range(MAX_WORKERS)]
    look_logs = [stack.logdir / f"looks-scale-{mode}-{i}.csv" for i in range(MAX_WORKERS)]
    workers = [stack.start_worker(sim, f"worker-scale-{mode}-{i}", jobs_log=job_logs[i], looks_log=look_logs[i],
                                  **env) for i in range(MAX_WORKERS)]
    from bench.measure import Api, create_scans, stop_workers, wait_for_workers
    wait_for_workers(stack, MAX_WORKERS)
    time.sleep(1)
    memory_before = stack.redis().info("memory")["used_memory"]
    worker_groups = [w.name for w in workers]
    groups = {w.name: w.pid for w in workers}
    groups.update(api=api_proc.pid, simulator=next(p.pid for p in stack.procs if p.name == f"sim-scale-{mode}"))
    sampler = ScaleSampler(stack, sim, groups, callbacks=calls_back)
    sampler.start()
    how = (f"through the API (bulk calls of 100, {opts.scale_seed_threads} at a time)" if seed == "api" else
           f"by batch submissions to the simulator and COPY in chunks of {SEED_CHUNK}"
           + (", first looks spread over one poll" if opts.scale_spread else ""))
    log(f"[{mode}] creating {n} scans of {60 * scale:g} to {180 * scale:g} s {how}, poll {poll:g} s, "
        f"{MAX_WORKERS} workers")
    started = time.time()
    if seed == "api":
        _, _, created_s = create_scans(Api(api_url, key), f"scale-{mode}", n, threads=opts.scale_seed_threads)
    else:
        created_s = seed_sql(sim, [c for c, _ in owners], n, poll, max(4, opts.scale_seed_threads), f"scale-{mode}",
                             spread=opts.scale_spread,
                             callback_url=stack.callback_url(api_url) if calls_back else None)
    created_at = time.time()
    spies = []
    if opts.scale_profile:
        # Worker 0 by wall clock (idle frames too: where the looker threads wait), worker 1 by CPU
        # (holding the GIL), over the steady window's start.
        exe = str(BIN / "py-spy")
        for worker, what in zip(workers, ("wall", "cpu")):
            spies.append(subprocess.Popen(
                [exe, "record", "--pid", str(worker.pid), "--nonblocking", "--rate", "100",
                 "--duration", str(int(opts.scale_profile)), "--format", "raw",
                 "--output", str(out / f"profile-scale-{mode}-{what}.txt"), *(["--idle"] if what == "wall" else ["--gil"])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    log(f"[{mode}] {n} scans created in {created_s:.1f} s ({n / created_s:.0f}/s); waiting until all are final")
    if not calls_back:  # with callbacks the API stays: it takes them
        stack.stop(api_proc)

    def all_final():
        rows = sampler.rows
        return bool(rows) and rows[-1]["t"] > created_at and rows[-1]["in_flight"] == 0
    try:
        limit = opts.scale_max_s if mode != "off" else min(opts.scale_max_s, opts.scale_off_max_s)
        wait_until(all_final, max(1.0, limit - (time.time() - started)), "every scan final", 1.0)
        timed_out = False
    except Exception:  # a run that cannot keep up still reports what it measured
        timed_out = True
        log(f"[{mode}] not every scan final {limit:g} s after the creation began: stopping there")
    finished_s = time.time() - started
    for spy in spies:
        spy.wait(opts.scale_profile + 30)
    time.sleep(SAMPLE_S * 1.5)
    sampler.stop()
    stop_workers(stack, workers)
    rows = sampler.rows
    if rows:
        keys = list(rows[0])
        (out / f"scale-{mode}-timeseries.csv").write_text(
            ",".join(keys) + "\n" + "\n".join(",".join(f"{r[k]:.3f}" if k == "t" else str(r[k]) for k in keys)
                                              for r in rows) + "\n")
    window_start = created_at + poll
    steady = _window(rows, window_start, n)
    steady_end = steady[-1]["t"] if steady else window_start
    looks = [r for path in look_logs for r in looks_from_log(path)]
    jobs = [r for path in job_logs for r in jobs_from_log(path) if r["kind"] == "trk"]
    if mode != "off":
        all_lags = [lag for r in looks for lag in r["lags"]]
        steady_lags = [lag for r in looks if window_start <= r["started"] <= steady_end for lag in r["lags"]]
        looks_done = sum(r["claimed"] for r in looks)
        tracking = {"batches": len(looks), "looks": looks_done,
                    "scans_per_batch": round(looks_done / len(looks), 1) if looks else None,
                    "engine_requests_by_looker": sum(r["requests"] for r in looks),
                    "batch_ms": lag_summary([r["exec_ms"] / 1000 for r in looks])}
    else:
        all_lags = [r["wait_ms"] / 1000 for r in jobs]
        steady_lags = [r["wait_ms"] / 1000 for r in jobs if window_start <= r["started"] <= steady_end]
        looks_done = len(jobs)
        spans = [r["started"] for r in jobs]
        busy_s = (max(spans) - min(spans)) if len(spans) > 1 else 0
        tracking = {"jobs": len(jobs), "looks": looks_done,
                    "looks_per_s_while_busy": round(looks_done / busy_s, 1) if busy_s else None,
                    "job_ms": lag_summary([r["exec_ms"] / 1000 for r in jobs])}
    whole = _figures([r for r in rows if r["t"] >= created_at], n, poll, worker_groups)
    window = _figures(steady, n, poll, worker_groups)
    worker_cpu_s = (sum(rows[-1][f"cpu_{g}"] - rows[0][f"cpu_{g}"] for g in worker_groups) if len(rows) > 1 else 0)
    in_flight_peak = max((r["in_flight"] for r in rows), default=0)
    peak_memory = max((r["redis_used_memory"] for r in rows), default=memory_before)
    final = dict(stack.sql("SELECT status, count(*) FROM scan GROUP BY status"))
    # Every look ends a scan's wait or moves its due time: looks per second while steady.
    steady_looks = (sum(r["claimed"] for r in looks if window_start <= r["started"] <= steady_end) if mode != "off"
                    else sum(1 for r in jobs if window_start <= r["started"] <= steady_end))
    steady_span = window.get("span_s") or 0
    after = [r for r in rows if r["t"] >= created_at]
    return {
        **per_completed_scan(stack, after, worker_groups, scale, calls_back),
        "mode": mode, "scans": n, "time_scale": scale, "engine_poll_seconds": poll,
        "batch_size": opts.scale_batch_size if mode != "off" else None, "worker_processes": MAX_WORKERS,
        "seeding": {"how": how, "seconds": round(created_s, 1), "scans_per_s": round(n / created_s)},
        "all_final_s": round(finished_s, 1), "timed_out": timed_out, "final": final,
        "peak_in_flight": in_flight_peak, "sampler_errors": sampler.errors,
        "steady_window": {"from_s_after_creation": round(poll, 1), "span_s": steady_span,
                          "looks_per_s": round(steady_looks / steady_span, 1) if steady_span else None,
                          "lag": lag_summary(steady_lags), **window},
        "whole_run": {"lag": lag_summary(all_lags), **whole},
        "tracking": tracking,
        "worker_cpu_s": round(worker_cpu_s, 1),
        "worker_cpu_ms_per_look": round(worker_cpu_s * 1000 / looks_done, 3) if looks_done else None,
        "redis_used_memory_before": memory_before, "redis_used_memory_peak": peak_memory,
        "redis_bytes_per_scan_in_flight": round((peak_memory - memory_before) / max(1, in_flight_peak)),
        "database_bytes_scan": stack.sql("SELECT pg_total_relation_size('scan')")[0][0],
    }


SEED_CHUNK = 5000
# Goals of issue 40 (item 5).
MAX_FINAL_AFTER_DONE_P95_S = 2.0
MAX_LOOKS_PER_SCAN = {"callbacks": 1.5, "auto": 3.0}
# Round 8's scale runs (docs/performance.md, "Round 8"), for CPU per completed scan beside today's:
# CPU per look of `r8-spread25k` (25,000 in flight, workers 0.20 ms, PostgreSQL 0.37 ms) times
# the looks a scan of 60-180 s had at a 10 s poll (about 12: issue 40's count).
ROUND8_CPU_MS_PER_LOOK = {"workers": 0.20, "postgres": 0.37}
ROUND8_LOOKS_PER_SCAN = 12


def callback_secret() -> str:
    """A fresh ``whsec_`` secret the simulator signs its callbacks with (E7)."""
    import base64
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def per_completed_scan(stack: Stack, rows: list[dict], worker_groups: list[str], scale: float,
                       calls_back: bool) -> dict:
    """Issue 40's figures over the run after the creation: looks (scan ids looked at, one by one
    or in a batch) per scan that reached its final state, the final state's delay after the engine
    finished it, and CPU per final scan (workers + PostgreSQL's backends of this database, + the
    API that takes the callbacks)."""
    from bench.measure import engine_done_ms, summary
    finals = stack.sql("SELECT engine_id, extract(epoch from COALESCE(completed_at, failed_at)) * 1000 FROM scan "
                       "WHERE status IN ('completed', 'failed') AND engine_id IS NOT NULL")
    delays = []
    for engine_id, final_ms in finals:
        done = engine_done_ms(engine_id, scale)
        if done is not None:
            delays.append((float(final_ms) - done) / 1000)
    n = len(finals)
    if len(rows) < 2 or not n:
        return {"final_scans": n}
    first, last = rows[0], rows[-1]

    def spent(key):
        return last.get(key, 0) - first.get(key, 0)
    workers_s = sum(spent(f"cpu_{g}") for g in worker_groups)
    cpu_s = {"workers": workers_s, "postgres_db": spent("cpu_postgres_db"), "postgres_all": spent("cpu_postgres"),
             "api": spent("cpu_api") if calls_back else 0.0, "simulator": spent("cpu_simulator")}
    figures = {
        "final_scans": n,
        "looks_per_final_scan": round(spent("sim_ids_looked_any") / n, 2),
        "final_after_engine_done_s": {k: (round(v, 3) if isinstance(v, float) else v)
                                      for k, v in summary(delays, 3).items()},
        "cpu_ms_per_final_scan": {k: round(v * 1000 / n, 3) for k, v in cpu_s.items()},
    }
    figures["cpu_ms_per_final_scan"]["service"] = round(
        (workers_s + cpu_s["postgres_db"] + cpu_s["api"]) * 1000 / n, 3)
    if calls_back:
        sent = spent("callbacks_sent")
        figures["callbacks"] = {"sent": sent, "failed": spent("callbacks_failed"),
                                "per_final_scan": round(sent / n, 2),
                                "scheduled_peak": max(r.get("callbacks_scheduled", 0) for r in rows),
                                # What one callback costs the API (all it does in the run is take them).
                                "api_cpu_ms_per_callback": round(cpu_s["api"] * 1000 / sent, 3) if sent else None}
    return figures


def _has_column(table: str, column: str) -> bool:
    conn = psycopg2.connect(PG_DSN)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
                        "AND column_name = %s", (table, column))
            return cur.fetchone() is not None
    finally:
        conn.close()


def seed_sql(sim: str, customer_ids: list[str], n: int, poll: float, threads: int, tag: str, *, spread: bool = False,
             callback_url: str | None = None) -> float:
    """``n`` scans in flight: real batch submissions to the simulator, rows written with COPY
    (see the module's docstring). With ``spread``, each first look falls at a random point of
    the next ``poll`` seconds (scans created in a steady stream, not all in a few seconds).
    Returns the seconds it took."""
    from app.tracking.states import first_look_delay
    conn = psycopg2.connect(PG_DSN)
    with conn.cursor() as cur:
        cur.execute("SELECT customer_id, min(id) FROM api_key WHERE customer_id = ANY(%s) GROUP BY 1",
                    (customer_ids,))
        key_of = dict(cur.fetchall())
    conn.commit()
    with_next_look = _has_column("scan", "next_look_at")
    with_callbacks = _has_column("scan", "callbacks")
    columns = ["id", "customer_id", "api_key_id", "kind", "target", "status", "engine_id", "recipes_total",
               "recipes_done", "eta_at", "created_at", "check_errors", "livemode"]
    if with_next_look:
        columns.append("next_look_at")
    if with_callbacks:
        columns.append("callbacks")
    extra = {"callback_url": local_only(callback_url)} if callback_url else {}
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {ENGINE_TOKEN}"
    url = local_only(f"{sim}/v1/investigations/batch")

    def submit(first: int) -> list[str]:
        ids = [f"scn_{secrets.token_urlsafe(16)}" for _ in range(min(100, n - first))]
        targets = [f"{tag}.{first + i}@example.com" for i in range(len(ids))]
        answer = http.post(url, json={"items": [{"kind": "email", "target": t, "reference": i, **extra}
                                                for i, t in zip(ids, targets)]}, timeout=60)
        answer.raise_for_status()
        now = datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as the service stores times
        lines = []
        for scan_id, target, item in zip(ids, targets, answer.json()["items"]):
            eta = item["eta_seconds"]
            customer_id = customer_ids[hash(scan_id) % len(customer_ids)]  # the scans spread over the customers
            row = [scan_id, customer_id, key_of[customer_id], "email", target, "queued", item["id"], str(item["recipes"]), "0",
                   (now + timedelta(seconds=eta)).isoformat(), now.isoformat(), "0", "t"]
            calls_back = bool(item.get("callbacks"))  # E7: the engine said it will call back
            if with_next_look:
                # Spread only without callbacks: with them creation schedules no look before the
                # eta (one poll past it, the safety net), and a spread early look would be a look a
                # scan never has, counted against the looks per scan (2 at least, not 1).
                delay = (random.uniform(0, poll) if spread and not calls_back  # noqa: S311 - a spread, not a secret
                         # (a code base before E7, round 8's, has no ``callbacks``)
                         else first_look_delay(eta, poll, **({"callbacks": True} if calls_back else {})))
                row.append((now + timedelta(seconds=delay)).isoformat())
            if with_callbacks:
                row.append("t" if calls_back else "f")
            lines.append("\t".join(row))
        return lines

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for chunk in range(0, n, SEED_CHUNK):
            lines = [line for part in pool.map(submit, range(chunk, min(n, chunk + SEED_CHUNK), 100))
                     for line in part]
            with conn.cursor() as cur:
                cur.copy_expert(f"COPY scan ({', '.join(columns)}) FROM STDIN", io.StringIO("\n".join(lines) + "\n"))
                owners = Counter(line.split("\t", 2)[1] for line in lines)
                for owner, count in owners.items():
                    cur.execute("UPDATE customer SET in_flight = in_flight + %s WHERE id = %s", (count, owner))
            conn.commit()
    conn.close()
    return time.monotonic() - started


def ledger_bytes(stack: Stack, reads: int, per_minute: int) -> dict:
    """``bench.ledger_bytes`` on database ``bench`` (the scale runs are over; the next phase recreates it)."""
    cmd = [str(BIN / "python"), "-m", "bench.ledger_bytes", "--database-url", DATABASE_URL, "--redis-url", REDIS_URL,
           "-n", str(reads), "--per-minute", str(per_minute)]
    stack.reset_database()
    done = subprocess.run(cmd, cwd=ROOT, env=stack.env("development", ENGINE_URL="http://127.0.0.1:9"),
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    figures = json.loads(done.stdout[done.stdout.index("{"):])
    before = figures["row per read"]["bytes_per_read"]
    summed = figures[f"summed, {per_minute} a minute"]["bytes_per_read"]
    figures["factor"] = round(before / summed, 1) if summed else None
    # The summed shape's cost is per row (a customer, mode, endpoint and minute), so the factor
    # grows with the reads a row sums: the rate from which it reaches the goal.
    figures["summed_row_bytes"] = round(summed * per_minute)
    figures["reads_a_minute_for_100x"] = math.ceil(MIN_LEDGER_FACTOR * summed * per_minute / before) if before else None
    return figures


def extrapolate(today: dict, n: int, poll: float) -> dict:
    """Today's (``off``) per-scan and per-look figures scaled to ``n`` scans in flight at ``poll``."""
    looks_per_s = n / poll  # every scan in flight is looked at once a poll
    window = today["steady_window"]
    req_per_look = (window.get("engine_look_requests_per_s") or 0) / window["looks_per_s"] \
        if window.get("looks_per_s") else 1.0
    per_process = (today["tracking"].get("looks_per_s_while_busy") or 0) / MAX_WORKERS
    cpu_ms = today["worker_cpu_ms_per_look"] or 0
    return {"extrapolated": True, "from_scans": today["scans"], "to_scans": n, "engine_poll_seconds": poll,
            "looks_per_s": round(looks_per_s),
            "redis_bytes": today["redis_bytes_per_scan_in_flight"] * n,
            "engine_requests_per_s": round(looks_per_s * req_per_look),
            "engine_requests_per_look": round(req_per_look, 3),
            "worker_cpu_cores": round(looks_per_s * cpu_ms / 1000, 2),
            "worker_processes": math.ceil(looks_per_s / per_process) if per_process else None}


def goals(result: dict, n: int, poll: float) -> list[dict]:
    """Each goal of issue 32 item 3: today's figure, the new one, met or not."""
    auto, off, today = result.get("auto"), result.get("off"), result.get("off_extrapolated") or {}
    rows = []

    def row(goal, target, value, met, today_value):
        rows.append({"goal": goal, "target": target, "value": value, "met": met, "today": today_value})
    if auto:
        w = auto["steady_window"]
        p95 = w["lag"].get("p95_s")
        row(f"{MAX_WORKERS} worker processes keep every scan looked at on time: lag p95 (steady window)",
            f"< {MAX_LAG_P95_S:g} s", p95, p95 is not None and p95 < MAX_LAG_P95_S and not auto["timed_out"],
            f"{off['steady_window']['lag'].get('p95_s')} s p95 at {off['scans']:,} in flight; "
            f"{today['worker_processes']} processes needed at {n:,} (extrapolated)" if off else None)
        peak = auto["redis_used_memory_peak"]
        row("Redis used_memory at the peak", f"< {MAX_REDIS_BYTES / 2**20:g} MB", f"{peak / 2**20:.1f} MB",
            peak < MAX_REDIS_BYTES,
            f"{today['redis_bytes'] / 2**20:.0f} MB (extrapolated: {off['redis_bytes_per_scan_in_flight']} B per scan "
            f"in flight)" if off else None)
        rate, limit = w.get("engine_look_requests_per_s"), w.get("engine_requests_goal_per_s")
        row("engine look requests per second (steady window)", f"<= in flight / (50 x poll) = {limit}", rate,
            rate is not None and limit is not None and rate <= limit,
            f"{today['engine_requests_per_s']}/s (extrapolated)" if off else None)
    ledger = result.get("ledger_bytes") or {}
    if "factor" in ledger:
        before = ledger["row per read"]["bytes_per_read"]
        key = next(k for k in ledger if k.startswith("summed") and not k.endswith(" 1 a minute"))
        row(f"ledger bytes per read ({key})", f">= {MIN_LEDGER_FACTOR:g}x fewer than today",
            f"{ledger[key]['bytes_per_read']} B ({ledger['factor']}x fewer)", ledger["factor"] >= MIN_LEDGER_FACTOR,
            f"{before} B (a row per read)")
    return rows


def scale_phase(stack: Stack, opts, out: Path, log) -> dict:
    # ``off`` (an RQ job per scan) is gone with ENGINE_BATCH_LOOK; ``auto`` is the batch looks that
    # follow the eta, ``callbacks`` the same with the engine calling back (E7, issue 40).
    modes = ["callbacks", "auto"] if opts.scale_mode == "both" else [opts.scale_mode]
    result: dict = {"poll": opts.scale_poll}
    for mode in modes:
        n = opts.scale_eta_scans if (mode == "auto" and opts.scale_mode == "both") else opts.scale_scans
        result[mode] = run(stack, opts, out, log, mode, n)
        stack.stop_all()
    if "off" in result:
        result["off_extrapolated"] = extrapolate(result["off"], opts.scale_scans, opts.scale_poll)
    if opts.scale_ledger_reads:
        log(f"ledger bytes per read ({opts.scale_ledger_reads} reads a shape)")
        result["ledger_bytes"] = ledger_bytes(stack, opts.scale_ledger_reads, opts.scale_ledger_per_minute)
    result["goals"] = goals(result, result["auto"]["scans"] if "auto" in result else opts.scale_scans,
                            opts.scale_poll) + callback_goals(result)
    return result


def callback_goals(result: dict) -> list[dict]:
    """Issue 40 item 5: each run's final-state delay, looks and CPU per final scan beside round 8's."""
    rows = []
    round8 = (f"{ROUND8_LOOKS_PER_SCAN} looks; {ROUND8_LOOKS_PER_SCAN * sum(ROUND8_CPU_MS_PER_LOOK.values()):.1f} ms "
              f"CPU (workers {ROUND8_LOOKS_PER_SCAN * ROUND8_CPU_MS_PER_LOOK['workers']:.1f} + PostgreSQL "
              f"{ROUND8_LOOKS_PER_SCAN * ROUND8_CPU_MS_PER_LOOK['postgres']:.1f}) per scan (round 8, derived)")
    for mode, label in (("callbacks", "with callbacks"), ("auto", "eta-aware looks, no callbacks")):
        r = result.get(mode)
        if not r or "looks_per_final_scan" not in r:
            continue
        p95 = r["final_after_engine_done_s"].get("p95")
        peak = r["peak_in_flight"]
        rows.append({"goal": f"{label}: {peak:,} in flight, final state recorded after the engine finished (p95)",
                     "target": f"< {MAX_FINAL_AFTER_DONE_P95_S:g} s", "value": f"{p95} s",
                     "met": p95 is not None and p95 < MAX_FINAL_AFTER_DONE_P95_S and not r["timed_out"],
                     "today": round8})
        looks = r["looks_per_final_scan"]
        rows.append({"goal": f"{label}: looks (scan ids looked at) per final scan", "target":
                     f"<= {MAX_LOOKS_PER_SCAN[mode]:g}", "value": looks, "met": looks <= MAX_LOOKS_PER_SCAN[mode],
                     "today": f"about {ROUND8_LOOKS_PER_SCAN} (round 8)"})
        c = r["cpu_ms_per_final_scan"]
        rows.append({"goal": f"{label}: CPU ms per final scan (workers + PostgreSQL{' + API' if mode == 'callbacks' else ''})",
                     "target": "beside round 8's", "value": f"{c['service']} ({c['workers']} + {c['postgres_db']}"
                     + (f" + {c['api']}" if mode == "callbacks" else "") + ")", "met": None, "today": round8})
    return rows


def markdown(scale: dict) -> list[str]:
    lines = ["## Scale: scans in flight, 2 worker processes", ""]
    runs = [scale[m] for m in ("off", "callbacks", "auto") if m in scale]
    if runs:
        lines += ["| | " + " | ".join(f"{r['mode']} ({r['scans']:,} scans)" for r in runs) + " |",
                  "|---|" + "---:|" * len(runs)]

        def line(label, get):
            values = []
            for r in runs:
                try:
                    values.append(str(get(r)))
                except (KeyError, TypeError):
                    values.append("-")
            lines.append(f"| {label} | " + " | ".join(values) + " |")
        line("scans created in (s, scans/s)", lambda r: f"{r['seeding']['seconds']} ({r['seeding']['scans_per_s']}/s)")
        line("created", lambda r: r["seeding"]["how"])
        line("peak in flight", lambda r: f"{r['peak_in_flight']:,}")
        line("all final after (s)", lambda r: r["all_final_s"] if not r["timed_out"]
             else f"stopped after {r['all_final_s']} s: {r['final'].get('queued', 0) + r['final'].get('running', 0):,} "
                  f"still in flight")
        line("steady window (s, mean in flight)", lambda r: f"{r['steady_window']['span_s']} "
             f"({r['steady_window']['in_flight_mean']:,})")
        line("looks/s (steady)", lambda r: r["steady_window"]["looks_per_s"])
        line("look lag p50 / p95 / max s (steady)", lambda r: "{p50_s} / {p95_s} / {max_s}".format(**r["steady_window"]["lag"]))
        line("look lag p50 / p95 / max s (whole run)", lambda r: "{p50_s} / {p95_s} / {max_s}".format(**r["whole_run"]["lag"]))
        line("engine look requests/s (steady; goal)", lambda r: f"{r['steady_window']['engine_look_requests_per_s']} "
             f"(<= {r['steady_window']['engine_requests_goal_per_s']})")
        line("ids per batch look (steady)", lambda r: r["steady_window"]["ids_per_batch_look"] if r["mode"] != "off"
             else "- (a request per look)")
        line("Redis used_memory peak MB", lambda r: f"{r['redis_used_memory_peak'] / 2**20:.1f}")
        line("Redis bytes per scan in flight", lambda r: r["redis_bytes_per_scan_in_flight"])
        line("worker CPU ms per look", lambda r: r["worker_cpu_ms_per_look"])
        line("CPU cores (steady): workers / PostgreSQL / simulator / Redis",
             lambda r: "{workers} / {postgres} / {simulator} / {redis}".format(**r["steady_window"]["cpu_cores"]))
        line("table scan at the end (MB)", lambda r: f"{r['database_bytes_scan'] / 2**20:.1f}")
        line("final scans", lambda r: f"{r['final_scans']:,}")
        line("looks (scan ids looked at) per final scan", lambda r: r["looks_per_final_scan"])
        line("final state after the engine finished p50 / p95 / max s",
             lambda r: "{p50} / {p95} / {max}".format(**r["final_after_engine_done_s"]))
        line("CPU ms per final scan: service (workers + PostgreSQL db + API) / PostgreSQL all clients",
             lambda r: f"{r['cpu_ms_per_final_scan']['service']} ({r['cpu_ms_per_final_scan']['workers']} + "
                       f"{r['cpu_ms_per_final_scan']['postgres_db']} + {r['cpu_ms_per_final_scan']['api']}) / "
                       f"{r['cpu_ms_per_final_scan']['postgres_all']}")
        line("callbacks sent (per final scan) / failed / peak scheduled",
             lambda r: f"{r['callbacks']['sent']:,} ({r['callbacks']['per_final_scan']}) / {r['callbacks']['failed']:,}"
                       f" / {r['callbacks']['scheduled_peak']:,}" if "callbacks" in r else "-")
        lines.append("")
    today = scale.get("off_extrapolated")
    if today:
        lines += [f"Today's tracking (off) extrapolated to {today['to_scans']:,} scans in flight at a "
                  f"{today['engine_poll_seconds']:g} s poll (from {today['from_scans']:,}): {today['looks_per_s']:,} "
                  f"looks/s, {today['engine_requests_per_s']:,} engine requests/s, Redis "
                  f"{today['redis_bytes'] / 2**20:.0f} MB, {today['worker_cpu_cores']} worker CPU cores, "
                  f"{today['worker_processes']} worker processes.", ""]
    ledger = scale.get("ledger_bytes")
    if ledger and "factor" in ledger:
        lines += [f"Ledger bytes per read (`bench.ledger_bytes`, {ledger['reads']:,} reads a shape): " + "; ".join(
            f"{k}: {v['bytes_per_read']} B ({v['rows']:,} rows)" for k, v in ledger.items() if isinstance(v, dict))
            + f"; factor {ledger['factor']}x. A summed row costs {ledger['summed_row_bytes']} B, so the factor is "
            f"100x from {ledger['reads_a_minute_for_100x']} reads of one endpoint a minute by one customer.", ""]
    if scale.get("goals"):
        lines += ["| Goal | Target | Measured | Met | Before |", "|---|---|---:|---|---|"]
        for g in scale["goals"]:
            met = "-" if g["met"] is None else "yes" if g["met"] else "**no**"
            lines.append(f"| {g['goal']} | {g['target']} | {g['value']} | {met} | "
                         f"{g['today'] or '-'} |")
        lines.append("")
    return lines
