"""The held phase (issue 40, D27): thousands of waits and event streams held at once by the
held-connection server (``gunicorn.held.conf.py``, gevent) while the threaded API serves
ordinary reads.

1. Seeding: completed scans of a reader customer (a fast simulator, one worker).
2. Idle: wrk reads them (and again at the end, step 5) (``read.lua``, the HTTP phase's connections and duration) on the threaded
   API, with the held-connection server, a worker and a slower simulator running, nothing held.
3. Held: ``--held-customers`` customers (each key may hold 100) create scans of tens of seconds
   (``--held-time-scale``); ``bench.held_clients`` (asyncio, a process of its own) opens
   ``--held-waits`` waits (``?wait=60``, asked again while not final) and ``--held-streams``
   streams on the held-connection server, arriving at ``--held-open-rate`` a second; once Redis counts them all held, wrk reads again.
4. Until every scan is final and every waiter and stream has its final answer: per scan, the
   delay from its final state (``completed_at``) to each waiter's final answer and each
   stream's final event.
5. Idle reads again: the ratio is the loaded reads' rate to the mean of both idle rates, so a
   machine whose other load drifted during the phase skews it less.

Goals (issue 40): 2,000 held, reads under them at least 0.8 of idle reads (the same run), and
waiters answered within 1 s of their scan's final state (p95).
"""
from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC
from pathlib import Path

from bench import cpu, wrk
from bench.stack import BIN, DATABASE, ROOT, Stack, wait_until


def _held_now(stack: Stack) -> int:
    conn = stack.redis()
    return sum(conn.zcard(name) for name in conn.scan_iter("scan-api:held:*"))


def _completed_at(stack: Stack) -> dict[str, float]:
    rows = stack.sql("SELECT id, completed_at FROM scan WHERE status IN ('completed', 'failed')")
    return {scan_id: at.replace(tzinfo=UTC).timestamp() for scan_id, at in rows if at is not None}


def _delays(answers: list[dict], finals: dict[str, float]) -> list[float]:
    """Milliseconds from each scan's final state to an answer about it (none before: clamped to 0)."""
    return [max(0.0, (a["at"] - finals[a["scan_id"]]) * 1000) for a in answers if a["scan_id"] in finals]


def _final_looks(looks_log: Path) -> dict:
    """The batch looks that wrote final states: how many, and their durations (ms). A scan's
    ``completed_at`` is taken as its look begins writing, its waiters hear of it at the commit:
    the look's time is part of every waiter's delay before the held server does anything."""
    from bench.measure import summary
    if not looks_log.exists():
        return {}
    rows = [line.split(",") for line in looks_log.read_text().splitlines() if line.strip()]
    final = [(float(r[1]), int(r[4]) + int(r[5])) for r in rows if len(r) > 5 and int(r[4]) + int(r[5])]
    return {"looks": len(final), "finals": sum(n for _, n in final), "ms": summary([ms for ms, _ in final])}


def held_phase(stack: Stack, opts, out: Path, log) -> dict:
    from bench.measure import Api, create_scans, percentile, status_counts, summary
    stack.reset_database()
    stack.flush_redis()
    n_customers, n_waits, n_streams = opts.held_customers, opts.held_waits, opts.held_streams
    per_customer = -(-(n_waits + n_streams) // n_customers)
    if per_customer > 100:
        raise ValueError(f"{per_customer} held connections per key: a key may hold 100 (--held-customers)")

    log("seeding: 300 completed scans of the reader, a fast simulator and one worker")
    fast = stack.start_simulator(0.001, "sim-held-seed")
    api_url, api_proc = stack.start_api(fast, "api-held-seed")
    (_, read_key), = stack.customers(1, "bench-held-read")
    done_ids, _, _ = create_scans(Api(api_url, read_key), "held-seed", 300, threads=1)
    worker = stack.start_worker(fast, "worker-held-seed")
    wait_until(lambda: status_counts(stack).get("completed", 0) >= 300, 300, "the seeded scans", 0.5)
    for proc in (worker, api_proc):
        stack.stop(proc)

    slow = stack.start_simulator(opts.held_time_scale, "sim-held")
    api_url, api_proc = stack.start_api(slow, "api-held")
    held_url, held_proc = stack.start_held(slow, opts.held_workers, "held")
    looks_log = out / "looks-held.csv"  # each batch look: its time and finals (the waiters' delay begins there)
    worker = stack.start_worker(slow, "worker-held", looks_log=looks_log)
    keys = [key for _, key in stack.customers(n_customers, "bench-held")]
    stack.sql("VACUUM ANALYZE")
    work = stack.logdir / "wrk"  # key files stay out of the results
    work.mkdir(exist_ok=True)
    reads = work / "held-read.txt"
    reads.write_text("".join(f"{read_key} {i}\n" for i in done_ids))
    groups = {"api": api_proc.pid, "held": held_proc.pid, "worker": worker.pid,
              "simulator": next(p.pid for p in stack.procs if p.name == "sim-held")}
    backends = cpu.DatabaseBackends(DATABASE)

    def snapshot() -> dict[str, float]:
        """The groups' CPU, this database's backends' (``postgres`` counts every database's), and
        the machine's: ``other`` is what none of them took (other users, their databases too)."""
        taken = cpu.snapshot(groups)
        return {**taken, "postgres_db": backends.total(), "machine": cpu.machine_busy()}

    def read_load(label: str) -> dict:
        wrk.run(f"warmup-held-{label}", api_url, "read.lua", ["/api/v1/scan/", str(reads)],
                connections=opts.connections, threads=opts.wrk_threads, duration=opts.warmup, workdir=work)
        before = snapshot()
        result = wrk.run(f"held-{label}", api_url, "read.lua", ["/api/v1/scan/", str(reads)],
                         connections=opts.connections, threads=opts.wrk_threads, duration=opts.duration, workdir=work)
        spent = cpu.delta(before, snapshot())
        # This database's backends, not every database's: another user's backend that exits takes
        # its CPU out of "postgres" (a negative figure); their PostgreSQL is theirs, in "other".
        named = sum(v for k, v in spent.items() if k not in ("machine", "postgres"))
        result.cpu_s.update(spent, other=round(spent["machine"] - named - result.cpu_s.get("wrk", 0.0), 2))
        (out / f"wrk-held-{label}.txt").write_text(result.raw)
        return result.as_dict()

    log(f"idle reads: wrk {opts.connections} connections, {opts.duration:g} s")
    idle = read_load("idle")

    scans_per_customer = max(1, -(-n_waits // (2 * n_customers)))
    log(f"{n_customers} customers create {scans_per_customer} scans each (time scale {opts.held_time_scale})")
    by_customer = []
    for i, key in enumerate(keys):
        ids, _, _ = create_scans(Api(api_url, key), f"held{i}", scans_per_customer, threads=1)
        by_customer.append((key, ids))
    waits = [(key, ids[j % len(ids)]) for j in range(n_waits)
             for key, ids in [by_customer[j % n_customers]]]
    streams = [by_customer[j % n_customers] for j in range(n_streams)]
    plan = {"url": held_url, "waits": waits, "streams": streams, "wait": 60, "deadline_s": opts.held_deadline,
            "open_per_s": opts.held_open_rate}
    plan_path, result_path = work / "held-plan.json", out / "held-clients.json"
    plan_path.write_text(json.dumps(plan))
    log(f"opening {n_waits} waits and {n_streams} streams on the held-connection server")
    clients = subprocess.Popen([str(BIN / "python"), "-m", "bench.held_clients", str(plan_path), str(result_path)],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    groups["clients"] = clients.pid  # a process group of its own: its CPU counted apart
    try:
        opened_at = time.monotonic()
        if clients.stdout is not None:
            clients.stdout.readline()  # "open": every call sent
        wait_until(lambda: _held_now(stack) >= n_waits + n_streams, 120, "every call held", 0.2)
        held_at_start = _held_now(stack)
        log(f"{held_at_start} held after {time.monotonic() - opened_at:.1f} s; reads again under them")
        loaded = read_load("loaded")
        held_at_end = _held_now(stack)
        in_flight_at_end = sum(v for k, v in status_counts(stack).items() if k not in ("completed", "failed"))
        log("waiting for every scan to be final and every waiter and stream answered")
        clients.wait(opts.held_deadline + 60)
        stack.stop(worker)
    finally:
        if clients.poll() is None:  # a failed phase leaves no client behind
            clients.kill()
            clients.wait(10)
    log("idle reads again (the machine's load drifts: the ratio is to the mean of both idle runs)")
    idle_after = read_load("idle-after")
    result = json.loads(result_path.read_text())
    finals = _completed_at(stack)
    wait_ms, stream_ms = _delays(result["waits"], finals), _delays(result["streams"], finals)
    idle_rps = (idle["rps"] + idle_after["rps"]) / 2
    ratio = round(loaded["rps"] / idle_rps, 3) if idle_rps else None
    return {
        "customers": n_customers, "waits": n_waits, "streams": n_streams, "held_workers": opts.held_workers,
        "scans": sum(len(ids) for _, ids in by_customer), "time_scale": opts.held_time_scale,
        "held_at_start_of_loaded_reads": held_at_start, "held_at_end_of_loaded_reads": held_at_end,
        "scans_in_flight_at_end_of_loaded_reads": in_flight_at_end,
        "idle_reads": idle, "loaded_reads": loaded, "idle_reads_after": idle_after, "read_rps_ratio": ratio,
        "wait_final_answer_ms": summary(wait_ms), "stream_final_event_ms": summary(stream_ms),
        "waits_answered_final": len(result["waits"]), "stream_finals": len(result["streams"]),
        "client_statuses": result["statuses"], "client_errors": result["error_count"],
        "client_error_samples": result["errors"][:5], "unfinished_clients": result["unfinished"],
        "final_looks_ms": _final_looks(looks_log),
        "goals": {"held_2000": held_at_start >= 2000 and held_at_end >= 2000,
                  "reads_ratio_0_8": ratio is not None and ratio >= 0.8,
                  "wait_p95_under_1s": bool(wait_ms) and percentile(wait_ms, 95) <= 1000
                  and len(result["waits"]) == n_waits},
    }
