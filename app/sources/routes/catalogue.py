"""``GET /api/v1/sources``: the engine's sources and their health (any key, any scope, 1 credit).

The view stays thin: ``app.sources.health.list_sources`` builds the list; authentication,
charging and the limit headers are ``app.api.hooks``'s.
"""
from __future__ import annotations

from flask.views import MethodView

from app.accounts import access
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, SECURITY, documented_errors
from app.sources import health
from app.sources.schemas import SourceListSchema

blp = ApiBlueprint("sources", __name__, url_prefix="/api/v1",
                   description="The sources the investigations consult, and how well each answers.")

EXAMPLE = {"ok": True, "data": [
    {"id": "breach_index", "name": "Breach Index", "kinds": ["email", "phone", "username"], "status": "healthy",
     "since": "2026-11-20T08:00:00Z", "answered_ratio": 0.99, "p95_latency_ms": 1000,
     "last_probe_at": "2026-11-21T11:45:00Z", "last_probe_ok": True, "quarantined": False},
    {"id": "gravatar", "name": "Gravatar", "kinds": ["email", "phone", "username"], "status": "broken",
     "since": "2026-11-21T11:30:00Z", "answered_ratio": 1.0, "p95_latency_ms": 250,
     "last_probe_at": "2026-11-21T11:45:00Z", "last_probe_ok": False, "quarantined": True}]}


@blp.route("/sources")
class SourceList(MethodView):
    @hooks.api_call(scope=access.ANY_SCOPE, action="sources.list")
    @blp.doc(security=SECURITY, summary="List the sources and their health", operationId="listSources",
             tags=["sources"])
    @blp.response(200, SourceListSchema, headers=HEADERS, example=EXAMPLE,
                  description="Every source, with its health over the last hour.")
    @documented_errors(401, 402, 503, blueprint=blp)
    @blp.priced("call")
    def get(self, key):
        """Every source the investigations consult: its status, since when, the share of its answers that were
        usable and its latency over the last hour, its last check against identities it must and must not find,
        and whether it is left out of new scans for now (a source that is down or answers wrongly is left out
        until it answers rightly again; your scans list it as skipped, and a re-run asks it once it is back).
        The same, hour by hour over a day, is on the public status page `/status` (`/status.json`).
        Costs {price}."""
        return hooks.render({"ok": True, "data": health.list_sources()})
