"""Benchmark customers in one process: what the operator CLI does, N times.

For each customer: ``customers create --tier enterprise --credits 10^12``, then
``customers limits --inflight/--hour/--day 100000000`` (no 402 or 429 can distort a
figure), then ``keys issue`` (with a webhook URL and secret when given), through the
same service functions as ``app/cli.py``. Prints one JSON list of
``{"customer_id", "api_key"}``.

    python -m bench.accounts COUNT NAME_PREFIX [--webhook-url URL --webhook-secret SECRET]
"""
from __future__ import annotations

import argparse
import json
import sys

HUGE_CREDITS = 10 ** 12
HUGE_LIMIT = 100_000_000  # fits the limits' INTEGER columns


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accounts")
    parser.add_argument("count", type=int)
    parser.add_argument("prefix")
    parser.add_argument("--tier", default="enterprise")
    parser.add_argument("--webhook-url")
    parser.add_argument("--webhook-secret")
    args = parser.parse_args(argv)
    from app import create_app
    from app.accounts import admin
    from app.billing import customers
    from app.extensions import db
    from app.webhooks import key_settings
    create_app()
    out = []
    with db.connection_context():
        for i in range(args.count):
            name = args.prefix if args.count == 1 else f"{args.prefix}-{i}"
            customer = customers.create_customer(name, args.tier, HUGE_CREDITS)
            admin.set_limits(customer.id, inflight=HUGE_LIMIT, hour=HUGE_LIMIT, day=HUGE_LIMIT)
            _, api_key = key_settings.issue_key(customer.id, name, args.webhook_url, args.webhook_secret)
            out.append({"customer_id": customer.id, "api_key": api_key})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
