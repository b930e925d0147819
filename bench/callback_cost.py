"""The API's CPU per engine callback (E7): ``python -m bench.callback_cost``.

The API as production runs it (``gunicorn.conf.py``, 2 processes x 8 threads by default), on
database ``bench`` (``BENCH_DATABASE``), with ``--scans`` scans in flight, each called back as an
engine does it: ``running`` (the scan moves from queued to running and writes its event), one
progress call per recipe, then ``done`` (its scan is made due); so ``recipes + 2`` callbacks a scan,
all signed and each sent once. wrk sends them (``bench/lua/callbacks.lua``: pre-signed, so the load
generator does no HMAC of its own) after a warm-up of other scans; the API's CPU seconds (every
process of its gunicorn, from /proc) and those of the database's PostgreSQL backends are read
before and after, and divided by the callbacks answered.

With ``--progress-only`` every callback is a progress one of a scan already running (the
commonest kind: seven of a scan's nine). ``--rounds`` repeats the measured load on fresh scans
with the same API, for the spread of one run. Nothing runs but the API (no workers: nothing
looks at the scans made due). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from app.plumbing.signatures import sign_standard
from bench import cpu
from bench.stack import PG_DSN, ROOT, Stack
from bench.wrk import combined_script

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def seed(stack: Stack, customer_id: str, tag: str, n: int, recipes: int, status: str) -> list[str]:
    """``n`` scans in flight that a batch look tracks (``next_look_at`` set), in ``status``; their engine ids."""
    key_id = stack.sql("SELECT min(id) FROM api_key WHERE customer_id = %s", (customer_id,))[0][0]
    stack.sql(
        "INSERT INTO scan (id, customer_id, api_key_id, kind, target, status, engine_id, recipes_total, recipes_done,"
        " eta_at, created_at, check_errors, livemode, next_look_at, callbacks)"
        " SELECT 'scn_' || %(tag)s || i, %(customer)s, %(key)s, 'email', %(tag)s || i || '@example.com', %(status)s,"
        " 'inv_' || %(tag)s || i, %(recipes)s, 0, now() + interval '1 hour', now(), 0, true,"
        " now() + interval '1 hour', true FROM generate_series(1, %(n)s) AS i",
        {"tag": tag, "customer": customer_id, "key": key_id, "status": status, "recipes": recipes, "n": n})
    stack.sql("UPDATE customer SET in_flight = in_flight + %s WHERE id = %s", (n, customer_id))
    return [f"inv_{tag}{i}" for i in range(1, n + 1)]


def calls(engine_ids: list[str], tag: str, recipes: int, progress_only: bool) -> list[str]:
    """The signed callbacks of ``engine_ids`` as the Lua script reads them, every scan's in its
    order (its first change before its second), the scans interleaved."""
    steps = ([("running", done) for done in range(1, recipes + 1)] if progress_only else
             [("running", 0), *[("running", done) for done in range(1, recipes + 1)], ("done", recipes)])
    now = str(int(datetime.now(UTC).timestamp()))
    lines = []
    for step, (status, done) in enumerate(steps):
        for number, engine_id in enumerate(engine_ids):
            body = json.dumps({"id": engine_id, "reference": f"scn_{tag}{number}", "status": status,
                               "recipes_done": done, "recipes_total": recipes}, separators=(",", ":"))
            msg_id = f"msg_{tag}_{number}_{step}"
            lines.append(f"{msg_id}\t{now}\t{sign_standard(SECRET, msg_id, now, body.encode())}\t{body}")
    return lines


def send(stack: Stack, url: str, tag: str, lines: list[str], threads: int, connections: int, workdir: Path) -> dict:
    """wrk sends ``lines``; once every callback id is remembered (or none more for 5 s), it is
    interrupted (it would wait out its whole ``-d`` after its threads stopped) and reports."""
    path = workdir / "calls.tsv"
    path.write_text("\n".join(lines) + "\n")
    wrk = subprocess.Popen(["wrk", f"-t{threads}", f"-c{connections}", "-d600s", "--timeout=10s",
                            "-s", str(combined_script("callbacks", "callbacks.lua", workdir)), url, "--", str(path),
                            str(threads)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    taken, since = -1, time.monotonic()
    while wrk.poll() is None and time.monotonic() - since < 5:
        time.sleep(0.5)
        now_taken = stack.sql("SELECT count(*) FROM engine_callback WHERE id LIKE %s", (f"msg\\_{tag}\\_%",))[0][0]
        if now_taken >= len(lines):
            break
        if now_taken != taken:
            taken, since = now_taken, time.monotonic()
    wrk.send_signal(signal.SIGINT)  # wrk's own stop: it prints its figures
    out = wrk.communicate(timeout=60)[0]
    statuses = json.loads(re.search(r"BENCH_STATUS (\{.*\})", out).group(1))
    latency = dict(re.findall(r"(p\d+)=(\d+)", out))
    return {"statuses": statuses, "answered": sum(statuses.values()),
            "p50_ms": int(latency["p50"]) / 1000, "p99_ms": int(latency["p99"]) / 1000}


def measure(stack: Stack, url: str, api_pgid: int, backends: cpu.DatabaseBackends, customer_id: str, tag: str,
            args, workdir: Path) -> dict:
    engine_ids = seed(stack, customer_id, tag, args.scans, args.recipes, "running" if args.progress_only else "queued")
    lines = calls(engine_ids, tag, args.recipes, args.progress_only)
    api_before, pg_before, busy_before = cpu.snapshot({"api": api_pgid})["api"], backends.total(), cpu.machine_busy()
    started = time.monotonic()
    sent = send(stack, url, tag, lines, args.wrk_threads, args.connections, workdir)
    took = time.monotonic() - started
    api_s = cpu.snapshot({"api": api_pgid})["api"] - api_before
    pg_s, busy_s = backends.total() - pg_before, cpu.machine_busy() - busy_before
    n = len(lines)  # all sent (the last few answers are not waited for: bench/lua/callbacks.lua)
    return {"callbacks": len(lines), **sent, "seconds": round(took, 1),
            "api_cpu_ms_per_callback": round(api_s * 1000 / n, 3),
            "pg_cpu_ms_per_callback": round(pg_s * 1000 / n, 3),
            "machine_busy_ms_per_callback": round(busy_s * 1000 / n, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callback_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scans", type=int, default=2000, help="scans called back in each measured round")
    parser.add_argument("--recipes", type=int, default=7, help="progress callbacks a scan (one per recipe)")
    parser.add_argument("--progress-only", action="store_true", help="only progress callbacks, of running scans")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-scans", type=int, default=200)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=8)
    parser.add_argument("--wrk-threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="bench-callbacks-"))
    stack = Stack(workdir / "logs", args.web_workers, args.web_threads, args.log_level)
    try:
        stack.reset_database()
        stack.flush_redis()
        customer_id, _ = stack.customer("callbacks")
        url, api = stack.start_api("http://127.0.0.1:9", callback_secret=SECRET)
        backends = cpu.DatabaseBackends(PG_DSN.rsplit("dbname=", 1)[1])
        warm = argparse.Namespace(**{**vars(args), "scans": args.warmup_scans})
        measure(stack, url, api.pid, backends, customer_id, "warm", warm, workdir)
        rounds = [measure(stack, url, api.pid, backends, customer_id, f"r{i}", args, workdir)
                  for i in range(args.rounds)]
    finally:
        stack.close()
    print(json.dumps({"commit": _commit(), "progress_only": args.progress_only, "scans": args.scans,
                      "recipes": args.recipes, "web": f"{args.web_workers}x{args.web_threads}",
                      "rounds": rounds}, indent=1))
    return 0


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
