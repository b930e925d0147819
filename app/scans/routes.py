"""The scan endpoints of §4 that read: read a scan, aggregate read of a batch, a finding's feedback;
and the scans list (D17). The creations (create, bulk create, re-run) are ``app.intake.routes``'; the
erasures ``app.privacy.routes``': both tagged ``scans`` in the OpenAPI document too.

Views stay thin: they hand parsed input to ``app.scans.reads`` (reads and the list) and
``app.scans.findings`` (feedback) and return its body;
authentication, charging and the limit headers are ``app.api.hooks``'s job.
"""
from __future__ import annotations

from flask.views import MethodView

from app.accounts import access
from app.activity import entries
from app.api import hooks, openapi
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, MIN_CONFIDENCE_PARAMETER, SECURITY
from app.events.schemas import WAIT_ERRORS, WAIT_PARAMETER
from app.scans import findings, reads
from app.scans.schemas import (
    BulkStateSchema,
    FeedbackCreateSchema,
    FeedbackGivenSchema,
    ScanListQuerySchema,
    ScanListSchema,
    ScanSchema,
)

blp = ApiBlueprint("scans", __name__, url_prefix="/api/v1",
                description="Create scans, read them, and do both in bulk.")
documented_errors = openapi.errors_of(blp)


def served(read):
    """A read's answer (``read``: the pipeline's ``ServedRead``; its refusals, 402, 403, 404, are
    answered and charged by ``hooks.served_read``)."""
    return hooks.render(read.body)


@blp.route("/scan/<scan_id:scan_id>")
class ScanRead(MethodView):
    @hooks.served_read("scan", scope=access.SCANS_READ, wait=reads.SCAN_WAIT, action="scan.read")
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

@blp.route("/scan/<scan_id:scan_id>/findings/<string:finding_id>/feedback")
class FindingFeedback(MethodView):
    @hooks.api_call(scope=access.SCANS_WRITE, action="finding.feedback")
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


@blp.route("/scan/bulk/<string:bulk_id>")
class BulkRead(MethodView):
    @hooks.served_read("bulk", scope=access.SCANS_READ, wait=reads.BULK_WAIT, action="bulk.read")
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

@blp.route("/scans")
class ScanList(MethodView):
    @hooks.api_call(scope=access.SCANS_READ, action="scans.list")
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

