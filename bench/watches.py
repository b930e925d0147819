"""The watches phase (issue 41 item 5): 1,000,000 watches stored, the scheduler's cost between due
times and per due watch, and the spread of the due times it produces against the tiers' hourly limits.

The watches are written with ``COPY`` (a bench's setup, not the API: 1,000,000 creations would
each make a baseline scan), each as ``create_watch`` would store it: a customer's watches imported
together (one creation time a customer, as a CSV import makes them), the customer's ``i``-th watch
in slot ``i`` (as ``watch_times.place`` gives them), ``next_scan_at`` from the service's own
``app.watches.watch_times.next_due``, so the spread measured is the scheduler's. The
mix (customers at their tier's watch limit, ``--watches`` scales it):

- 24 enterprise customers with 10,000 daily watches each: 240,000 a day, 10,000 falling due an hour;
- 10 business customers with 1,000 daily watches, 10 pro customers with 100 daily watches;
- the rest monthly, on enterprise customers of up to 10,000 watches each.

Then ``python -m bench.watch_cost`` (one process, as a worker's periodic turn) runs the
``watches`` job with nothing due (``--watch-ticks`` times) and with ``--watch-due`` watches due,
their scans submitted to the simulator. The spread: for each customer, the most of its watches
due within any one hour (a sliding hour over the next day), against its tier's hourly limit
(``app.billing.limits.TIER_LIMITS``; the bench's customers have their limits overridden, so the
scans are never refused while measured).
"""
from __future__ import annotations

import io
import json
import secrets
import subprocess
import sys
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import psycopg2

from bench.stack import PG_DSN, ROOT, Stack

DAY_S = 86400
HOUR_S = 3600
COPY_CHUNK = 50_000
# (tier, customers, watches each, interval) at 1,000,000 watches; "monthly" takes the rest.
MIX = (("enterprise", 24, 10_000, "daily"), ("business", 10, 1_000, "daily"), ("pro", 10, 100, "daily"))
COLUMNS = ("id", "customer_id", "api_key_id", "livemode", "kind", "target", "optout_hash", "interval", "slot",
           "status", "created_at", "next_scan_at")


def plan(total: int) -> list[tuple[str, int, int, str]]:
    """``(tier, customers, watches each, interval)`` for ``total`` watches (the mix scaled)."""
    scale = total / 1_000_000
    groups = [(tier, max(1, round(n * scale)), each, interval) for tier, n, each, interval in MIX]
    rest = total - sum(n * each for _, n, each, _ in groups)
    if rest > 0:
        monthly = -(-rest // 10_000)
        groups.append(("enterprise", monthly, -(-rest // monthly), "monthly"))
    return groups


def store(stack: Stack, total: int, log) -> tuple[dict, float]:
    """The watches written; ``{customer_id: tier}`` and the seconds it took."""
    from app.plumbing.models import utcnow
    from app.watches.watch_times import next_due
    now = utcnow()
    tiers: dict[str, str] = {}
    conn = psycopg2.connect(PG_DSN)
    started = time.monotonic()
    written = 0
    for tier, count, each, interval in plan(total):
        for customer_id, _ in stack.customers(count, f"bench-watch-{tier}-{interval}", tier=tier):
            tiers[customer_id] = tier
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM api_key WHERE customer_id = %s LIMIT 1", (customer_id,))
                key_id = cur.fetchone()[0]
            # Imported together two to three intervals ago: a watch's first scheduled scan is one to two
            # intervals after its creation (``next_due``), so by now every phase of the interval is due.
            days = 1 if interval == "daily" else 30
            created = now - timedelta(days=2 * days + secrets.randbelow(days), seconds=secrets.randbelow(DAY_S))
            n = min(each, total - written)
            for first in range(0, n, COPY_CHUNK):
                lines = []
                for i in range(first, min(n, first + COPY_CHUNK)):
                    watch_id = f"wch_{secrets.token_urlsafe(16)}"
                    at = created + timedelta(milliseconds=i)
                    lines.append("\t".join((watch_id, customer_id, key_id, "t", "email",
                                            f"watch.{written + i}@example.com", secrets.token_hex(32), interval,
                                            str(i), "active", at.isoformat(),
                                            next_due(customer_id, i, interval, at, now).isoformat())))
                with conn.cursor() as cur:
                    cur.copy_expert(f"COPY watch ({', '.join(COLUMNS)}) FROM STDIN", io.StringIO("\n".join(lines) + "\n"))
                conn.commit()
            written += n
        log(f"watches: {written:,} stored")
    conn.close()
    stack.sql("VACUUM ANALYZE watch")
    return tiers, time.monotonic() - started


def spread(stack: Stack, tiers: dict[str, str]) -> dict:
    """The due times over the next day: per customer the most due within one sliding hour, against
    its tier's hourly limit; the watches due in the busiest hour of all."""
    from app.billing.limits import TIER_LIMITS
    rows = stack.sql("SELECT customer_id, extract(epoch from next_scan_at) FROM watch WHERE status = 'active' "
                     "AND next_scan_at < (now() AT TIME ZONE 'utc') + interval '1 day'")
    by_customer: dict[str, list[float]] = defaultdict(list)
    for customer_id, at in rows:
        by_customer[customer_id].append(float(at))
    worst: dict[str, dict] = {}
    for customer_id, times in by_customer.items():
        tier = tiers[customer_id]
        most = max_in_window(sorted(times), HOUR_S)
        limit = TIER_LIMITS[tier].hour
        w = worst.setdefault(tier, {"customers": 0, "max_per_hour": 0, "hour_limit": limit, "over_limit": 0})
        w["customers"] += 1
        w["max_per_hour"] = max(w["max_per_hour"], most)
        w["over_limit"] += most > limit
    every = sorted(float(at) for _, at in rows)
    return {"due_next_day": len(every), "busiest_hour": max_in_window(every, HOUR_S),
            "mean_per_hour": round(len(every) / 24), "by_tier": worst,
            "customers_over_their_hourly_limit": sum(w["over_limit"] for w in worst.values())}


def claim_plan(stack: Stack) -> list[str]:
    """``EXPLAIN ANALYZE`` of the scheduler's claim (``app.watches.statements.CLAIM``) a second before the
    earliest due time: what a run of the job costs PostgreSQL with nothing due (rolled back)."""
    from app.watches.statements import CLAIM
    conn = psycopg2.connect(PG_DSN)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT min(next_scan_at) - interval '1 second', max(next_scan_at) + interval '1 day' "
                        "FROM watch WHERE status = 'active'")
            before, hold = cur.fetchone()
            # Every customer's claim (the periodic job's: no ``--customer`` filter in its ``%s``).
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + (CLAIM % "").replace("?", "%s"), (hold, "active", before, 50))
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.rollback()
        conn.close()


def max_in_window(times: list[float], width: float) -> int:
    """The most of the sorted ``times`` within any window ``width`` long."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= width:
            start += 1
        best = max(best, end - start + 1)
    return best


def watches_phase(stack: Stack, opts, out: Path, log) -> dict:
    stack.reset_database()
    stack.flush_redis()
    sim = stack.start_simulator(0.001, "sim-watches")
    total = opts.watches
    log(f"watches: storing {total:,} by COPY ({plan(total)})")
    tiers, stored_s = store(stack, total, log)
    result: dict = {"watches": stack.sql("SELECT count(*) FROM watch")[0][0], "stored_s": round(stored_s, 1),
                    "mix": [dict(zip(("tier", "customers", "watches_each", "interval"), g)) for g in plan(total)],
                    "table_bytes": stack.sql("SELECT pg_total_relation_size('watch')")[0][0]}
    result["spread"] = spread(stack, tiers)
    result["claim_plan_nothing_due"] = claim_plan(stack)
    log(f"watches: the job with nothing due ({opts.watch_ticks} runs), then {opts.watch_due:,} due")
    done = subprocess.run([sys.executable, "-m", "bench.watch_cost", "--ticks", str(opts.watch_ticks),
                           "--due", str(opts.watch_due)], cwd=ROOT,
                          env=stack.env("development", ENGINE_URL=sim, LOG_LEVEL="WARNING"),
                          capture_output=True, text=True, timeout=1800)
    (out / "watches.log").write_text(done.stdout + done.stderr[-20000:])
    if done.returncode != 0:
        raise RuntimeError(f"bench.watch_cost exited {done.returncode}: see {out / 'watches.log'}")
    result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    idle = result["idle_tick"]
    # What the job costs in a day with nothing due, at the default WATCH_INTERVAL_SECONDS (60).
    result["idle_cpu_s_per_day"] = round((idle["worker_cpu_ms"] + idle["postgres_cpu_ms"]) * 1440 / 1000, 2)
    return result


def markdown(w: dict) -> list[str]:
    idle, due, s = w["idle_tick"], w["due"], w["spread"]
    per = due["per_due_watch_ms"]
    lines = [f"## Watches: {w['watches']:,} stored (scheduler cost)", "",
             f"Stored by COPY in {w['stored_s']} s; table `watch` with its indexes {w['table_bytes'] / 2**20:.0f} MB.",
             "",
             "| | wall ms | worker CPU ms | PostgreSQL CPU ms |", "|---|---:|---:|---:|",
             f"| `watches` job, nothing due (per run, {idle['ticks']} runs) | {idle['wall_ms']} | "
             f"{idle['worker_cpu_ms']} | {idle['postgres_cpu_ms']} |",
             f"| per due watch ({due['watches_due']:,} due: {due['report']}) | {per['wall']} | {per['worker_cpu']} | "
             f"{per['postgres_cpu']} |", "",
             "The claim's plan with nothing due:", "", "```", *w["claim_plan_nothing_due"], "```", "",
             f"Nothing due, once a minute: {w['idle_cpu_s_per_day']} CPU seconds a day (worker + PostgreSQL).", "",
             f"Due times over the next day: {s['due_next_day']:,} (mean {s['mean_per_hour']:,} an hour, busiest "
             f"sliding hour {s['busiest_hour']:,}); customers whose own watches exceed their tier's hourly limit "
             f"in some hour: **{s['customers_over_their_hourly_limit']}**.", "",
             "| Tier | customers | most of one customer's watches due in one hour | tier's hourly limit |",
             "|---|---:|---:|---:|"]
    for tier, t in s["by_tier"].items():
        lines.append(f"| {tier} | {t['customers']} | {t['max_per_hour']} | {t['hour_limit']} |")
    return lines + [""]
