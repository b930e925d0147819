"""The scan endpoints of §4: create, read, bulk create, aggregate read; and the scans list (D17).

Views stay thin: they hand parsed input to ``app.scans.creation`` (creations) and
``app.scans.reads`` (reads and the list) and return its body;
authentication, charging and the limit headers are ``app.api.hooks``'s job.
"""
from __future__ import annotations

from flask import g
from flask.views import MethodView

from app.accounts import access
from app.activity import entries
from app.api import hooks, openapi
from app.api.answers import created
from app.api.base import ApiBlueprint
from app.api.openapi import (
    CODES,
    ERROR_DOCS,
    HEADERS,
    IDEMPOTENCY_HEADER,
    MIN_CONFIDENCE_PARAMETER,
    SECURITY,
)
from app.events import waits
from app.events.schemas import WAIT_ERRORS, WAIT_PARAMETER, webhook_callbacks
from app.privacy import erasure
from app.scans import creation as scans
from app.scans import findings, reads
from app.scans.schemas import (
    BulkCreatedSchema,
    BulkCreateSchema,
    BulkErasedSchema,
    BulkStateSchema,
    FeedbackCreateSchema,
    FeedbackGivenSchema,
    ScanCreatedSchema,
    ScanCreateSchema,
    ScanErasedSchema,
    ScanListQuerySchema,
    ScanListSchema,
    ScanSchema,
    WaitArgs,
)

blp = ApiBlueprint("scans", __name__, url_prefix="/api/v1",
                description="Create scans, read them, and do both in bulk.")


def documented_errors(*statuses, **options):
    """``openapi.documented_errors`` for this blueprint's operations."""
    return openapi.documented_errors(*statuses, blueprint=blp, **options)


def served(read):
    """A read's answer (``read``: the pipeline's ``ServedRead``; its refusals, 402, 403, 404, are
    answered and charged by ``hooks.served_read``)."""
    return hooks.render(read.body)


@blp.route("/scan")
class ScanCreate(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE)
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create a scan", operationId="createScan",
             callbacks=webhook_callbacks("scanEvent"))
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
            outcome = scans.create_scan(key.customer, key.id, body["target"], body.get("kind"),
                                        request_id=g.request_id, livemode=key.livemode, purpose=body.get("purpose"),
                                        case_ref=body.get("case_ref"), entry=hooks.call_entry(key, 202),
                                        match=scans.MatchRules.of(body))
            final = waited_scan(outcome, key, wait) if held is not None else None
        finally:
            if held is not None:
                waits.release(held)
        # Its entry, written as 202, says 200 when it waited in time.
        return created(outcome, report, waited=final)


def waited_scan(outcome: scans.Outcome, key, seconds: int) -> dict | None:
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


@blp.route("/scan/<scan_id:scan_id>")
class ScanRead(MethodView):
    @hooks.served_read("scan", scope=access.SCANS_READ, wait=reads.SCAN_WAIT)
    @blp.doc(security=SECURITY, summary="Read a scan", operationId="getScan",
             parameters=[WAIT_PARAMETER, MIN_CONFIDENCE_PARAMETER])
    @blp.response(200, ScanSchema, headers=HEADERS,
                  description="The scan in its current state; which fields appear depends on `status`.")
    @documented_errors(400, 401, 402, 403, 404, 429, 503, overrides=WAIT_ERRORS,
                       codes={400: ("invalid_request",), 429: ("rate_limited",)})
    @blp.priced("call")
    def get(self, read):
        """Read one scan. Poll every 10 to 15 seconds until it is completed or failed, or ask with `wait` to be
        answered as soon as it is. Costs {price}."""
        return served(read)

    @hooks.api_call(scope=access.SCANS_ERASE)
    @blp.doc(security=SECURITY, summary="Erase a scan", operationId="eraseScan")
    @blp.response(200, ScanErasedSchema, headers=HEADERS, description="The scan is erased.",
                  example={"ok": True, "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "erased_at": "2026-11-21T09:30:00Z"})
    @documented_errors(401, 402, 403, 404, 409, 503, overrides={
        409: "`scan_in_flight` (the scan is still queued or running; free of charge)"},
        codes={409: ("scan_in_flight",)})
    @blp.priced("call")
    def delete(self, key, scan_id):
        """Erase a completed or failed scan now: its target, result and failure message, and the bodies of its
        webhook deliveries, are deleted; a delivery still waiting to be sent is cancelled. Its id, times, purpose,
        case reference and charges stay, and its reads answer them with `erased_at`. Erasing it again answers
        the same. Costs {price}."""
        return hooks.render(erasure.erase_scan(customer_id=key.customer_id, scan_id=scan_id, livemode=key.livemode))


@blp.route("/scan/<scan_id:scan_id>/rerun")
class ScanRerun(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE)
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Re-run a scan's failed sources",
             operationId="rerunScan", callbacks=webhook_callbacks("rerunScanEvent"))
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
        return created(scans.create_rerun(key.customer, key.id, scan_id, request_id=g.request_id,
                                          livemode=key.livemode, entry=hooks.call_entry(key, 202)), report)


@blp.route("/scan/<scan_id:scan_id>/findings/<string:finding_id>/feedback")
class FindingFeedback(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE)
    @blp.doc(security=SECURITY, summary="Give feedback on a finding", operationId="giveFeedback")
    @blp.arguments(FeedbackCreateSchema, example={"verdict": "false_positive",
                                                  "note": "Another person with the same name."})
    @blp.response(200, FeedbackGivenSchema, headers=HEADERS, description="The feedback is recorded.")
    @documented_errors(400, 401, 402, 403, 404, 409, 503, overrides={
        400: "`invalid_request` (verdict or note not valid; with `details`)",
        404: "`not_found` (no such scan, or no such finding in its result)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def post(self, key, body, scan_id, finding_id, *, report):
        """Say whether a finding of a completed scan is about the person (`confirmed`) or not
        (`false_positive`). Later reads of the scan show it on the finding (`feedback`); giving it again
        replaces it. Costs {price}."""
        given = findings.give_feedback(key.customer_id, scan_id, finding_id, verdict=body.get("verdict"),
                                       note=body.get("note"), livemode=key.livemode, api_key_id=key.id)
        # The activity log's entry names the scan, not the finding (the route's last argument).
        report.subject = entries.Subject(scan_id)
        return hooks.render(given)


@blp.route("/scan/bulk")
class BulkCreate(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE)
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create a bulk batch",
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
        outcome = scans.create_bulk(key.customer, key.id, body["targets"], request_id=g.request_id,
                                    livemode=key.livemode, purpose=body.get("purpose"),
                                    case_ref=body.get("case_ref"), entry=hooks.call_entry(key, 202),
                                    match=scans.MatchRules.of(body))
        return created(outcome, report)


@blp.route("/scan/bulk/<string:bulk_id>")
class BulkRead(MethodView):
    @hooks.served_read("bulk", scope=access.SCANS_READ, wait=reads.BULK_WAIT)
    @blp.doc(security=SECURITY, summary="Read a bulk batch", operationId="getBulk",
             parameters=[WAIT_PARAMETER, MIN_CONFIDENCE_PARAMETER])
    @blp.response(200, BulkStateSchema, headers=HEADERS, description="Counts by status and every scan.")
    @documented_errors(400, 401, 402, 403, 404, 429, 503, overrides=WAIT_ERRORS,
                       codes={400: ("invalid_request",), 404: ("not_found",), 429: ("rate_limited",)})
    @blp.priced("call")
    def get(self, read):
        """Read every scan of a batch in one call; with `wait`, answered as soon as every scan of it is completed
        or failed (`all_done`). Costs {price}."""
        return served(read)

    @hooks.api_call(scope=access.SCANS_ERASE)
    @blp.doc(security=SECURITY, summary="Erase a bulk batch", operationId="eraseBulk")
    @blp.response(200, BulkErasedSchema, headers=HEADERS, description="Every completed or failed scan of the "
                  "batch is erased.", example={"ok": True, "bulk_id": "blk_Q2x0mV8rLk1cYt6nWb3a9g", "erased": 98,
                                               "in_flight": 2})
    @documented_errors(401, 402, 403, 404, 503, codes={404: ("not_found",)})
    @blp.priced("call")
    def delete(self, key, bulk_id):
        """Erase every completed or failed scan of a batch now, as erasing each scan would; scans still queued or
        running are counted in `in_flight` and left as they are. Costs {price}."""
        return hooks.render(erasure.erase_batch(customer_id=key.customer_id, bulk_id=bulk_id, livemode=key.livemode))


@blp.route("/scans")
class ScanList(MethodView):
    @hooks.api_call(scope=access.SCANS_READ)
    @blp.doc(security=SECURITY, summary="List scans", operationId="listScans")
    @blp.arguments(ScanListQuerySchema, location="query", as_kwargs=True)
    @blp.response(200, ScanListSchema, headers=HEADERS, description="One page of scans, newest first.",
                  example={"ok": True, "has_more": True, "data": [
                      {"scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "status": "failed", "target": "fail.me@example.com",
                       "kind": "email", "created_at": "2026-11-21T12:00:00Z", "failed_at": "2026-11-21T12:01:40Z",
                       "failure": {"code": "engine_failed", "message": "the engine could not finish"}},
                      {"scan_id": "scn_8aP2vR5nQx0wLk3mYt7c1d", "status": "running", "target": "janedoe",
                       "kind": "username", "created_at": "2026-11-21T11:59:00Z",
                       "bulk_id": "blk_Q2x0mV8rLk1cYt6nWb3a9g"}]})
    @documented_errors(400, 401, 402, 503, overrides={
        400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid, or `starting_after` is "
             "not one of your scans; with `details`)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def get(self, key, **query):
        """List your scans, newest first, 1 to 100 per page; `has_more` says whether to ask for the next page
        with `starting_after`. Each entry is as in a bulk batch's read. Costs {price} per page."""
        return hooks.render(reads.list_scans(key.customer_id, livemode=key.livemode, **query))

