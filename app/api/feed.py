"""The events list (and stream): every event of the account's scans, stored once per mode.

Views stay thin: ``services.feed`` owns the query and raises ``InvalidRequest`` (400) for a bad
filter or cursor; authentication, charging (1 credit, as every call) and the limit headers are
``app.api.hooks``'s.
"""
from __future__ import annotations

from flask.views import MethodView

from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.scans import HEADERS, SECURITY, documented_errors
from app.schemas.events import EventListArgs, EventListSchema
from app.services import access, feed

blp = ApiBlueprint("events", __name__, url_prefix="/api/v1",
                   description="Events: what happened to your scans, to read instead of (or besides) webhooks.")

LIST_EXAMPLE = {"ok": True, "has_more": True, "data": [
    {"event_id": "evt_1042", "event": "scan.completed", "created_at": "2026-11-21T12:03:05Z", "livemode": True,
     "body": {"event": "scan.completed", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "livemode": True,
              "target": "jane.doe@example.com", "kind": "email", "status": "completed", "purpose": None,
              "case_ref": None, "completed_at": "2026-11-21T12:03:05Z", "result": {}}},
    {"event_id": "evt_1040", "event": "scan.running", "created_at": "2026-11-21T12:02:10Z", "livemode": True,
     "body": {"event": "scan.running", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "livemode": True,
              "target": "jane.doe@example.com", "kind": "email", "status": "running", "purpose": None,
              "case_ref": None, "created_at": "2026-11-21T12:02:00Z", "eta_seconds": 55}}]}


@blp.route("/events")
class EventList(MethodView):
    @hooks.api_call(scope=access.SCANS_READ)
    @blp.doc(security=SECURITY, summary="List events", operationId="listEvents", tags=["events"])
    @blp.arguments(EventListArgs, location="query", as_kwargs=True)
    @blp.response(200, EventListSchema, headers=HEADERS, example=LIST_EXAMPLE,
                  description="One page of events, newest first.")
    @documented_errors(400, 401, 402, 503, overrides={
        400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid; with `details`)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def get(self, key, events=None, **query):
        """Every event of your scans (of the calling key's mode: a test key sees test scans' events), newest
        first, whether or not a webhook endpoint listed it: a scan started, completed or failed. Each carries
        the body a webhook endpoint receives. Events are kept as long as webhook deliveries, then removed.
        Costs {price} per page."""
        return hooks.render(feed.list_events(key.customer_id, livemode=key.livemode, events_filter=events, **query))
