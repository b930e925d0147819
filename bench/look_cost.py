"""What a batch look costs per scan, by part: the claim and the one UPDATE recording the looks
(D24; the scale phase's profile, isolated).

On a scratch database (it must be at the current schema, e.g. ``flask db upgrade``; its scans
are emptied, and it needs one API key: ``python -m bench.accounts 1 x``), inserts ``-n`` queued
scans all due, then runs ``--batches`` claims of 100 from one thread without any engine:
first claim + record of progress only (one transaction, as ``look_due``: the claim is its row
locks), then with the record also moving each (queued) scan to ``running``, as a first look at
a running scan does. Prints looks per second and milliseconds per batch of each part. Not a
timed goal; a figure for the analysis.

    DATABASE_URL=postgresql://.../scratch REDIS_URL=redis://.../N python -m bench.look_cost [-n 100000]
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.look_cost", description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=100000, help="scans in flight (default 100000)")
    p.add_argument("--batches", type=int, default=30, help="claims of 100 per shape (default 30)")
    opts = p.parse_args(argv)
    from app import create_app
    from app.extensions import db
    from app.plumbing.db import transaction
    from app.plumbing.models import utcnow
    from app.scans.models import IN_FLIGHT
    from app.tracking.statements import scan_states
    create_app()
    with db.connection_context():
        customer_id, key_id = db.execute_sql("SELECT customer_id, id FROM api_key LIMIT 1").fetchone()
        db.execute_sql("TRUNCATE scan CASCADE")
        db.execute_sql("""
            INSERT INTO scan (id, customer_id, api_key_id, kind, target, status, engine_id, recipes_total,
                              recipes_done, eta_at, created_at, check_errors, livemode, next_look_at, look_generation)
            SELECT 'scn_cost' || g, %s, %s, 'email', 'cost.' || g || '@example.com', 'queued', 'inv_x', 6, 0,
                   now() AT TIME ZONE 'utc' + interval '100 s', now() AT TIME ZONE 'utc', 0, true,
                   now() AT TIME ZONE 'utc' - interval '1 s', 0
            FROM generate_series(1, %s) AS g""", (customer_id, key_id, opts.n))
        db.execute_sql("ANALYZE scan")
        shapes = (("claim + record", False), ("claim + record moving each scan to running", True))
        for label, moving in shapes:
            claim_s = record_s = 0.0
            looks = 0
            started = time.perf_counter()
            for _ in range(opts.batches):
                now = utcnow()
                a = time.perf_counter()
                with transaction():  # as look_due: the claim's locks last until the record commits
                    claimed = scan_states.claim_due(statuses=IN_FLIGHT, now=now, limit=100, hold_seconds=30)
                    b = time.perf_counter()
                    if not moving:
                        scan_states.commit_without_flush()
                    scan_states.record_looks([(s.id, s.look_generation, now + timedelta(seconds=10), 0, 6, 1, moving)
                                              for _, s in claimed], statuses=IN_FLIGHT, queued="queued",
                                             running="running", now=now)
                d = time.perf_counter()
                claim_s, record_s = claim_s + b - a, record_s + d - b
                looks += len(claimed)
            elapsed = time.perf_counter() - started
            per = 1000 / opts.batches
            print(f"{label}: {looks / elapsed:.0f} looks/s; per batch of 100: claim {claim_s * per:.1f} ms, "
                  f"record_looks {record_s * per:.1f} ms")
        db.execute_sql("TRUNCATE scan CASCADE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
