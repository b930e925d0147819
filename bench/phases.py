"""The four measurements: HTTP endpoints, worker throughput, webhook latency, scale.

Each phase starts from an empty ``bench`` schema and a flushed Redis db 11, starts the
processes it needs, and stops them before it returns, so no phase sees another's jobs.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import requests

from bench import cpu, floor_app, profile, wrk
from bench.held import held_phase  # noqa: F401 # the phase, run by name (__main__)
from bench.measure import (
    Api,
    create_scans,
    engine_done_ms,
    job_stats,
    status_counts,
    stop_workers,
    summary,
    wait_for_workers,
)
from bench.stack import ENGINE_TOKEN, PG_DSN, Stack, jobs_from_log, wait_until

WEBHOOK_SECRET = "whsec_YmVuY2ggd2ViaG9vayBzZWNyZXQgMDEyMzQ1Njc4OQ=="


# --- 1. HTTP endpoints --------------------------------------------------------------------

def http_phase(stack: Stack, opts, out: Path, log) -> dict:
    stack.reset_database()
    stack.flush_redis()
    # Creations submit to the bench's engine stand-in (several processes; its capacity is one
    # of the targets); the simulator, at the same time scale, answers the status of the ids the
    # stand-in issues, for the worker that completes the seeded scans.
    sim = stack.start_simulator(0.001, "sim-http")
    engine_url = stack.start_engine(0.001, "engine-http")
    api_url, api_proc = stack.start_api(engine_url, "api-http")
    base_url, base_proc = stack.start_baseline()
    floor_app.create_schema(PG_DSN)
    floor_url, floor_proc = stack.start_floor(engine_url)
    observed_url, observed_proc = stack.start_floor(engine_url, "floor-observed", "bench.floor_observed:app")
    groups = {"api": api_proc.pid, "baseline": base_proc.pid, "floor": floor_proc.pid,
              "floor_observed": observed_proc.pid,
              "engine": next(p.pid for p in stack.procs if p.name == "engine-http"),
              "simulator": next(p.pid for p in stack.procs if p.name == "sim-http")}
    n_many, per_many = opts.customers, (5 if opts.quick else 20)
    (_, read_key), = stack.customers(1, "bench-read")
    (_, create_key), = stack.customers(1, "bench-create")
    (_, bulk_key), = stack.customers(1, "bench-bulk")
    readers = stack.customers(n_many, "bench-read-many")
    creators = stack.customers(n_many, "bench-create-many")
    reader = Api(api_url, read_key)

    log(f"seeding: 3 batches of 100 for one customer, {per_many} scans for each of {n_many} others; "
        f"completing them with a burst worker")
    done_ids, done_batches, _ = create_scans(reader, "seed-done", 300, threads=1)
    many_pairs = []
    for i, (_, key) in enumerate(readers):
        ids, _, _ = create_scans(Api(api_url, key), f"seed-many{i}", per_many, threads=1)
        many_pairs += [(key, scan_id) for scan_id in ids]
    seeded = 300 + len(many_pairs)
    # A worker that stays until every seeded scan is completed: batch looks (D24, the default)
    # run only in a worker that is not a burst one, and scans in flight hold no RQ job to drain.
    worker = stack.start_worker(sim, "worker-seed")
    deadline = time.monotonic() + 300
    while status_counts(stack).get("completed", 0) < seeded and time.monotonic() < deadline:
        time.sleep(0.5)
    stack.stop(worker)
    counts = status_counts(stack)
    if counts.get("completed", 0) < seeded:
        raise RuntimeError(f"seeding did not complete the scans: {counts}")
    queued_ids, _, _ = create_scans(reader, "seed-queued", 100, threads=1)
    log("seeding the floor: the same completed scans and batches, their bodies as the API answered them")
    floor_keys = {name: floor_app.add_customer(PG_DSN, name) for name in ("floor-read", "floor-create", "floor-bulk")}
    for batch_id in done_batches:
        aggregate = reader.session.get(f"{api_url}/api/v1/scan/bulk/{batch_id}", timeout=30).json()
        bodies = {e["scan_id"]: reader.session.get(f"{api_url}/api/v1/scan/{e['scan_id']}", timeout=30).text
                  for e in aggregate["scans"]}
        floor_app.add_batch(PG_DSN, "floor-read", aggregate, bodies)
    stack.sql("VACUUM ANALYZE")  # statistics as a running database would have them
    work = stack.logdir / "wrk"  # the key files stay out of the results: keys are secrets, even throwaway ones
    work.mkdir(exist_ok=True)
    files = {
        "read-one": [f"{read_key} {i}" for i in done_ids],
        "read-many": [f"{k} {i}" for k, i in many_pairs],
        "read-queued": [f"{read_key} {i}" for i in queued_ids],
        "batches": [f"{read_key} {b}" for b in done_batches],
        "keys-create": [create_key],
        "keys-create-many": [k for _, k in creators],
        "keys-bulk": [bulk_key],
        "floor-read": [f"{floor_keys['floor-read']} {i}" for i in done_ids],
        "floor-batches": [f"{floor_keys['floor-read']} {b}" for b in done_batches],
        "floor-keys-create": [floor_keys["floor-create"]],
        "floor-keys-bulk": [floor_keys["floor-bulk"]],
    }
    for name, lines in files.items():
        (work / f"{name}.txt").write_text("\n".join(lines) + "\n")
    f = {name: str(work / f"{name}.txt") for name in files}
    tag = time.strftime("%H%M%S")
    scan_url = f"{api_url}/api/v1/scan"
    floor_scan_url = f"{floor_url}/api/v1/scan"
    tags = (tag, tag + "m", tag + "f")  # new targets each run and pass: suffixed for warm-up and one connection
    # Each endpoint right after its floor, so both see the same state of a shared machine.
    targets = [
        ("baseline", f"{base_url}/json", "baseline.lua", []),
        ("floor_read", floor_scan_url, "read.lua", ["/api/v1/scan/", f["floor-read"]]),
        ("floor_read_observed", f"{observed_url}/api/v1/scan", "read.lua", ["/api/v1/scan/", f["floor-read"]]),
        ("read", scan_url, "read.lua", ["/api/v1/scan/", f["read-one"]]),
        ("read_many", scan_url, "read.lua", ["/api/v1/scan/", f["read-many"]]),
        ("read_queued", scan_url, "read.lua", ["/api/v1/scan/", f["read-queued"]]),
        ("floor_bulk_read", floor_scan_url, "read.lua", ["/api/v1/scan/bulk/", f["floor-batches"]]),
        ("bulk_read", scan_url, "read.lua", ["/api/v1/scan/bulk/", f["batches"]]),
        ("floor_create", floor_scan_url, "create.lua", [tag + "f", f["floor-keys-create"]]),
        ("create", scan_url, "create.lua", [tag, f["keys-create"]]),
        ("create_many", scan_url, "create.lua", [tag + "m", f["keys-create-many"]]),
        ("floor_bulk_create", f"{floor_scan_url}/bulk", "bulk.lua", [tag + "f", f["floor-keys-bulk"], "100"]),
        ("bulk_create", f"{scan_url}/bulk", "bulk.lua", [tag, f["keys-bulk"], "100"]),
        ("engine", engine_url, "engine.lua", [tag, ENGINE_TOKEN]),
        ("baseline_end", f"{base_url}/json", "baseline.lua", []),
    ]
    if opts.targets:
        targets = [t for t in targets if t[0] in opts.targets]
    results = {"loaded": {}, "single": {}, "customers_many": n_many}
    passes = [("loaded", opts.connections, opts.wrk_threads, opts.duration)]
    if opts.single_connection:
        passes.append(("single", 1, 1, opts.single_duration))
    for label, connections, threads, duration in passes:
        for name, url, script, args in targets:
            if label == "single":
                if name.endswith("_many") or name == "engine":
                    continue  # one connection: one customer or many is the same; the engine's capacity is loaded
                args = [a + "s" if a in tags else a for a in args]
            log(f"wrk {label}: {name} ({connections} connections, {duration:g} s after {opts.warmup:g} s of warm-up)")
            # Statistics as autovacuum keeps them on a running database: the creation targets add tens
            # of thousands of rows in seconds, and stale statistics would turn index scans into seq scans.
            stack.sql("VACUUM ANALYZE")
            if opts.warmup > 0:  # new connections, lazy imports, caches: not what is measured
                wrk.run(f"warmup-{label}-{name}", url, script, [a + "w" if a in tags else a for a in args],
                        connections=connections, threads=threads, duration=opts.warmup, workdir=work)
            spy = None
            if opts.profile and label == "loaded" and url.startswith(api_url):
                spy = profile.record(api_proc.pid, duration, out / f"profile-{label}-{name}.txt")
                time.sleep(0.5)  # py-spy attaches to every worker before the load starts
            before = cpu.snapshot(groups)
            result = wrk.run(f"{label}-{name}", url, script, args, connections=connections, threads=threads,
                             duration=duration, workdir=work)
            if spy is not None:
                spy.wait(30)
            result.cpu_s.update(cpu.delta(before, cpu.snapshot(groups)))
            result.cpu_ms_per_request = {k: round(v * 1000 / max(1, result.requests), 3)
                                         for k, v in result.cpu_s.items() if v}
            (out / f"wrk-{label}-{name}.txt").write_text(result.raw)
            results[label][name] = result.as_dict()
            time.sleep(opts.pause)
    results["scans_by_customer_at_end"] = dict(stack.sql(
        "SELECT c.name, count(s.id) FROM customer c LEFT JOIN scan s ON s.customer_id = c.id "
        "WHERE c.name NOT LIKE '%-many-%' GROUP BY c.name"))
    results["queries"] = query_counts(stack, sim, read_key, done_ids[0], queued_ids[0], done_batches[0], out)
    return results


def query_counts(stack: Stack, sim: str, key: str, done_id: str, queued_id: str, batch_id: str, out: Path) -> dict:
    """SQL statements and Redis round trips per request (``bench.queries``, in its own process)."""
    import subprocess

    from bench.stack import BIN, ROOT
    proc = subprocess.run([str(BIN / "python"), "-m", "bench.queries", key, done_id, queued_id, batch_id],
                          cwd=ROOT, env=stack.env("production", ENGINE_URL=sim, LOG_LEVEL="WARNING"),
                          capture_output=True, text=True, timeout=120)
    (out / "queries.txt").write_text(proc.stdout + proc.stderr[-4000:])
    if proc.returncode != 0:
        return {"error": proc.stderr[-1000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- 2. worker throughput ------------------------------------------------------------------


def _one_worker(stack, sim, name, queue, n, rate_key, done, what, span_sql, job_prefix) -> dict:
    """One worker process on ``queue`` until ``done()``: its wall time, start-up, the rate of
    the ``n`` outcomes between the first and the last (``span_sql`` gives both as epochs), and
    its jobs' timings."""
    jobs_log = stack.logdir / f"jobs-{name}.csv"
    started = time.time()
    worker = stack.start_worker(sim, f"worker-{name}", queues=queue, jobs_log=jobs_log)
    wait_until(done, 60 + n / 5, what, 0.25)
    wall = time.time() - started
    stack.stop(worker)
    jobs = jobs_from_log(jobs_log)
    first_job = min((r["started"] for r in jobs), default=started)
    first, last = stack.sql(span_sql)[0]
    return {
        "worker_processes": 1, "wall_s_from_process_start": round(wall, 2),
        "startup_s": round(first_job - started, 2),
        rate_key: round((n - 1) / float(last - first), 1) if last > first else None,
        "jobs": job_stats(jobs, job_prefix),
    }


def workers_phase(stack: Stack, opts, out: Path, log) -> dict:
    stack.reset_database()
    stack.flush_redis()
    sim = stack.start_simulator(0.001, "sim-workers")
    api_url, api_proc = stack.start_api(sim, "api-workers")
    requests.post(f"{sim}/_sim/receivers/bench", json={"secret": WEBHOOK_SECRET, "responses": [200]},
                  timeout=5).raise_for_status()
    _, key = stack.customer("bench-workers", f"{sim}/_sim/hooks/bench", WEBHOOK_SECRET)
    n = opts.worker_scans
    log(f"creating {n} scans (engine work done within 0.2 s)")
    ids, _, created_s = create_scans(Api(api_url, key), "wrk", n)
    stack.stop(api_proc)
    time.sleep(1.6)  # every first look is due and every investigation is done
    result = {"scans": n, "creation_s": round(created_s, 2)}

    log("1 worker on the engine queue: tracking looks until every scan is completed")
    result["tracking"] = _one_worker(
        stack, sim, "track", "engine", n, "completed_per_s",
        lambda: status_counts(stack).get("completed", 0) >= n, "all scans completed",
        "SELECT extract(epoch from min(completed_at)), extract(epoch from max(completed_at)) FROM scan", "trk")
    pending = stack.sql("SELECT count(*) FROM webhook_delivery WHERE status = 'pending'")[0][0]
    log(f"1 worker on the webhooks queue: {pending} deliveries to a receiver answering 200")
    hooks = _one_worker(
        stack, sim, "hooks", "webhooks", n, "delivered_per_s",
        lambda: stack.sql("SELECT count(*) FROM webhook_delivery WHERE status = 'succeeded'")[0][0] >= n,
        "all deliveries succeeded",
        "SELECT extract(epoch from min(finished_at)), extract(epoch from max(finished_at)) FROM webhook_delivery",
        "dlv")
    received = requests.get(f"{sim}/_sim/receivers/bench/deliveries", timeout=30).json()["deliveries"]
    result["webhooks"] = {**hooks, "deliveries": pending, "received": len(received),
                          "signatures_valid": sum(1 for d in received if d["signature_valid"])}
    return result


# --- 3. webhook latency after the engine is done -------------------------------------------

def latency_phase(stack: Stack, opts, out: Path, log) -> dict:
    scale = opts.latency_time_scale
    stack.reset_database()
    stack.flush_redis()
    sim = stack.start_simulator(scale, "sim-latency")
    api_url, _ = stack.start_api(sim, "api-latency")
    requests.post(f"{sim}/_sim/receivers/lat", json={"secret": WEBHOOK_SECRET, "responses": [200]},
                  timeout=5).raise_for_status()
    _, key = stack.customer("bench-latency", f"{sim}/_sim/hooks/lat", WEBHOOK_SECRET)
    job_logs = [stack.logdir / f"jobs-latency-{i}.csv" for i in range(2)]
    workers = [stack.start_worker(sim, f"worker-latency-{i}", jobs_log=job_logs[i]) for i in range(2)]
    wait_for_workers(stack, 2)
    api = Api(api_url, key)
    n, rate = opts.latency_scans, opts.latency_rate
    log(f"{n} scans of {60 * scale:g} to {180 * scale:g} s created at {rate:g}/s, 2 workers (both queues), "
        f"receiver answering 200")
    started = time.monotonic()
    for i in range(n):  # a steady trickle well below the workers' capacity: the figure is the delay, not a backlog
        api.scan(f"lat.{i}@example.com")
        time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    wait_until(lambda: len(requests.get(f"{sim}/_sim/receivers/lat/deliveries", timeout=10).json()["deliveries"])
               >= n, 180 * scale + 120, "every webhook", 0.5)
    stop_workers(stack, workers)
    received = requests.get(f"{sim}/_sim/receivers/lat/deliveries", timeout=30).json()["deliveries"]
    rows = {r[0]: r[1:] for r in stack.sql(
        "SELECT id, engine_id, extract(epoch from completed_at) * 1000, extract(epoch from created_at) * 1000 "
        "FROM scan")}
    total, to_tracked, to_received, lines = [], [], [], ["scan_id,done_ms,completed_ms,received_ms"]
    for delivery in received:
        scan_id = json.loads(delivery["body"])["scan_id"]
        engine_id, completed_ms, _ = rows[scan_id]
        done = engine_done_ms(engine_id, scale)
        received_ms = delivery["received_at_ms"]
        total.append(received_ms - done)
        to_tracked.append(float(completed_ms) - done)
        to_received.append(received_ms - float(completed_ms))
        lines.append(f"{scan_id},{done:.0f},{float(completed_ms):.0f},{received_ms}")
    (out / "latency.csv").write_text("\n".join(lines) + "\n")
    jobs = [r for path in job_logs for r in jobs_from_log(path)]
    return {
        "scans": n, "time_scale": scale, "created_per_s": rate, "worker_processes": 2, "deliveries": len(received),
        "engine_done_to_received_ms": summary(total, 0),
        "engine_done_to_completed_ms": summary(to_tracked, 0),
        "completed_to_received_ms": summary(to_received, 0),
        "delivery_jobs": job_stats(jobs, "dlv"),  # scans are tracked by batch looks, not jobs (D24)
    }


# --- 4. scale: many scans in flight (bench/scale.py) ------------------------------------------

def scale_phase(stack: Stack, opts, out: Path, log) -> dict:
    from bench import scale
    return scale.scale_phase(stack, opts, out, log)


def watches_phase(stack: Stack, opts, out: Path, log) -> dict:
    from bench import watches
    return watches.watches_phase(stack, opts, out, log)


# --- 5. cost as the stored work grows ---------------------------------------------------------

FILL_SCANS = """
INSERT INTO scan (id, customer_id, api_key_id, kind, target, status, engine_id, recipes_total, recipes_done, eta_at,
                  created_at, started_at, completed_at, result_json, check_errors)
SELECT 'scn_fill' || lpad(g::text, 9, '0'), c.customer_id, c.key_id, 'email', 'fill.' || g || '@example.com',
       'completed', 'inv_fill' || g, 6, 6, t, t, t, t + interval '90 seconds', %(result)s, 0
FROM generate_series(%(first)s, %(last)s) AS g,
     LATERAL (SELECT (now() AT TIME ZONE 'utc') - (g %% 2592000) * interval '1 second' AS t) AS x,
     LATERAL (SELECT (%(customers)s::text[])[1 + g %% %(n_customers)s] AS customer_id,
                     (%(keys)s::text[])[1 + g %% %(n_customers)s] AS key_id) AS c"""
FILL_LEDGER = """
INSERT INTO credit_ledger (customer_id, delta, balance_after, reason, scan_id, created_at)
SELECT customer_id, -1, 0, 'scan', id, created_at FROM scan WHERE id >= %(first_id)s AND id <= %(last_id)s"""


def growth_phase(stack: Stack, opts, out: Path, log) -> dict:
    """Reads and creations at growing numbers of stored scans (filled by SQL, not by API calls):
    rate, latency, CPU and database work per call, and the bytes each stored scan takes."""
    stack.reset_database()
    stack.flush_redis()
    sim = stack.start_simulator(0.001, "sim-growth")
    engine_url = stack.start_engine(0.001, "engine-growth")
    api_url, api_proc = stack.start_api(engine_url, "api-growth")
    groups = {"api": api_proc.pid, "engine": next(p.pid for p in stack.procs if p.name == "engine-growth")}
    customers = stack.customers(3, "bench-growth")
    (reader_id, read_key), (creator_id, create_key), _ = customers
    reader = Api(api_url, read_key)
    ids, batches, _ = create_scans(reader, "growth", 100, threads=1)
    worker = stack.start_worker(sim, "worker-growth")  # not a burst one: batch looks (D24), as the HTTP phase's
    deadline = time.monotonic() + 300
    while status_counts(stack).get("completed", 0) < len(ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    stack.stop(worker)
    if status_counts(stack).get("completed", 0) < len(ids):
        raise RuntimeError(f"seeding did not complete the scans: {status_counts(stack)}")
    result = stack.sql("SELECT result_json FROM scan WHERE status = 'completed' LIMIT 1")[0][0]
    keys = dict(stack.sql("SELECT customer_id, id FROM api_key"))
    # A tenth of the stored scans are the reader's, a tenth the creator's, the rest another
    # customer's; created over the last 30 days at one a second (a few per minute each).
    owners = [reader_id, creator_id] + [c for c, _ in customers[2:]] * 8
    fill = {"result": result, "customers": owners, "keys": [keys[c] for c in owners], "n_customers": len(owners)}
    work = stack.logdir / "wrk"
    work.mkdir(exist_ok=True)
    (work / "growth-read.txt").write_text("\n".join(f"{read_key} {i}" for i in ids) + "\n")
    (work / "growth-batches.txt").write_text("\n".join(f"{read_key} {b}" for b in batches) + "\n")
    (work / "growth-create.txt").write_text(create_key + "\n")
    scan_url = f"{api_url}/api/v1/scan"
    tag = "g" + time.strftime("%H%M%S")
    targets = [("read", "read.lua", ["/api/v1/scan/", str(work / "growth-read.txt")]),
               ("bulk_read", "read.lua", ["/api/v1/scan/bulk/", str(work / "growth-batches.txt")]),
               ("create", "create.lua", [tag, str(work / "growth-create.txt")])]
    filled, sizes = 0, {}
    for size in opts.growth_sizes:
        stored = stack.sql("SELECT count(*) FROM scan")[0][0]
        if size > stored:
            started = time.monotonic()
            for first in range(filled + 1, filled + size - stored + 1, 200_000):  # bounded statements
                last = min(filled + size - stored, first + 199_999)
                stack.sql(FILL_SCANS, {**fill, "first": first, "last": last})
                stack.sql(FILL_LEDGER, {"first_id": f"scn_fill{first:09d}", "last_id": f"scn_fill{last:09d}"})
            filled += size - stored
            log(f"filled to {size} stored scans in {time.monotonic() - started:.1f} s")
        stack.sql("VACUUM ANALYZE")
        stack.sql("CHECKPOINT")  # the fill's dirty pages written now, not during the measurement
        row = {"stored_scans": stack.sql("SELECT count(*) FROM scan")[0][0],
               "ledger_rows": stack.sql("SELECT count(*) FROM credit_ledger")[0][0],
               "database_bytes": dict(stack.sql(
                   "SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                   "WHERE schemaname = 'public' ORDER BY 2 DESC LIMIT 6"))}
        for name, script, args in targets:
            args = [a + str(size) if a == tag else a for a in args]
            wrk.run(f"growth-warmup-{size}-{name}", scan_url, script, [a + "w" if a.startswith(tag) else a
                                                                        for a in args],
                    connections=opts.connections, threads=opts.wrk_threads, duration=1, workdir=work)
            time.sleep(1.1)  # the statistics of the warm-up are flushed before the snapshot
            db_before, cpu_before = _db_work(stack), cpu.snapshot(groups)
            res = wrk.run(f"growth-{size}-{name}", scan_url, script, args, connections=opts.connections,
                          threads=opts.wrk_threads, duration=opts.growth_duration, workdir=work)
            cpu_after = cpu.snapshot(groups)
            time.sleep(1.1)
            db_after = _db_work(stack)
            n = max(1, res.requests)
            (out / f"wrk-growth-{size}-{name}.txt").write_text(res.raw)
            row[name] = {"rps": round(res.rps, 1), "p50_ms": res.p50_ms, "p99_ms": res.p99_ms, "non_2xx": res.non_2xx,
                         "cpu_ms_per_request": {k: round(v * 1000 / n, 3)
                                                for k, v in cpu.delta(cpu_before, cpu_after).items() if v},
                         "db_per_request": {k: round((db_after[k] - db_before[k]) / n, 1) for k in db_after}}
            log(f"{size} stored: {name} {res.rps:.0f}/s p50 {res.p50_ms:.2f} ms, "
                f"{row[name]['db_per_request']['blocks']} blocks per call")
        sizes[str(size)] = row
    big = sizes[str(opts.growth_sizes[-1])]
    scan_bytes = big["database_bytes"].get("scan", 0)
    ledger_bytes = big["database_bytes"].get("credit_ledger", 0)
    return {"sizes": sizes, "bytes_per_stored_scan": round(scan_bytes / max(1, big["stored_scans"])),
            "ledger_bytes_per_row": round(ledger_bytes / max(1, big["ledger_rows"])),
            "note": "the filled scans all carry the same result text, which TOAST compresses better than "
                    "real results: the scale phase's bytes per scan are the realistic figure"}


def _db_work(stack: Stack) -> dict:
    """Cumulative buffer accesses, rows and transactions of database ``bench`` (pg_stat_database)."""
    blocks, returned, fetched, inserted, updated, commits = stack.sql(
        "SELECT blks_hit + blks_read, tup_returned, tup_fetched, tup_inserted, tup_updated, xact_commit "
        "FROM pg_stat_database WHERE datname = current_database()")[0]
    return {"blocks": blocks, "rows_scanned": returned, "rows_fetched": fetched, "rows_inserted": inserted,
            "rows_updated": updated, "commits": commits}


def webhooks_phase(stack: Stack, opts, out: Path, log) -> dict:
    """Webhook delivery under load (``bench/webhooks.py``): its own worker, database and Redis
    db, run as a subprocess so its receivers' event loop and its worker stay apart from this
    process; figures in ``webhooks.json``."""
    import subprocess
    import sys

    args = ["--out", str(out / "webhooks.json")]
    if opts.quick:
        args += ["--deliveries", "300", "--hanging", "50", "--fast", "200", "--seconds", "3", "--timeout", "120",
                 "--endpoints", "1000"]
    log("webhooks: deliveries/s at 0, 50, 200 ms; a hanging receiver beside fast ones; 1,000 endpoints on one "
        "host, one hanging, against a single endpoint")
    done = subprocess.run([sys.executable, "-m", "bench.webhooks", *args], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=1800)
    (out / "webhooks.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"bench.webhooks exited {done.returncode}: see {out / 'webhooks.log'}")
    return json.loads((out / "webhooks.json").read_text())
