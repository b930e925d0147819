"""The watches calls (D28): create (with its baseline scan), list, read, change, end, run now.

Views stay thin: ``app.watches.watchlist`` owns the rules; authentication, the ``watches`` scope,
charging and the limit headers are ``app.api.hooks``'s job. A creation and a run are charged
by their admission (the credit pays for the scan they start), as a scan creation is.
"""
from __future__ import annotations

from flask import g
from flask.views import MethodView

from app.api import hooks
from app.api.answers import created
from app.api.base import ApiBlueprint
from app.api.openapi import (
    HEADERS,
    IDEMPOTENCY_HEADER,
    SECURITY,
    error_documenter,
)
from app.events.schemas import SIGNATURE_PARAMETERS, WEBHOOK_OPERATION, WEBHOOK_URL
from app.intake import creation
from app.watches import event_kinds, watchlist
from app.watches.schemas import (
    WatchBulkCreatedSchema,
    WatchBulkCreateSchema,
    WatchCreateSchema,
    WatchListQuerySchema,
    WatchListSchema,
    WatchRunSchema,
    WatchSchema,
    WatchUpdateSchema,
)
from app.watches.scopes import WATCHES

blp = ApiBlueprint("watches", __name__, url_prefix="/api/v1",
                   description="Watches: targets scanned again on a schedule, their changes announced.")

ERROR_EXAMPLES = {
    "invalid_request": "interval: Must be one of: daily, weekly, monthly.",
    "target_too_short": "target must have at least 3 characters",
    "invalid_kind": "kind must be one of email, phone, username",
    "invalid_target": "target is not a valid e-mail address",
    "invalid_purpose": "purpose must be one of fraud_prevention, kyc_aml, due_diligence, background_check, "
                       "security_research, law_enforcement, other",
    "purpose_required": "this account requires a purpose on every scan: one of fraud_prevention, ...",
    "unauthorized": "the Authorization header must be 'Bearer <API key>'",
    "invalid_token": "the API key is unknown or revoked",
    "key_expired": "this API key has expired",
    "ip_not_allowed": "this API key may not be used from 198.51.100.7, the address this service sees for your call",
    "insufficient_scope": "this API key lacks the scope watches, which this call needs",
    "insufficient_balance": "the account balance is below 1 credit",
    "target_suppressed": "the person this target belongs to has opted out of lookups",
    "no_targets": "targets must hold at least one target",
    "too_many_targets": "a bulk call takes at most 100 targets",
    "bulk_not_allowed": "bulk calls are available on the Business and Enterprise tiers",
    "not_found": "no watch with this id",
    "watch_ended": "this watch has ended: create a new watch to follow the target again",
    "idempotency_conflict": "this Idempotency-Key was used with a different request body",
    "watch_limit_reached": "watch limit reached (1000 watches): end one before creating another",
    "rate_limit_inflight": "too many scans in flight (10 of 10); retry when one finishes",
    "rate_limit_hour": "hourly scan quota reached (100 per hour)",
    "rate_limit_day": "daily scan quota reached (1000 per day)",
    "engine_submit_failed": "the investigation engine cannot be reached; retry in 30 seconds",
    "service_unavailable": "the service is temporarily unavailable; retry later",
}
documented_errors = error_documenter(blp, ERROR_EXAMPLES)
COMMON = {401: "`unauthorized`, `invalid_token`", 402: "`insufficient_balance`",
          503: "`service_unavailable` (database unreachable); with `Retry-After`"}
NOT_FOUND = {404: "`not_found` (no watch of yours has this id)"}
CREATION = {400: "`invalid_request`, `target_too_short`, `invalid_kind`, `invalid_target`, `invalid_purpose`, "
                 "`purpose_required`",
            403: "`target_suppressed` (the person opted out of lookups; free of charge)",
            409: "`idempotency_conflict`",
            429: "`watch_limit_reached` (free of charge), `rate_limit_inflight`, `rate_limit_hour`, "
                 "`rate_limit_day`; with `Retry-After`",
            502: "`engine_submit_failed`; with `Retry-After: 30`"}
ENDED = {409: "`watch_ended` (free of charge)"}
BULK = {400: "`invalid_request`, `no_targets`, `too_many_targets`, `invalid_purpose`, `purpose_required`",
        403: "`bulk_not_allowed` (Pro tier). A target whose person opted out of lookups is not refused with 403: "
             "it is listed in `rejected` with `target_suppressed`, free of charge",
        409: CREATION[409],
        429: "`watch_limit_reached` (the watches created would pass your limit: none is created; free of "
             "charge), `rate_limit_inflight` (targets + scans in flight exceed the limit), `rate_limit_hour`, "
             "`rate_limit_day`; with `Retry-After`",
        502: CREATION[502]}
_WATCH = {"livemode": True, "kind": "email", "interval": "weekly", "status": "active",
          "purpose": "fraud_prevention", "case_ref": "CASE-2291", "created_at": "2026-11-21T09:14:03Z",
          "last_change_at": None, "last_error": None, "last_changes": None}
BULK_EXAMPLE = {
    "ok": True, "livemode": True, "bulk_id": "blk_Q2x0mV8rLk1cYt6nWb3a9g", "total": 3, "created": 2,
    "rejected": [{"index": 2, "target": "ab", "kind": None, "error": "target_too_short",
                  "message": "target must have at least 3 characters"}],
    "watches": [
        {"watch_id": "wch_Q2x0mV8rLk1cYt6nWb3a9g", **_WATCH, "target": "jane.doe@example.com",
         "next_scan_at": "2026-11-28T15:02:41Z", "last_scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "index": 0},
        {"watch_id": "wch_7Hc2pQ9xVb4nLm1kRt8s0w", **_WATCH, "target": "+447700900123", "kind": "phone",
         "next_scan_at": "2026-12-02T04:40:19Z", "last_scan_id": "scn_8aP2vR5nQx0wLk3mYt7c1d", "index": 1}]}

# The watch events (the registry's), as an OpenAPI callback of the creations: sent to the endpoints of
# the key that created the watch that list them, signed and retried as a scan's events.
WATCH_EVENT_EXAMPLE = {
    "event": "watch.changed", "watch_id": "wch_Q2x0mV8rLk1cYt6nWb3a9g", "livemode": True,
    "purpose": "fraud_prevention", "case_ref": "CASE-2291", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q",
    "previous_scan_id": "scn_8aP2vR5nQx0wLk3mYt7c1d",
    "changes": {"added": ["fnd_75Ml5C0uCxYLlJdzJ7o9"], "removed": [],
                "risk": {"from": {"score": 40, "band": "medium"}, "to": {"score": 55, "band": "high"}}},
    "target": "jane.doe@example.com", "kind": "email",
    "added_items": {"fnd_75Ml5C0uCxYLlJdzJ7o9": {"name": "ExampleForum", "date": "2021-06", "accounts": 1200000,
                                                 "classes": ["emails", "passwords"]}}}
WATCH_WEBHOOK_OPERATION = {
    **WEBHOOK_OPERATION,
    "summary": " and ".join(event_kinds.WATCH_EVENTS) + " events",
    "description": "When a watch's scan finds a change, or the watch is paused or ended by the service, the "
                   "service POSTs the event to each endpoint of the API key that created the watch whose "
                   "events list it (`POST /api/v1/endpoints`), in the endpoint's payload (thin: without the "
                   "target, its kind and the added items). Signed, acknowledged and retried as a scan's events; "
                   "missed ones can be read with `GET /api/v1/events?watch_id=`.",
    "parameters": [{**p, "schema": {"type": "string", "enum": list(event_kinds.WATCH_EVENTS)}}
                   if p["name"] == "X-Service-Event" else p for p in SIGNATURE_PARAMETERS],
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [{"$ref": f"#/components/schemas/{kind.schema}"} for kind in event_kinds.WATCH_KINDS],
                   "discriminator": {"propertyName": "event", "mapping": {
                       kind.name: f"#/components/schemas/{kind.schema}" for kind in event_kinds.WATCH_KINDS}}},
        "examples": {"watch.changed": {"summary": "watch.changed", "value": WATCH_EVENT_EXAMPLE}}}}},
}


def watch_callbacks(operation_id: str) -> dict:
    """The watch events a creation of watches leads to, as an OpenAPI 3.0 callback (operation ids are unique)."""
    return {"watchEvents": {WEBHOOK_URL: {"post": {**WATCH_WEBHOOK_OPERATION, "operationId": operation_id}}}}


@blp.route("/watches")
class WatchCollection(MethodView):
    @hooks.api_call(scope=WATCHES, action="watch.create")
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create a watch", operationId="createWatch",
             callbacks=watch_callbacks("watchEvent"))
    @blp.arguments(WatchCreateSchema, example={"target": "jane.doe@example.com", "interval": "weekly",
                                               "purpose": "fraud_prevention", "case_ref": "CASE-2291"})
    @blp.response(201, WatchSchema, headers=HEADERS, description="The watch is active; its first scan is queued.")
    @documented_errors({**COMMON, **CREATION})
    @blp.priced("scan")
    def post(self, key, body, *, report):
        """Follow a target: scan it now (the first scan, against which later ones are compared) and again every
        day, week or month; a later scan that finds a finding added or removed, or the risk band changed, sends a
        `watch.changed` event. The call pays for its first scan: {price}. Each scheduled scan is charged and
        limited as a scan creation."""
        view, outcome = watchlist.create_watch(key.customer, key.id, body["target"], body.get("kind"),
                                             body["interval"], request_id=g.request_id, livemode=key.livemode,
                                             purpose=body.get("purpose"), case_ref=body.get("case_ref"),
                                             match=creation.MatchRules.of(body))
        hooks.charged(report, balance=outcome.balance, usage=outcome.usage, limits=outcome.limits,
                      credits=outcome.cost, subject=outcome.subject, replayable=True)
        return hooks.render(view, 201)

    @hooks.api_call(scope=WATCHES, action="watches.list")
    @blp.doc(security=SECURITY, summary="List watches", operationId="listWatches")
    @blp.arguments(WatchListQuerySchema, location="query", as_kwargs=True)
    @blp.response(200, WatchListSchema, headers=HEADERS, description="One page of watches, newest first.")
    @documented_errors({400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid, or "
                             "`starting_after` is not one of your watches)", **COMMON})
    @blp.priced("call")
    def get(self, key, **query):
        """List your watches, newest first, 1 to 100 per page; `has_more` says whether to ask for the next page
        with `starting_after`. Costs {price} per page."""
        return hooks.render(watchlist.list_watches(key.customer_id, livemode=key.livemode, **query))


@blp.route("/watches/bulk")
class WatchBulk(MethodView):
    @hooks.api_call(scope=WATCHES, action="watches.create")
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create watches in bulk",
             operationId="createWatches")
    @blp.arguments(WatchBulkCreateSchema, example={
        "targets": [{"target": "jane.doe@example.com", "kind": "email"}, {"target": "+447700900123"},
                    {"target": "ab"}],
        "interval": "weekly", "purpose": "fraud_prevention", "case_ref": "CASE-2291"})
    @blp.response(201, WatchBulkCreatedSchema, headers=HEADERS, example=BULK_EXAMPLE,
                  description="A watch for each valid target, its first scan queued; the others in `rejected`.")
    @documented_errors({**COMMON, **BULK})
    @blp.priced("bulk")
    def post(self, key, body, *, report):
        """Follow up to 100 targets at once (Business and Enterprise), each as a watch of its own with the
        same interval, purpose and case reference. A target that is not valid, or whose person opted out of
        lookups, is listed in `rejected` with why, and costs nothing; the others are accepted or refused
        together (balance, watch limit, scan limits). Each watch's first scan is queued in one batch
        (`bulk_id`). Costs {price}."""
        made, outcome = watchlist.create_watches(key.customer, key.id, body["targets"], body["interval"],
                                               request_id=g.request_id, livemode=key.livemode,
                                               purpose=body.get("purpose"), case_ref=body.get("case_ref"),
                                               entry=hooks.call_entry(key, 201), match=creation.MatchRules.of(body))
        hooks.charged(report, balance=outcome.balance, usage=outcome.usage, limits=outcome.limits,
                      credits=outcome.cost, subject=outcome.subject, recorded=outcome.recorded, replayable=True)
        return hooks.render(made, 201)


@blp.route("/watches/<watch_id:watch_id>")
class WatchOne(MethodView):
    @hooks.api_call(scope=WATCHES, action="watch.read")
    @blp.doc(security=SECURITY, summary="Read a watch", operationId="getWatch")
    @blp.response(200, WatchSchema, headers=HEADERS, description="The watch, with what its last change found.")
    @documented_errors({**COMMON, **NOT_FOUND})
    @blp.priced("call")
    def get(self, key, watch_id):
        """Read one watch. Costs {price}."""
        return hooks.render(watchlist.read_watch(key.customer_id, watch_id, livemode=key.livemode))

    @hooks.api_call(scope=WATCHES, action="watch.update")
    @blp.doc(security=SECURITY, summary="Change a watch", operationId="updateWatch")
    @blp.arguments(WatchUpdateSchema, example={"status": "paused"})
    @blp.response(200, WatchSchema, headers=HEADERS, description="The watch as changed.")
    @documented_errors({400: "`invalid_request`", **COMMON, **NOT_FOUND, **ENDED})
    @blp.priced("call")
    def patch(self, key, body, watch_id):
        """Change its interval, pause it (`status: paused`: no scheduled scan) or make it active again, or change
        its case reference. Costs {price}."""
        return hooks.render(watchlist.update_watch(key.customer_id, watch_id, livemode=key.livemode,
                                                 interval=body.get("interval"), status=body.get("status"),
                                                 case_ref=body.get("case_ref"), case_ref_given="case_ref" in body))

    @hooks.api_call(scope=WATCHES, action="watch.end")
    @blp.doc(security=SECURITY, summary="End a watch", operationId="endWatch")
    @blp.response(200, WatchSchema, headers=HEADERS, description="The watch, ended.")
    @documented_errors({**COMMON, **NOT_FOUND})
    @blp.priced("call")
    def delete(self, key, watch_id):
        """End a watch: no more scans. Its scans stay, as any scan (erase them as usual). Ending it again
        answers the same. Costs {price}."""
        return hooks.render(watchlist.end_watch(key.customer_id, watch_id, livemode=key.livemode))


@blp.route("/watches/<watch_id:watch_id>/run")
class WatchRun(MethodView):
    @hooks.api_call(scope=WATCHES, action="watch.run")
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Scan a watched target now",
             operationId="runWatch")
    @blp.response(202, WatchRunSchema, headers=HEADERS, description="The scan is queued.")
    @documented_errors({**COMMON, **NOT_FOUND, **ENDED,
                        403: CREATION[403], 429: CREATION[429].replace("`watch_limit_reached` (free of charge), ", ""),
                        502: CREATION[502]})
    @blp.priced("scan")
    def post(self, key, watch_id, *, report):
        """Scan the watched target now, outside its schedule; its changes are announced as a scheduled scan's.
        Limited and charged as a scan creation: {price}."""
        return created(watchlist.run_watch(key.customer, key.id, watch_id, request_id=g.request_id,
                                         livemode=key.livemode), report)



