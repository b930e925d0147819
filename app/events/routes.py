"""The events list (and stream): every event of the account's scans, stored once per mode.

Views stay thin: ``app.events.feed`` owns the query and raises ``InvalidRequest`` (400) for a bad
filter or cursor; authentication, charging (1 credit, as every call) and the limit headers are
``app.api.hooks``'s.
"""
from __future__ import annotations

from flask import Response, request, stream_with_context
from flask.views import MethodView

from app.accounts import access
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, SECURITY, documented_errors
from app.events import feed, waits
from app.events.schemas import EVENT_ID_PATTERN, EventListArgs, EventListSchema, EventStreamArgs

blp = ApiBlueprint("events", __name__, url_prefix="/api/v1",
                   description="Events: what happened to your scans, to read instead of (or besides) webhooks.")

LIST_EXAMPLE = {"ok": True, "has_more": True, "data": [
    {"event_id": feed.EXAMPLE_ID, "event": "scan.completed", "created_at": "2026-11-21T12:03:05Z", "livemode": True,
     "body": {"event": "scan.completed", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "livemode": True,
              "target": "jane.doe@example.com", "kind": "email", "status": "completed", "purpose": None,
              "case_ref": None, "completed_at": "2026-11-21T12:03:05Z", "result": {}}},
    {"event_id": "evt_0b9d3e51c7a24f68b1e2d4c6a8f0e3b5", "event": "scan.running",
     "created_at": "2026-11-21T12:02:10Z", "livemode": True,
     "body": {"event": "scan.running", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "livemode": True,
              "target": "jane.doe@example.com", "kind": "email", "status": "running", "purpose": None,
              "case_ref": None, "created_at": "2026-11-21T12:02:00Z", "eta_seconds": 55}}]}


@blp.route("/events")
class EventList(MethodView):
    @hooks.api_call(scope=access.SCANS_READ, action="events.list")
    @blp.doc(security=SECURITY, summary="List events", operationId="listEvents", tags=["events"])
    @blp.arguments(EventListArgs, location="query", as_kwargs=True)
    @blp.response(200, EventListSchema, headers=HEADERS, example=LIST_EXAMPLE,
                  description="One page of events, newest first.")
    @documented_errors(400, 401, 402, 503, blueprint=blp, overrides={
        400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid; with `details`)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def get(self, key, events=None, **query):
        """Every event of your scans (of the calling key's mode: a test key sees test scans' events), newest
        first, whether or not a webhook endpoint listed it: a scan started, completed or failed. Each carries
        the body a webhook endpoint receives. Events are kept as long as webhook deliveries, then removed.
        Costs {price} per page."""
        return hooks.render(feed.list_events(key.customer_id, livemode=key.livemode, events_filter=events, **query))


STREAM_EXAMPLE = ("retry: 2000\n: events after evt_d27a94c0e15b4f3e8a6c2b0d9f71e4a8\n\n"
                  f"id: {feed.EXAMPLE_ID}\nevent: scan.completed\n"
                  'data: {"event":"scan.completed","scan_id":"scn_3kT9wQ0vXl2mYp7aRz1b4Q","livemode":true,...}\n\n'
                  ": heartbeat\n\n")
LAST_EVENT_ID = {"in": "header", "name": "Last-Event-ID", "required": False,
                 "schema": {"type": "string", "pattern": EVENT_ID_PATTERN},
                 "description": "The `id` of the last event received: the stream resumes after it (browsers' "
                                "EventSource sends it by itself when it reconnects).", "example": feed.EXAMPLE_ID}


@blp.route("/events/stream")
class EventStream(MethodView):
    @hooks.api_call(scope=access.SCANS_READ, action="events.stream")
    @blp.doc(security=SECURITY, summary="Follow events as they happen", operationId="streamEvents",
             tags=["events"], parameters=[LAST_EVENT_ID])
    @blp.arguments(EventStreamArgs, location="query", as_kwargs=True)
    @blp.response(200, description="A stream of server-sent events (`text/event-stream`) that stays open: "
                                   "each event as `id:` (its event id), `event:` (its kind) and `data:` (its body, "
                                   f"one line of JSON), and a comment line every {feed.HEARTBEAT_SECONDS:g} seconds.",
                  headers=HEADERS, content_type="text/event-stream", example=STREAM_EXAMPLE)
    @documented_errors(400, 401, 402, 429, 503, blueprint=blp, overrides={
        400: "`invalid_request` (a filter, `after` or `Last-Event-ID` is not valid; with `details`)",
        429: "`rate_limited` (the key already has 100 streams or waiting calls open); with `Retry-After`, free "
             "of charge"},
        codes={400: ("invalid_request",), 429: ("rate_limited",)})
    @blp.priced("call")
    def get(self, key, events=None, after=None, payload=None, **filters):
        """Your scans' events as they happen (of the calling key's mode), the same as the events list, oldest
        first, on one connection that stays open: an alternative to webhooks for a receiver that cannot be
        reached from the internet. Reconnect with `Last-Event-ID` (or `after`) to resume after the last event
        you received: nothing is lost in between, for as long as events are kept. The stream ends, with a last
        comment line saying why, within 10 seconds of its key being revoked, expiring or losing `scans:read`,
        and sends nothing stored after that. Each key may have 100 streams and waiting calls open at once.
        Costs {price} per connection."""
        check, thin = feed.check_filters(events_filter=events, payload=payload, **filters)
        start = feed.stream_start(request.headers.get("Last-Event-ID"), after)
        held = waits.hold(key.id, feed.HEARTBEAT_SECONDS * 3)  # 429 rate_limited: refused, free
        body = feed.stream(key.customer_id, key.livemode, check, thin=thin, start=start, held=held,
                           allowed=hooks.still_allowed(key, access.SCANS_READ))
        response = Response(stream_with_context(body), mimetype="text/event-stream")
        response.headers["X-Accel-Buffering"] = "no"  # a proxy in front must pass each event on at once
        response.implicit_sequence_conversion = False  # nothing may read it whole (its length: none)
        return response
