"""The activity log's name for each API route (D20): one table, keyed by method and route.

A new /api/v1 route needs its line here: the app refuses to start without one
(``check_named``, run with ``api_calls.check_accounted``), so that no call is logged without
a name. Routes are written as the OpenAPI document writes them (``{scan_id}``).
"""
from __future__ import annotations

import re
from functools import lru_cache

ROUTE_ARGUMENT = re.compile(r"<(?:[^:>]+:)?([^>]+)>")  # <scan_id:scan_id> -> {scan_id}

ACTIONS = {
    "POST /api/v1/scan": "scan.create",
    "GET /api/v1/scan/{scan_id}": "scan.read",
    "DELETE /api/v1/scan/{scan_id}": "scan.erase",
    "POST /api/v1/scan/{scan_id}/rerun": "scan.rerun",
    "POST /api/v1/scan/{scan_id}/findings/{finding_id}/feedback": "finding.feedback",
    "POST /api/v1/scan/bulk": "bulk.create",
    "GET /api/v1/scan/bulk/{bulk_id}": "bulk.read",
    "DELETE /api/v1/scan/bulk/{bulk_id}": "bulk.erase",
    "GET /api/v1/scans": "scans.list",
    "GET /api/v1/deliveries": "deliveries.list",
    "POST /api/v1/deliveries/{delivery_id}/redeliver": "delivery.redeliver",
    "GET /api/v1/endpoints": "endpoints.list",
    "POST /api/v1/endpoints": "endpoint.create",
    "GET /api/v1/endpoints/{endpoint_id}": "endpoint.read",
    "PATCH /api/v1/endpoints/{endpoint_id}": "endpoint.update",
    "DELETE /api/v1/endpoints/{endpoint_id}": "endpoint.delete",
    "POST /api/v1/endpoints/{endpoint_id}/roll-secret": "endpoint.roll_secret",
    "POST /api/v1/endpoints/{endpoint_id}/switch-secret": "endpoint.switch_secret",
    "POST /api/v1/endpoints/{endpoint_id}/recover": "endpoint.recover",
    "GET /api/v1/activity": "activity.list",
    "GET /api/v1/activity/export": "activity.export",
    "GET /api/v1/events": "events.list",
    "GET /api/v1/events/stream": "events.stream",
    "GET /api/v1/account": "account.read",
    "GET /api/v1/sources": "sources.list",
    "POST /api/v1/watches": "watch.create",
    "POST /api/v1/watches/bulk": "watches.create",
    "GET /api/v1/watches": "watches.list",
    "GET /api/v1/watches/{watch_id}": "watch.read",
    "PATCH /api/v1/watches/{watch_id}": "watch.update",
    "DELETE /api/v1/watches/{watch_id}": "watch.end",
    "POST /api/v1/watches/{watch_id}/run": "watch.run",
}


@lru_cache(maxsize=256)
def route_of(rule: str) -> str:
    return ROUTE_ARGUMENT.sub(r"{\1}", rule)


@lru_cache(maxsize=256)
def action_for(method: str, rule: str) -> str:
    """The action of a call to ``rule`` (werkzeug's form, ``<scan_id:scan_id>``)."""
    route = f"{method} {route_of(rule)}"
    return ACTIONS.get(route, route)  # never reached for an /api/v1 route: check_named refused to start


def check_named(app) -> None:
    """Refuse to start when an /api/v1 route has no action name."""
    missing = []
    for rule in app.url_map.iter_rules():
        view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
        if view_class is None or not rule.rule.startswith("/api/v1/"):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            if f"{method} {route_of(rule.rule)}" not in ACTIONS:
                missing.append(f"{method} {route_of(rule.rule)}")
    if missing:
        raise RuntimeError(f"no activity log action for {', '.join(missing)}: add it to app/actions.py")
