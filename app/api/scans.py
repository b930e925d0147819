"""The scan endpoints of §4: create, read, bulk create, aggregate read.

Views stay thin: they hand parsed input to ``services.scans`` (creations) and
``services.reads`` and return its body;
authentication, charging and the limit headers are ``app.api.hooks``'s job.
"""
from __future__ import annotations

from flask import Response, current_app, g, request
from flask.views import MethodView

from app import rawjson
from app.api import auth, hooks
from app.api.base import ApiBlueprint
from app.schemas.errors import ErrorSchema
from app.schemas.scans import (BulkCreatedSchema, BulkCreateSchema, BulkStateSchema, ScanCreatedSchema,
                               ScanCreateSchema, ScanSchema)
from app.services import reads, scans

blp = ApiBlueprint("scans", __name__, url_prefix="/api/v1",
                description="Create scans, read them, and do both in bulk.")
hooks.install(blp)

HEADERS = {
    "X-Credits-Remaining": {"description": "Balance after this call's charge.", "schema": {"type": "integer"}},
    "RateLimit-Policy": {"description": 'Quota policies, e.g. `"hour";q=100;w=3600, "day";q=1000;w=86400`.',
                         "schema": {"type": "string"}},
    "RateLimit": {"description": 'Remaining quota and seconds to reset, e.g. `"hour";r=42;t=1200, "day";r=900;t=50000`.',
                  "schema": {"type": "string"}},
    "X-Request-Id": {"description": "Also in error bodies and logs.", "schema": {"type": "string"}},
}
ERROR_DOCS = {
    400: "`invalid_request` (body shape, with `details`), `target_too_short`, `invalid_kind`, `invalid_target`",
    401: "`unauthorized` (header missing or malformed), `invalid_token` (unknown or revoked key)",
    402: "`insufficient_balance`",
    403: "`forbidden` (another customer's resource)",
    404: "`not_found`",
    409: "`idempotency_conflict`",
    429: "`rate_limit_inflight`, `rate_limit_hour`, `rate_limit_day`; with `Retry-After`",
    502: "`engine_submit_failed`; with `Retry-After: 30`",
    503: "`service_unavailable` (database unreachable); with `Retry-After`",
}
IDEMPOTENCY_HEADER = {"in": "header", "name": "Idempotency-Key", "required": False,
                      "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                                 "pattern": "^[^\\x00-\\x1f\\x7f]+$"},
                      "description": "Repeating a call with the same key within 24 hours replays its first 202 "
                                     "answer without creating or charging anything; the same key with a "
                                     "different body is 409 `idempotency_conflict`. 1 to 255 characters, no "
                                     "control characters."}
SECURITY = [{"bearerAuth": []}]


def documented_errors(*statuses, overrides=None):
    """Stack an ``alt_response`` per error status, naming the codes each can carry."""
    def decorate(view):
        for status in reversed(statuses):
            text = (overrides or {}).get(status, ERROR_DOCS[status])
            view = blp.alt_response(status, schema=ErrorSchema, description=f"Error codes: {text}.")(view)
        return view
    return decorate


def json_body(body: dict, status: int = 200) -> Response:
    """The answer flask-smorest would make of ``body`` (schema dump, then ``jsonify``).

    The services build these bodies with exactly their schema's fields, types and order
    (tests/unit/test_response_bodies.py), so the dump would change nothing; skipping it,
    and writing stored results as they are (``RawJSON``), gives the same bytes for a
    fraction of the work.
    """
    provider = current_app.json
    if (provider.compact is None and current_app.debug) or provider.compact is False:
        response = provider.response(rawjson.parsed(body))  # indented output: no splicing
    else:
        text = rawjson.render(body, lambda obj: provider.dumps(obj, separators=(",", ":")))
        response = current_app.response_class(f"{text}\n", mimetype=provider.mimetype)
    response.status_code = status
    return response


def base_url() -> str:
    return current_app.config["PUBLIC_BASE_URL"] or request.host_url.rstrip("/")


def scan_url(scan_id: str) -> str:
    return f"{base_url()}/api/v1/scan/{scan_id}"


def with_poll_urls(body: dict) -> dict:
    """A creation's body with the URLs to poll, last in each object as the schemas order them."""
    if "bulk_id" in body:
        for entry in body["scans"]:
            entry["poll_url"] = scan_url(entry["scan_id"])
        body["aggregate_poll_url"] = f"{base_url()}/api/v1/scan/bulk/{body['bulk_id']}"
    else:
        body["poll_url"] = scan_url(body["scan_id"])
    return body


@blp.route("/scan")
class ScanCreate(MethodView):
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create a scan")
    @blp.arguments(ScanCreateSchema, example={"target": "jane.doe@example.com", "kind": "email"})
    @blp.response(202, ScanCreatedSchema, headers=HEADERS, description="The scan is queued.")
    @documented_errors(400, 401, 402, 409, 429, 502, 503)
    def post(self, body):
        """Queue an investigation of one target. Costs 1 credit."""
        outcome = scans.create_scan(g.customer, g.api_key.id, body["target"], body.get("kind"),
                                    request_id=g.request_id)
        return json_body(with_poll_urls(hooks.served(outcome)), 202)


@blp.route("/scan/<scan_id:scan_id>")
class ScanRead(MethodView):
    @blp.doc(security=SECURITY, summary="Read a scan")
    @blp.response(200, ScanSchema, headers=HEADERS,
                  description="The scan in its current state; which fields appear depends on `status`.")
    @documented_errors(401, 402, 403, 404, 503)
    def get(self, scan_id):
        """Read one scan. Poll every 10 to 15 seconds until it is completed or failed. Costs 1 credit."""
        return json_body(hooks.served_read(reads.serve_scan_read(auth.bearer_token(), scan_id, g.request_id)))


@blp.route("/scan/bulk")
class BulkCreate(MethodView):
    @blp.doc(security=SECURITY, parameters=[IDEMPOTENCY_HEADER], summary="Create a bulk batch")
    @blp.arguments(BulkCreateSchema)
    @blp.response(202, BulkCreatedSchema, headers=HEADERS, description="Valid targets are queued.")
    @documented_errors(400, 401, 402, 403, 409, 429, 502, 503, overrides={
        400: "`invalid_request`, `no_targets`, `too_many_targets`",
        403: "`bulk_not_allowed` (Pro tier)",
        429: "`rate_limit_inflight` (targets + scans in flight exceed the limit), `rate_limit_hour`, "
             "`rate_limit_day`; with `Retry-After`"})
    def post(self, body):
        """Queue up to 100 targets (Business and Enterprise). Costs 1 credit per queued scan, 1 if none."""
        outcome = scans.create_bulk(g.customer, g.api_key.id, body["targets"], request_id=g.request_id)
        return json_body(with_poll_urls(hooks.served(outcome)), 202)


@blp.route("/scan/bulk/<string:bulk_id>")
class BulkRead(MethodView):
    @blp.doc(security=SECURITY, summary="Read a bulk batch")
    @blp.response(200, BulkStateSchema, headers=HEADERS, description="Counts by status and every scan.")
    @documented_errors(401, 402, 403, 404, 503)
    def get(self, bulk_id):
        """Read every scan of a batch in one call. Costs 1 credit."""
        return json_body(hooks.served_read(reads.serve_bulk_read(auth.bearer_token(), bulk_id, g.request_id)))


# Both reads authenticate and charge in the statement that reads (services.reads.serve_*).
hooks.AUTHENTICATED_IN_VIEW.update({f"{blp.name}.{ScanRead.__name__}", f"{blp.name}.{BulkRead.__name__}"})
