"""The activity log endpoint (D20): the account's entries of the calling key's mode.

The view stays thin: ``app.activity.entries`` owns the query, the target's normalisation and
hashing, and raises ``InvalidRequest`` (400) for a bad target or cursor; authentication,
charging (1 credit, as every call) and the limit headers are ``app.api.hooks``'s.
"""
from __future__ import annotations

import json

from flask import Response
from flask.views import MethodView

from app.accounts import access
from app.activity import entries
from app.activity.schemas import ActivityExportQuerySchema, ActivityListQuerySchema, ActivityListSchema
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, SECURITY, documented_errors

blp = ApiBlueprint("activity", __name__, url_prefix="/api/v1",
                   description="The activity log: every call of your keys and every action in the portal.")

LIST_EXAMPLE = {"ok": True, "has_more": True, "data": [
    {"activity_id": "act_Wq3nV7xL0bKp2mYt9cR4sA", "created_at": "2026-11-21T12:00:05Z", "livemode": True,
     "action": "scan.read", "key_id": "key_9aK2mQ7vXt1bLp4nRw8c3d", "user_id": None, "user_email": None,
     "resource_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "status": 200, "credits": 1, "client_address": "203.0.113.7",
     "request_id": "req_9b2e1c7d4a6f8e0b3c5d7a1f", "purpose": None, "case_ref": None},
    {"activity_id": "act_Pz8kT1mW5vXn3bLq0cY7dE", "created_at": "2026-11-21T12:00:00Z", "livemode": True,
     "action": "scan.create", "key_id": "key_9aK2mQ7vXt1bLp4nRw8c3d", "user_id": None, "user_email": None,
     "resource_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "status": 202, "credits": 1, "client_address": "203.0.113.7",
     "request_id": "req_4f1c2a9e0b7d3c5a6e8f9a1b", "purpose": "fraud_prevention", "case_ref": "CASE-2026-0042"}]}


@blp.route("/activity")
class ActivityList(MethodView):
    @hooks.api_call(scope=access.ACTIVITY_READ, action="activity.list")
    @blp.doc(security=SECURITY, summary="List the activity log", operationId="listActivity", tags=["activity"])
    @blp.arguments(ActivityListQuerySchema, location="query", as_kwargs=True)
    @blp.response(200, ActivityListSchema, headers=HEADERS, example=LIST_EXAMPLE,
                  description="One page of entries, newest first.")
    @documented_errors(400, 401, 402, 503, blueprint=blp, overrides={
        400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid, or `starting_after` is "
             "not one of your entries; with `details`), "
             "`target_too_short`, `invalid_target` (the `target` filter, checked as in a creation)"},
        codes={400: ("invalid_request", "target_too_short", "invalid_target")})
    @blp.priced("call")
    def get(self, key, **query):
        """Who did what with your account: one entry per call of your API keys (of the calling key's mode:
        a test key sees test calls) and per action in the portal, with its status, cost, address and request
        id, newest first. `target` answers "who looked up this person": the creations of that target, however it was
        written (letter case, a leading `@`, a phone number's spaces, dashes, dots or brackets). Entries
        are removed once older than the service's retention period (400 days unless agreed otherwise). Costs
        {price} per page."""
        return hooks.render(entries.list_entries(key.customer_id, livemode=key.livemode, **query))


EXPORT_EXAMPLE = "\n".join(json.dumps(entry, separators=(",", ":")) for entry in reversed(LIST_EXAMPLE["data"])) + "\n"
EXPORT_HEADERS = {
    **HEADERS,
    "X-Next-Cursor": {"description": "Where the next page starts: pass it as `cursor`. Present on every page, "
                                     "an empty one too (where the same export resumes).",
                      "schema": {"type": "string"}},
    "X-Has-More": {"description": "`true` when the page is full and more entries are ready now; `false` when you "
                                  "have everything written so far (ask again later with the same cursor).",
                   "schema": {"type": "string", "enum": ["true", "false"]}},
}


@blp.route("/activity/export")
class ActivityExport(MethodView):
    @hooks.api_call(scope=access.ACTIVITY_READ, action="activity.export")
    @blp.doc(security=SECURITY, summary="Export the activity log", operationId="exportActivity", tags=["activity"])
    @blp.arguments(ActivityExportQuerySchema, location="query", as_kwargs=True)
    @blp.response(200, description="Entries as NDJSON (`application/x-ndjson`): one JSON object per line, each "
                                   "an entry as in the activity list, oldest first; an empty body when nothing new "
                                   "is ready.",
                  headers=EXPORT_HEADERS, content_type="application/x-ndjson", example=EXPORT_EXAMPLE)
    @documented_errors(400, 401, 402, 503, blueprint=blp, overrides={
        400: "`invalid_request` (`cursor` or `limit` is not valid; with `details`)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def get(self, key, **query):
        """Your whole activity log (of the calling key's mode), oldest first, to keep in your own audit store or
        SIEM: page after page with the cursor of the previous page, without gaps or repeats even while calls are
        being made. An entry is exported once every call that began before it has finished (usually within a
        second), so an export never passes an entry still being written; when you have caught up, the page is
        empty and you ask again later with the same cursor. Costs {price} per page."""
        page = entries.export_page(key.customer_id, livemode=key.livemode, **query)
        body = "".join(json.dumps(entry, separators=(",", ":")) + "\n" for entry in page.entries)
        response = Response(body, mimetype="application/x-ndjson")
        response.headers["X-Next-Cursor"] = page.next_cursor
        response.headers["X-Has-More"] = "true" if page.has_more else "false"
        return response
