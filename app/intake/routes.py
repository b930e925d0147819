"""The scan endpoints of §4 that create scans: create, bulk create, re-run (tagged ``scans`` in the
OpenAPI document, beside the reads of ``app.scans.routes``).

Views stay thin: they hand parsed input to ``app.intake.creation`` and return its body (a creation
that waits reads the new scan with ``app.scans.reads``); authentication, charging and the limit
headers are ``app.api.hooks``'s.
"""
from __future__ import annotations

from flask import g
from flask.views import MethodView

from app.accounts import access
from app.api import hooks, openapi
from app.api.answers import created
from app.api.base import ApiBlueprint
from app.api.openapi import CODES, ERROR_DOCS, HEADERS, IDEMPOTENCY_HEADER, SECURITY
from app.events import waits
from app.events.schemas import webhook_callbacks
from app.intake import creation
from app.scans import reads
from app.scans.schemas import (
    BulkCreatedSchema,
    BulkCreateSchema,
    ScanCreatedSchema,
    ScanCreateSchema,
    ScanSchema,
    WaitArgs,
)

blp = ApiBlueprint("intake", __name__, url_prefix="/api/v1",
                   description="Create scans: one, in bulk, or again on a scan's failed sources.")
documented_errors = openapi.errors_of(blp)


@blp.route("/scan")
class ScanCreate(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE, action="scan.create")
    @blp.doc(security=SECURITY, tags=["scans"], parameters=[IDEMPOTENCY_HEADER], summary="Create a scan",
             operationId="createScan", callbacks=webhook_callbacks("scanEvent"))
    @blp.arguments(ScanCreateSchema, example={"target": "jane.doe@example.com", "kind": "email"})
    @blp.arguments(WaitArgs, location="query", as_kwargs=True)
    @blp.response(202, ScanCreatedSchema, headers=HEADERS, description="The scan is queued.")
    @blp.alt_response(200, schema=ScanSchema, headers=HEADERS,
                      description="With `wait`: the scan completed or failed in time, as its read shows it.")
    @documented_errors(400, 401, 402, 403, 409, 429, 502, 503, overrides={
        403: "`target_suppressed` (the person the target belongs to opted out of lookups; free of charge)",
        429: ERROR_DOCS[429] + ", `rate_limited` (with `wait`: the key already has 100 calls waiting)"},
        codes={403: ("target_suppressed",), 429: (*CODES[429], "rate_limited")})
    @blp.priced("scan")
    def post(self, key, body, wait=None, *, report):
        """Queue an investigation of one target. With `wait`, the answer waits up to that many seconds for the
        scan to finish: 200 with the scan as its read shows it when it completed or failed in time, else 202 as
        without it. The finished scan is a read: a key without the scope `scans:read` gets the 202 whatever
        `wait` says, and so does a key that is revoked, expires or loses that scope while it waits. A retry with
        the same `Idempotency-Key` answers the 202. Costs {price}."""
        if not access.has_scope(key, access.SCANS_READ):
            wait = None  # the finished scan is a read this key may not make: it gets the creation's answer
        held = waits.hold(key.id, wait) if wait is not None else None  # 429 rate_limited: nothing created
        try:
            outcome = creation.create_scan(key.customer, key.id, body["target"], body.get("kind"),
                                           request_id=g.request_id, livemode=key.livemode,
                                           purpose=body.get("purpose"), case_ref=body.get("case_ref"),
                                           entry=hooks.call_entry(key, 202), match=creation.MatchRules.of(body))
            final = waited_scan(outcome, key, wait) if held is not None else None
        finally:
            if held is not None:
                waits.release(held)
        # Its entry, written as 202, says 200 when it waited in time.
        return created(outcome, report, waited=final)


def waited_scan(outcome: creation.Outcome, key, seconds: int) -> dict | None:
    """The new scan's read once it is final within ``seconds`` (D27), else None."""
    scan_id = outcome.body["scan_id"]
    waiter = waits.subscribe(waits.scan_topic(scan_id))  # before the first read: no change falls between

    def read() -> dict:
        return reads.read_scan(key.customer_id, scan_id, key.livemode)
    allowed = hooks.still_allowed(key, access.SCANS_READ)
    try:
        first = read()
        if not allowed():  # asked after the read: the key may have changed since the call began
            return None
        body = waits.wait_until(waiter, seconds, read, reads.SCAN_WAIT.done, first, allowed)
    finally:
        waits.unsubscribe(waiter)
    return body if reads.SCAN_WAIT.done(body) else None


@blp.route("/scan/<scan_id:scan_id>/rerun")
class ScanRerun(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE, action="scan.rerun")
    @blp.doc(security=SECURITY, tags=["scans"], parameters=[IDEMPOTENCY_HEADER],
             summary="Re-run a scan's failed sources", operationId="rerunScan",
             callbacks=webhook_callbacks("rerunScanEvent"))
    @blp.response(202, ScanCreatedSchema, headers=HEADERS, description="The re-run is queued as a new scan.")
    @documented_errors(401, 402, 403, 404, 409, 429, 502, 503, overrides={
        403: "`forbidden` (another customer's scan), `target_suppressed` (the person opted out of lookups "
             "since; free of charge)",
        409: "`nothing_to_rerun` (the scan is not completed, or every source answered, or it was erased: the "
             "message says which; free of charge), "
             "`idempotency_conflict`"},
        codes={403: ("forbidden", "target_suppressed"), 409: ("nothing_to_rerun", "idempotency_conflict")})
    @blp.priced("scan")
    def post(self, key, scan_id, *, report):
        """Ask again the sources that could not answer for a completed scan (`result.partial`): a new scan
        of the same target, with `rerun_of` naming this one and its own webhook event. Its result is the
        whole picture: this scan's items and sources, with the new answers of the sources asked again in
        place of the failed ones, coverage and `partial` counted over all sources, and every finding under
        its id here, listing every source that found it. Limited and charged as a creation: costs {price}."""
        return created(creation.create_rerun(key.customer, key.id, scan_id, request_id=g.request_id,
                                             livemode=key.livemode, entry=hooks.call_entry(key, 202)), report)


@blp.route("/scan/bulk")
class BulkCreate(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE, action="bulk.create")
    @blp.doc(security=SECURITY, tags=["scans"], parameters=[IDEMPOTENCY_HEADER], summary="Create a bulk batch",
             operationId="createBulk", callbacks=webhook_callbacks("bulkScanEvent"))
    @blp.arguments(BulkCreateSchema, example={"targets": [
        {"target": "jane.doe@example.com", "kind": "email"}, {"target": "+447700900123"},
        {"target": "@janedoe", "kind": "username"}]})
    @blp.response(202, BulkCreatedSchema, headers=HEADERS, description="Valid targets are queued.")
    @documented_errors(400, 401, 402, 403, 409, 429, 502, 503, overrides={
        400: "`invalid_request`, `no_targets`, `too_many_targets`, `invalid_purpose`, `purpose_required`",
        403: "`bulk_not_allowed` (Pro tier). A target whose person opted out of lookups is not refused "
             "with 403: it is listed in `rejected` with `target_suppressed`, free of charge",
        429: "`rate_limit_inflight` (targets + scans in flight exceed the limit), `rate_limit_hour`, "
             "`rate_limit_day`; with `Retry-After`"},
        codes={400: ("invalid_request", "no_targets", "too_many_targets", "invalid_purpose", "purpose_required"),
               403: ("bulk_not_allowed",)})
    @blp.priced("bulk")
    def post(self, key, body, *, report):
        """Queue up to 100 targets (Business and Enterprise). A target that is not valid (an empty one
        included) does not refuse the call: it is listed in `rejected` with why, free of charge, and the
        valid ones are queued. Costs {price}."""
        outcome = creation.create_bulk(key.customer, key.id, body["targets"], request_id=g.request_id,
                                       livemode=key.livemode, purpose=body.get("purpose"),
                                       case_ref=body.get("case_ref"), entry=hooks.call_entry(key, 202),
                                       match=creation.MatchRules.of(body))
        return created(outcome, report)
