"""``python -m simulator.scenarios.operator_query attempts KEY_ID``: the webhook attempt log of a key.

Read-only operator view for the QA scenarios: the operator CLI (``flask --app wsgi``) has no
command for the delivery attempt log, which lives in the tables ``webhook_delivery`` and
``delivery_attempt`` (the portal shows it on the key's page). Configured like every
operator command, from the environment (``DATABASE_URL``, read by ``app.plumbing.config``). Prints
one JSON object::

    {"key_id": "...", "deliveries": [{"delivery_id", "event", "scan_id", "status", "url",
      "created_at", "finished_at", "attempts": [{"number", "status_code", "error", "outcome",
      "duration_ms", "started_at", "url"}, ...]}, ...]}

deliveries oldest first, attempts by number.
"""
from __future__ import annotations

import argparse
import json
import sys


def _iso(value):
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if hasattr(value, "strftime") else str(value)


def attempt_log(key_id: str) -> dict:
    from app.extensions import db
    from app.webhooks.models import DeliveryAttempt, WebhookDelivery

    with db.connection_context():
        deliveries = list(WebhookDelivery.select()
                          .where(WebhookDelivery.api_key == key_id)
                          .order_by(WebhookDelivery.created_at, WebhookDelivery.id))
        rows: dict[str, list] = {d.id: [] for d in deliveries}
        if deliveries:
            for attempt in (DeliveryAttempt.select()
                            .where(DeliveryAttempt.delivery.in_(list(rows)))
                            .order_by(DeliveryAttempt.number)):
                rows[attempt.delivery_id].append({
                    "number": attempt.number, "status_code": attempt.status_code, "error": attempt.error,
                    "outcome": attempt.outcome, "duration_ms": attempt.duration_ms,
                    "started_at": _iso(attempt.started_at), "url": attempt.url,
                })
    return {"key_id": key_id, "deliveries": [{
        "delivery_id": d.id, "event": d.event, "scan_id": d.scan_id, "status": d.status, "url": d.url,
        "created_at": _iso(d.created_at), "finished_at": _iso(d.finished_at), "attempts": rows[d.id],
    } for d in deliveries]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.scenarios.operator_query",
                                     description="Read-only operator queries for the QA scenarios.")
    sub = parser.add_subparsers(dest="command", required=True)
    attempts = sub.add_parser("attempts", help="the webhook deliveries and attempts of one API key")
    attempts.add_argument("key_id")
    args = parser.parse_args(argv)

    # The service's own settings (DATABASE_URL or its default), but only the database is
    # bound: building the whole app would triple the cost of a query the runner polls.
    from app.plumbing import config as app_config
    from app.plumbing.db import database_url, init_db
    init_db(database_url(app_config.finalize(app_config.load_settings())))
    try:
        answer = attempt_log(args.key_id)
    except Exception as exc:  # one JSON line for the runner, like the operator CLI's --json
        print(json.dumps({"ok": False, "error": f"{exc.__class__.__name__}: {exc}"}))
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
