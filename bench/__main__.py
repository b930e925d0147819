"""``python -m bench`` (``make bench``): benchmark the real stack on this machine.

Brings up PostgreSQL's database ``bench`` (schema recreated), Redis db 11 (flushed),
the simulator, gunicorn serving the API and gunicorn serving a bare Flask baseline
with the same settings, and workers, all on 127.0.0.1; measures; stops everything;
writes ``bench/results/<UTC timestamp>/`` (text only) and prints the summary.

Phases (``--phases``, default all):
  http     wrk against the baseline and the four scan endpoints, same connections and
           duration for each, then again on one connection; SQL/Redis counts per request
  workers  tracking looks completed per second and webhook deliveries per second, one
           worker process each
  latency  engine done -> webhook received, two workers
  scale    many scans in flight tracked by two workers, batch looks (auto) beside today's job
           per scan (off): look lag, engine requests/s, Redis memory, worker CPU; ledger bytes per read
  growth   reads and creations at 1k, 100k and 1M stored scans (filled by SQL): rate,
           CPU and database work per call, bytes per stored scan
  held     2,000 waits and event streams held by the held-connection server while wrk reads
           on the threaded API: reads' rate beside idle, waiters' delay after the final state
  watches  1M watches stored (COPY): the scheduler's cost with nothing due and per due watch,
           the due times' spread against the tiers' hourly limits

Everything is bounded: ``--duration`` s per target (default 10; ``--quick``: 3 s and
smaller worker, latency and scale runs).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import phases, profile, report, wrk
from bench.stack import REDIS_DB, ROOT, Stack

PHASES = ("http", "workers", "latency", "scale", "growth", "webhooks", "held", "watches")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="about 3 s per target and small worker/scale runs")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    p.add_argument("--duration", type=float, help="seconds per wrk target (default 10, quick 3)")
    p.add_argument("--connections", type=int, default=16, help="wrk connections (default 16)")
    p.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--targets", default="", help="comma-separated subset of the http targets (baseline, read, "
                   "read_many, read_queued, bulk_read, create, create_many, bulk_create, baseline_end)")
    p.add_argument("--customers", type=int, default=16, help="customers of the *_many targets (default 16)")
    p.add_argument("--no-single", dest="single_connection", action="store_false",
                   help="skip the one-connection pass")
    p.add_argument("--web-workers", type=int, default=2, help="gunicorn worker processes (WEB_CONCURRENCY)")
    p.add_argument("--web-threads", type=int, default=8, help="gunicorn threads per worker (GUNICORN_THREADS)")
    p.add_argument("--log-level", default="INFO", help="LOG_LEVEL of the API and workers (default INFO)")
    p.add_argument("--worker-scans", type=int, help="scans for the worker throughput phase (default 2000)")
    p.add_argument("--latency-scans", type=int, help="scans for the latency phase (default 300)")
    p.add_argument("--latency-rate", type=float, default=10.0, help="scans created per second (default 10)")
    p.add_argument("--latency-time-scale", type=float, default=0.05, help="simulator time scale (default 0.05)")
    p.add_argument("--scale-scans", type=int, help="scans in flight for the scale phase's callbacks run, or its "
                   "one run when --scale-mode is not both (default 100000; quick 5000)")
    p.add_argument("--scale-eta-scans", type=int,
                   help="scans in flight of the auto run when --scale-mode both (default 25000; quick 2000)")
    p.add_argument("--scale-mode", choices=("both", "callbacks", "auto"), default="both",
                   help="the scale phase's tracking: callbacks (the engine calls back, E7: ENGINE_CALLBACK_URL set), "
                        "auto (batch looks that follow the eta, no callbacks), both (default: callbacks at "
                        "--scale-scans, then auto at --scale-eta-scans); the RQ job per scan once compared, 'off', "
                        "is gone with ENGINE_BATCH_LOOK")
    p.add_argument("--scale-off-scans", type=int,
                   help="scans in flight of the off run when --scale-mode both (default 10000; quick 1000)")
    p.add_argument("--scale-time-scale", type=float,
                   help="simulator time scale of the scale phase (default 1: scans of 60 to 180 s; quick 0.1)")
    p.add_argument("--scale-poll", type=float, default=10.0,
                   help="ENGINE_POLL_SECONDS for the scale phase (default 10, the service's default)")
    p.add_argument("--scale-batch-size", type=int, default=100, help="ENGINE_BATCH_SIZE (default 100)")
    p.add_argument("--scale-seed", choices=("sql", "api"), default="sql",
                   help="how the auto run creates its scans: sql (real engine submissions, rows by COPY; default) or "
                        "api (bulk creation calls; about 1,000 scans/s here); the off run always uses api")
    p.add_argument("--scale-spread", action="store_true",
                   help="sql seeding: each scan's first look at a random point of one poll interval, as a steady "
                        "stream of creations spreads them, instead of min(eta - 0.5 s, poll) after the submission "
                        "(which makes all 100,000 first looks fall due together); without callbacks only: with "
                        "them a scan's first look is the safety net one poll past its eta, as creation schedules it, "
                        "and an early look would be one a scan with callbacks never has")
    p.add_argument("--scale-customers", type=int, default=1,
                   help="customers the scale phase's scans belong to (default 1, as in round 8; a customer's events "
                        "are stored under its lock, last in each look's transaction: a one-customer run measures that queue)")
    p.add_argument("--scale-seed-threads", type=int, default=4,
                   help="bulk creation calls at a time while the scale phase creates its scans (default 4)")
    p.add_argument("--scale-max-s", type=float,
                   help="stop a scale run this long after its creation began even if scans are in flight "
                        "(default 180 x time scale + 240)")
    p.add_argument("--scale-off-max-s", type=float, default=150.0,
                   help="stop the off run this long after its creation began (default 150; its per-scan and per-look "
                        "figures are what it is for: two processes fall far behind a job per scan)")
    p.add_argument("--scale-profile", type=float, default=0.0,
                   help="py-spy the two workers for this many seconds from the end of the creation: worker 0 by "
                        "wall clock (profile-scale-MODE-wall.txt), worker 1 by CPU (-cpu.txt); python -m bench.profile "
                        "reads them (default 0: off)")
    p.add_argument("--scale-ledger-reads", type=int,
                   help="reads a shape for the ledger's bytes per read after the scale runs (default 20000; quick "
                        "2000; 0: skip)")
    p.add_argument("--scale-ledger-per-minute", type=int, default=100,
                   help="reads of one endpoint a minute for the summed ledger shape (default 100)")
    p.add_argument("--growth-sizes", help="stored scans of the growth phase (default 1000,100000,1000000; "
                   "quick 1000,20000)")
    p.add_argument("--growth-duration", type=float, default=5.0, help="seconds per growth target (default 5)")
    p.add_argument("--watches", type=int, help="watches stored for the watches phase (default 1000000; quick 50000)")
    p.add_argument("--watch-due", type=int, help="watches made due and scanned in the watches phase (default 1000; "
                   "quick 200)")
    p.add_argument("--watch-ticks", type=int, default=200,
                   help="runs of the watches job with nothing due (default 200)")
    p.add_argument("--profile", action="store_true",
                   help="py-spy CPU profiles of the API during each loaded API target (profile-*.txt; "
                        "python -m bench.profile reads them)")
    p.add_argument("--pg-async-commit", action="store_true",
                   help="experiment: run with synchronous_commit=off on database bench (reset at the end)")
    p.add_argument("--held-customers", type=int, default=100,
                   help="held phase: customers (a key holds at most 100 waits and streams; default 100)")
    p.add_argument("--held-waits", type=int, default=1500, help="held phase: waits held at once (default 1500)")
    p.add_argument("--held-streams", type=int, default=500, help="held phase: event streams (default 500)")
    p.add_argument("--held-workers", type=int, default=1,
                   help="held phase: processes of the held-connection server (HELD_WORKERS, default 1)")
    p.add_argument("--held-time-scale", type=float, default=0.4,
                   help="held phase: simulator time scale (default 0.4: scans of 24-72 s)")
    p.add_argument("--held-open-rate", type=float, default=400.0,
                   help="held phase: waits and streams opened per second (default 400)")
    p.add_argument("--held-deadline", type=float, default=240.0,
                   help="held phase: seconds the clients wait for every final answer (default 240)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of unmeasured load before each target")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between two wrk targets")
    p.add_argument("--out", type=Path, help="results directory (default bench/results/<UTC timestamp>)")
    p.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (in a temp directory)")
    opts = p.parse_args(argv)
    quick = opts.quick
    opts.duration = opts.duration or (3.0 if quick else 10.0)
    opts.single_duration = max(2.0, opts.duration / 2)
    opts.worker_scans = opts.worker_scans or (500 if quick else 2000)
    opts.latency_scans = opts.latency_scans or (100 if quick else 300)
    opts.scale_scans = opts.scale_scans or (5000 if quick else 100000)
    opts.watches = opts.watches or (50_000 if quick else 1_000_000)
    opts.watch_due = opts.watch_due or (200 if quick else 1000)
    opts.scale_eta_scans = opts.scale_eta_scans or (2000 if quick else 25000)
    opts.scale_off_scans = opts.scale_off_scans or (1000 if quick else 10000)
    opts.scale_time_scale = opts.scale_time_scale or (0.1 if quick else 1.0)
    opts.scale_max_s = opts.scale_max_s or 180 * opts.scale_time_scale + 240
    if opts.scale_ledger_reads is None:
        opts.scale_ledger_reads = 2000 if quick else 20000
    opts.growth_sizes = [int(v) for v in (opts.growth_sizes or ("1000,20000" if quick else "1000,100000,1000000"))
                         .split(",")]
    opts.targets = [name.strip() for name in opts.targets.split(",") if name.strip()]
    opts.phases = [name.strip() for name in opts.phases.split(",") if name.strip()]
    unknown = set(opts.phases) - set(PHASES)
    if unknown:
        p.error(f"unknown phases: {', '.join(sorted(unknown))}")
    return opts


def main(argv=None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.profile and not profile.available():
        print("error: py-spy is not installed (pip install -r requirements-test.txt)", file=sys.stderr)
        return 2
    if "http" in opts.phases and not wrk.wrk_available():
        print("error: wrk is not installed (apt-get install -y wrk)", file=sys.stderr)
        return 2
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = opts.out or ROOT / "bench" / "results" / run_id
    out.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix=f"scan-bench-{run_id}-"))
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[bench {time.monotonic() - started:6.1f}s] {message}", flush=True)

    stack = Stack(logdir, opts.web_workers, opts.web_threads, opts.log_level)
    summary = {"run": run_id, "load_before": report.load_average(),
               "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(opts).items()}}
    ok = False
    try:
        summary["machine"] = report.machine(stack)
        log(f"results in {out}, process logs in {logdir}")
        if opts.pg_async_commit:
            stack.set_async_commit(True)
        for name in opts.phases:
            log(f"phase {name}")
            summary[name] = getattr(phases, f"{name}_phase")(stack, opts, out, log)
            if not stack.redis().exists("bench:canary"):
                summary[name]["redis_flushed"] = True
                log(f"WARNING: Redis db {REDIS_DB} was flushed by another process during phase {name}")
            stack.stop_all()  # the next phase starts its own processes
            (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        ok = True
    finally:
        stack.close()
        if opts.pg_async_commit:
            stack.set_async_commit(False)
        summary["load_after"] = report.load_average()
        summary["elapsed_s"] = round(time.monotonic() - started, 1)
        if "http" in summary:
            summary["ratios"] = report.ratios(summary["http"])
        summary.setdefault("ratios", {})
        summary["goals"] = report.goals(summary)
        summary.setdefault("machine", {})
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        if summary["machine"]:
            (out / "summary.md").write_text(report.markdown(summary))
        if ok and not opts.keep_logs:
            shutil.rmtree(logdir, ignore_errors=True)
        else:
            print(f"process logs kept in {logdir}", file=sys.stderr)
    if (out / "summary.md").exists():
        print((out / "summary.md").read_text())
    log(f"done; results in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
