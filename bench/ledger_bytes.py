"""Ledger bytes per read: a row per read (before D24) against reads summed per minute.

On a scratch database (the ledger is emptied between shapes), N reads are charged through
``charges.charge_call`` in three shapes: one row each with its path and request id (how every
read was charged before), summed with ``--per-minute`` reads of one endpoint a minute, and
summed with one read a minute (the worst case: every read its own row). After each, the
ledger's ``pg_total_relation_size`` (table, TOAST and indexes) is divided by N, before and
after a ``VACUUM`` (a summed row is updated in place: its old versions are dead until pruned).
Not a timed measure. Prints one JSON object.

    python -m bench.ledger_bytes --database-url postgresql://... --redis-url redis://... [-n 20000]
"""
from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
from datetime import timedelta


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ledger_bytes", description=__doc__.splitlines()[0])
    p.add_argument("--database-url", required=True, help="a scratch database: its ledger is emptied")
    p.add_argument("--redis-url", required=True)
    p.add_argument("-n", type=int, default=20000, help="reads per shape (default 20000)")
    p.add_argument("--per-minute", type=int, default=100, help="reads of one endpoint a minute (default 100)")
    opts = p.parse_args(argv)
    from app import create_app
    from app.billing import charges, customers
    from app.extensions import db
    from app.migrations import upgrade
    from app.plumbing.models import utcnow
    create_app({"APP_ENV": "test", "DATABASE_URL": opts.database_url, "REDIS_URL": opts.redis_url,
                "SECRET_KEY": "ledger-bytes", "ENGINE_URL": "http://127.0.0.1:9", "ENGINE_TOKEN": "x",
                "INSTANCE_PATH": tempfile.mkdtemp(prefix="ledger-bytes-")})
    start = utcnow().replace(second=0, microsecond=0)  # naive UTC, as the app stores times

    def per_call(i: int) -> None:  # before: a row per read, its path and request id
        charges.charge_call(customer.id, f"req_{secrets.token_hex(12)}", start + timedelta(seconds=i),
                            f"GET /api/v1/scan/scn_{secrets.token_urlsafe(16)}")

    def summed(per_minute: int):
        def charge(i: int) -> None:
            charges.charge_call(customer.id, None, start + timedelta(minutes=i // per_minute),
                                "GET /api/v1/scan/{scan_id}", read_of=True)
        return charge

    def size() -> int:
        return db.execute_sql("SELECT pg_total_relation_size('credit_ledger')").fetchone()[0]

    figures = {"reads": opts.n}
    with db.connection_context():
        upgrade()
        customer = customers.create_customer("ledger bytes", "enterprise", 10 ** 12)
        for name, charge in (("row per read", per_call), (f"summed, {opts.per_minute} a minute",
                                                           summed(opts.per_minute)),
                             ("summed, 1 a minute", summed(1))):
            db.execute_sql("TRUNCATE credit_ledger")
            empty = size()
            for i in range(opts.n):
                charge(i)
            grown = size() - empty
            db.execute_sql("VACUUM credit_ledger")
            rows = db.execute_sql("SELECT count(*) FROM credit_ledger").fetchone()[0]
            figures[name] = {"rows": rows, "bytes_per_read": round(grown / opts.n, 1),
                             "bytes_per_read_after_vacuum": round((size() - empty) / opts.n, 1)}
        db.execute_sql("TRUNCATE credit_ledger")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
