"""The scan endpoints of §4: create, read, bulk create, aggregate read; and the scans list (D17).

Views stay thin: they hand parsed input to ``services.scans`` (creations) and
``services.reads`` (reads and the list) and return its body;
authentication, charging and the limit headers are ``app.api.hooks``'s job.
"""
from __future__ import annotations

from flask import current_app, g, request
from flask.views import MethodView

from app import events
from app.api import hooks
from app.api.base import ApiBlueprint
from app.schemas.errors import ErrorSchema
from app.schemas.scans import (
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
from app.services import access, activity, erasure, findings, reads, scans, waits

blp = ApiBlueprint("scans", __name__, url_prefix="/api/v1",
                description="Create scans, read them, and do both in bulk.")

HEADERS = {
    "X-Credits-Remaining": {"description": "Balance after this call's charge.", "schema": {"type": "integer"}},
    "RateLimit-Policy": {"description": 'Quota policies, e.g. `"hour";q=100;w=3600, "day";q=1000;w=86400`.',
                         "schema": {"type": "string"}},
    "RateLimit": {"description": 'Remaining quota and seconds to reset, e.g. '
                                 '`"hour";r=42;t=1200, "day";r=900;t=50000`.',
                  "schema": {"type": "string"}},
    "X-Request-Id": {"description": "Also in error bodies and logs.", "schema": {"type": "string"}},
}
ERROR_DOCS = {
    400: "`invalid_request` (body shape, with `details`), `target_too_short`, `invalid_kind`, `invalid_target`, "
         "`invalid_purpose`, `purpose_required` (your account asks for a purpose on every scan)",
    401: "`unauthorized` (header missing or malformed), `invalid_token` (unknown or revoked key)",
    402: "`insufficient_balance`",
    403: "`forbidden` (another customer's resource)",
    404: "`not_found`",
    409: "`idempotency_conflict`",
    429: "`rate_limit_inflight`, `rate_limit_hour`, `rate_limit_day`; with `Retry-After`",
    502: "`engine_submit_failed`; with `Retry-After: 30`",
    503: "`service_unavailable` (database unreachable); with `Retry-After`",
}
# Every code a status really carries on these endpoints, with a message as the service words it:
# the OpenAPI document shows one example per code under its status.
ERROR_EXAMPLES = {
    "invalid_request": (400, "target: Not a valid string."),
    "target_too_short": (400, "target must have at least 3 characters"),
    "invalid_kind": (400, "kind must be one of email, phone, username"),
    "invalid_target": (400, "target is not a valid e-mail address"),
    "invalid_purpose": (400, "purpose must be one of fraud_prevention, kyc_aml, due_diligence, background_check, "
                             "security_research, law_enforcement, other"),
    "purpose_required": (400, "this account requires a purpose on every scan: one of fraud_prevention, ..."),
    "no_targets": (400, "targets must hold at least one target"),
    "too_many_targets": (400, "a bulk call takes at most 100 targets"),
    "unauthorized": (401, "the Authorization header must be 'Bearer <API key>'"),
    "invalid_token": (401, "the API key is unknown or revoked"),
    "key_expired": (401, "this API key has expired"),
    "ip_not_allowed": (403, "this API key may not be used from 198.51.100.7, the address this service sees "
                              "for your call"),
    "insufficient_scope": (403, "this API key lacks the scope scans:write, which this call needs"),
    "insufficient_balance": (402, "the account balance is below 1 credit"),
    "forbidden": (403, "this scan belongs to another customer"),
    "bulk_not_allowed": (403, "bulk calls are available on the Business and Enterprise tiers"),
    "target_suppressed": (403, "the person this target belongs to has opted out of lookups"),
    "not_found": (404, "no scan with this id"),
    "nothing_to_rerun": (409, "this scan has no source to re-run: every source answered"),
    "idempotency_conflict": (409, "this Idempotency-Key was used with a different request body"),
    "scan_in_flight": (409, "this scan is still in flight: erase it once it is completed or failed"),
    "rate_limit_inflight": (429, "too many scans in flight (10 of 10); retry when one finishes"),
    "rate_limit_hour": (429, "hourly scan quota reached (100 per hour)"),
    "rate_limit_day": (429, "daily scan quota reached (1000 per day)"),
    "rate_limited": (429, "this key already holds 100 waiting calls or streams; close one or wait without holding"),
    "engine_submit_failed": (502, "the investigation engine cannot be reached; retry in 30 seconds"),
    "service_unavailable": (503, "the service is temporarily unavailable; retry later"),
}
CODES = {
    400: ("invalid_request", "target_too_short", "invalid_kind", "invalid_target", "invalid_purpose",
          "purpose_required"),
    401: ("unauthorized", "invalid_token"),
    402: ("insufficient_balance",),
    403: ("forbidden",),
    404: ("not_found",),
    409: ("idempotency_conflict",),
    429: ("rate_limit_inflight", "rate_limit_hour", "rate_limit_day"),
    502: ("engine_submit_failed",),
    503: ("service_unavailable",),
}


def error_examples(codes) -> dict:
    return {code: {"summary": code, "value": {"ok": False, "error": code, "message": ERROR_EXAMPLES[code][1],
                                              "request_id": "req_4f1c2a9e0b7d3c5a6e8f9a1b"}}
            for code in codes}


IDEMPOTENCY_HEADER = {"in": "header", "name": "Idempotency-Key", "required": False,
                      "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                                 "pattern": "^[^\\x00-\\x1f\\x7f]+$"},
                      "description": "Repeating a call with the same key within 24 hours replays its first 202 "
                                     "answer without creating or charging anything; the same key with a "
                                     "different body is 409 `idempotency_conflict`. 1 to 255 characters, no "
                                     "control characters."}
SECURITY = [{"bearerAuth": []}]
# ``?wait=N`` of the reads, whose wrapper parses it (``hooks.served_read``): documented by hand.
WAIT_PARAMETER = {"in": "query", "name": "wait", "required": False,
                  "schema": {"type": "integer", "minimum": 1, "maximum": 60},
                  "description": "Wait up to this many seconds (1 to 60) for the answer: it comes as soon as the "
                                 "scan is completed or failed (a batch: every scan of it), else after that long "
                                 "with the state then. Charged as one read. Each key may have 100 such calls "
                                 "waiting at once; one more is refused with 429 `rate_limited` and `Retry-After`."}
WAIT_ERRORS = {400: "`invalid_request` (`wait` is not a whole number from 1 to 60)",
               429: "`rate_limited` (the key already has 100 calls waiting); with `Retry-After`, free of charge"}


# D21's refusals of the key, which every endpoint can answer, free of charge.
KEY_REFUSAL_DOCS = {
    401: "`key_expired` (the key's expiry has passed)",
    403: "`ip_not_allowed` (the key's IP allowlist does not hold your address), `insufficient_scope` (the key "
         "lacks the scope this call needs; the message names it); both free of charge",
}
KEY_REFUSAL_CODES = {401: ("key_expired",), 403: ("ip_not_allowed", "insufficient_scope")}


def with_key_refusals(docs: dict[int, str], codes: dict[int, tuple]) -> tuple[dict[int, str], dict[int, tuple]]:
    """``docs`` (status: the codes' words) and ``codes`` (status: codes) with D21's refusals added."""
    docs, codes = dict(docs), dict(codes)
    for status, text in KEY_REFUSAL_DOCS.items():
        docs[status] = f"{docs[status]}, {text}" if status in docs else text
        codes[status] = tuple(codes.get(status, ())) + KEY_REFUSAL_CODES[status]
    return dict(sorted(docs.items())), codes


def error_documenter(blueprint, examples: dict[str, str]):
    """The ``documented_errors`` of a blueprint whose statuses are described in words: each
    status's description names its codes in backticks, and every code named gets an example
    body with ``examples``' message; D21's refusals are added to every operation."""
    def examples_for(text: str) -> dict:
        return {code: {"summary": code, "value": {"ok": False, "error": code, "message": message,
                                                  "request_id": "req_4f1c2a9e0b7d3c5a6e8f9a1b"}}
                for code, message in examples.items() if f"`{code}`" in text}

    def documented_errors(statuses: dict):
        statuses, _ = with_key_refusals(statuses, {})

        def decorate(view):
            for status, text in reversed(list(statuses.items())):
                view = blueprint.alt_response(status, schema=ErrorSchema, description=f"Error codes: {text}.",
                                              examples=examples_for(text))(view)
            return view
        return decorate
    return documented_errors


def documented_errors(*statuses, overrides=None, codes=None, blueprint=None):
    """Stack an ``alt_response`` per error status, naming the codes each can carry, with an example of each;
    every endpoint also names D21's refusals of the key (401, 403)."""
    docs, all_codes = with_key_refusals(
        {status: (overrides or {}).get(status, ERROR_DOCS[status]) for status in statuses},
        {status: (codes or {}).get(status, CODES[status]) for status in statuses})

    def decorate(view):
        for status, text in reversed(list(docs.items())):
            view = (blueprint or blp).alt_response(status, schema=ErrorSchema, description=f"Error codes: {text}.",
                                                   examples=error_examples(all_codes[status]))(view)
        return view
    return decorate


SIGNATURE_PARAMETERS = [
    {"in": "header", "name": "X-Service-Event", "required": True,
     "schema": {"type": "string", "enum": list(events.NAMES)}},
    {"in": "header", "name": "X-Service-Signature", "required": True, "schema": {"type": "string"},
     "description": "`sha256=` + lower-case hex HMAC-SHA256 of the raw body, keyed with the webhook secret.",
     "example": "sha256=5d41402abc4b2a76b9719d911017c592e5b1e0d2a1f9c7a3b6e8d4f2a1c3b5e7"},
    {"in": "header", "name": "X-Service-Delivery", "required": True, "schema": {"type": "string"},
     "description": "The delivery id, the same on every attempt: drop duplicates by it.",
     "example": "dlv_7Hc2pQ9xVb4nLm1kRt8s0w"},
    {"in": "header", "name": "X-Service-Timestamp", "required": True, "schema": {"type": "string"},
     "description": "Time of this attempt, Unix milliseconds.", "example": "1795262460000"},
    {"in": "header", "name": "webhook-id", "required": True, "schema": {"type": "string"},
     "description": "Standard Webhooks: the delivery id.", "example": "dlv_7Hc2pQ9xVb4nLm1kRt8s0w"},
    {"in": "header", "name": "webhook-timestamp", "required": True, "schema": {"type": "string"},
     "description": "Standard Webhooks: time of this attempt, Unix seconds. Refuse one more than 5 minutes "
                    "from now.", "example": "1795262460"},
    {"in": "header", "name": "webhook-signature", "required": True, "schema": {"type": "string"},
     "description": "Standard Webhooks: `v1,<base64 HMAC-SHA256 of \"{webhook-id}.{webhook-timestamp}.{body}\">`, "
                    "keyed with the base64-decoded part of the secret after `whsec_`; one entry per active "
                    "secret (two while a secret is being rotated), separated by spaces.",
     "example": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
    {"in": "header", "name": "User-Agent", "required": True,
     "schema": {"type": "string", "example": "Service-Webhook/1"}},
]
WEBHOOK_RESULT_EXAMPLE = {
    "risk": {"score": 62, "band": "high", "reasons": [
        {"code": "breaches", "points": 12, "description": "Appears in 1 known breach.",
         "finding_ids": ["fnd_75Ml5C0uCxYLlJdzJ7o9"]},
        {"code": "verified_profiles", "points": 6, "description": "Linked to 1 verified online profile.",
         "finding_ids": ["fnd_xkbJCSOE9oL-xMQk4e0X"]},
        {"code": "other_signals", "points": 44, "description": "Other signals seen by the engine.",
         "finding_ids": []}]},
    "counts": {"cases": 2, "entities": 14, "findings": 9},
    "profiles": {"verified": [{"platform": "github", "url": "https://github.com/janedoe", "handle": "janedoe",
                               "display_name": "Jane Doe", "confidence": 0.92}], "weak": []},
    "contacts": {"emails": ["j.doe@example.org"], "phones": []},
    "breaches": [{"name": "ExampleForum", "date": "2021-06", "accounts": 1200000, "classes": ["emails", "passwords"]}],
    "phone_profile": None, "ai_summary": "Jane Doe has a public developer profile and one old breach.",
    "artifacts": {"pdf": "https://engine.example/artifacts/inv_1.pdf",
                  "person_card": "https://engine.example/artifacts/inv_1.card"},
    "sources": [
        {"id": "github", "name": "GitHub", "status": "found", "checked_at": "2026-11-21T12:01:58Z", "latency_ms": 230},
        {"id": "breach_index", "name": "Breach Index", "status": "found", "checked_at": "2026-11-21T12:01:58Z",
         "latency_ms": 412},
        {"id": "mailbox_verifier", "name": "Mailbox Verifier", "status": "found",
         "checked_at": "2026-11-21T12:01:58Z", "latency_ms": 180},
        {"id": "paste_monitor", "name": "Paste Monitor", "status": "rate_limited",
         "checked_at": "2026-11-21T12:01:58Z", "latency_ms": 95}],
    "coverage": {"checked": 4, "found": 3, "failed": 1, "ratio": 0.75},
    "partial": True,
    "findings": [
        {"id": "fnd_xkbJCSOE9oL-xMQk4e0X", "path": "profiles.verified[0]", "source_ids": ["github"],
         "feedback": None},
        {"id": "fnd_Tk4AfyWcO25EB_XyH-Ff", "path": "contacts.emails[0]", "source_ids": ["mailbox_verifier"],
         "feedback": {"verdict": "confirmed", "note": "", "at": "2026-11-21T12:30:00Z",
                      "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"}},
        {"id": "fnd_75Ml5C0uCxYLlJdzJ7o9", "path": "breaches[0]", "source_ids": ["breach_index"],
         "feedback": None}]}


def webhook_callbacks(operation_id: str) -> dict:
    """The events a creation leads to, as an OpenAPI 3.0 callback (operation ids must be unique)."""
    return {"scanFinished": {WEBHOOK_URL: {"post": {**WEBHOOK_OPERATION, "operationId": operation_id}}}}


WEBHOOK_URL = "https://receiver.example.com/your-webhook-path"
WEBHOOK_OPERATION = {
    "tags": ["webhooks"],
    "summary": " and ".join(events.NAMES) + " events",
    "description": "When a scan finishes, the service POSTs its event to the webhook URL set for the API key "
                   "that created it (on the key's page; the URL is not part of this request). Verify a signature "
                   "on the raw body bytes before trusting the body. A 2xx answer received whole in time "
                   "acknowledges; otherwise the delivery is retried with the same delivery id and body, as the "
                   "Webhooks section at the top of this page says. Missed events can be read with "
                   "`GET /api/v1/deliveries`.",
    "parameters": SIGNATURE_PARAMETERS,
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [{"$ref": f"#/components/schemas/{kind.schema}"} for kind in events.EVENTS],
                   "discriminator": {"propertyName": "event", "mapping": {
                       kind.name: f"#/components/schemas/{kind.schema}" for kind in events.EVENTS}}},
        "examples": {
            "scan.completed": {"summary": "scan.completed", "value": {
                "event": "scan.completed", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "target": "jane.doe@example.com",
                "kind": "email", "status": "completed", "completed_at": "2026-11-21T12:02:00Z",
                "result": WEBHOOK_RESULT_EXAMPLE}},
            "scan.failed": {"summary": "scan.failed (a bulk scan)", "value": {
                "event": "scan.failed", "scan_id": "scn_8aP2vR5nQx0wLk3mYt7c1d",
                "bulk_id": "blk_Q2x0mV8rLk1cYt6nWb3a9g",
                "target": "fail.me@example.com", "kind": "email", "status": "failed",
                "failed_at": "2026-11-21T12:01:40Z",
                "failure": {"code": "engine_failed", "message": "the engine could not finish"}}}}}}},
    "responses": {"2XX": {"description": "Acknowledged: no more attempts."},
                  "default": {"description": "Not acknowledged (also a timeout or a refused connection): "
                                             "the delivery is retried."}}}


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


def created(outcome: scans.Outcome):
    """A creation's answer: its body with the URLs to poll, what its admission charged and the
    activity entry it wrote with the charge."""
    charged = hooks.Charged(outcome.balance, outcome.usage, outcome.limits, credits=outcome.cost)
    return hooks.render(with_poll_urls(outcome.body), 202, charged=charged, subject=outcome.subject,
                        recorded=outcome.recorded)


def served(read: reads.ServedRead):
    """A read's answer, or the refusal it found (402, 403, 404); charged in its statement."""
    charged = hooks.Charged(read.balance, read.usage, credits=read.credits) if read.balance is not None else None
    if read.error is not None:
        return hooks.refusal(read.error, charged=charged)
    return hooks.render(read.body, charged=charged)


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
    def post(self, key, body, wait=None):
        """Queue an investigation of one target. With `wait`, the answer waits up to that many seconds for the
        scan to finish: 200 with the scan as its read shows it when it completed or failed in time, else 202 as
        without it. Costs {price}."""
        held = waits.hold(key.id, wait) if wait is not None else None  # 429 rate_limited: nothing created
        try:
            outcome = scans.create_scan(key.customer, key.id, body["target"], body.get("kind"),
                                        request_id=g.request_id, livemode=key.livemode, purpose=body.get("purpose"),
                                        case_ref=body.get("case_ref"), entry=hooks.call_entry(key, 202))
            final = waited_scan(outcome, key, wait) if held is not None else None
        finally:
            if held is not None:
                waits.release(held)
        if final is None:
            return created(outcome)
        # Its entry, written as 202, says 200; replayed by its Idempotency-Key as a 202 would be.
        return hooks.render(final, 200, charged=hooks.Charged(outcome.balance, outcome.usage, outcome.limits,
                                                              credits=outcome.cost), subject=outcome.subject,
                            recorded=outcome.recorded, replayable=True)


def waited_scan(outcome: scans.Outcome, key, seconds: int) -> dict | None:
    """The new scan's read once it is final within ``seconds`` (D27), else None."""
    scan_id = outcome.body["scan_id"]
    waiter = waits.subscribe(waits.scan_topic(scan_id))  # before the first read: no change falls between

    def read() -> dict:
        return reads.read_scan(key.customer_id, scan_id, key.livemode)
    try:
        body = waits.wait_until(waiter, seconds, read, reads.SCAN_WAIT.done, read())
    finally:
        waits.unsubscribe(waiter)
    return body if reads.SCAN_WAIT.done(body) else None


@blp.route("/scan/<scan_id:scan_id>")
class ScanRead(MethodView):
    @hooks.served_read(reads.serve_scan_read, scope=access.SCANS_READ, wait=reads.SCAN_WAIT)
    @blp.doc(security=SECURITY, summary="Read a scan", operationId="getScan", parameters=[WAIT_PARAMETER])
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
    def post(self, key, scan_id):
        """Ask again the sources that could not answer for a completed scan (`result.partial`): a new scan
        of the same target, with `rerun_of` naming this one and its own webhook event. Its result is the
        whole picture: this scan's items and sources, with the new answers of the sources asked again in
        place of the failed ones, coverage and `partial` counted over all sources, and every finding under
        its id here, listing every source that found it. Limited and charged as a creation: costs {price}."""
        return created(scans.create_rerun(key.customer, key.id, scan_id, request_id=g.request_id,
                                          livemode=key.livemode, entry=hooks.call_entry(key, 202)))


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
    def post(self, key, body, scan_id, finding_id):
        """Say whether a finding of a completed scan is about the person (`confirmed`) or not
        (`false_positive`). Later reads of the scan show it on the finding (`feedback`); giving it again
        replaces it. Costs {price}."""
        given = findings.give_feedback(key.customer_id, scan_id, finding_id, verdict=body.get("verdict"),
                                       note=body.get("note"), livemode=key.livemode, api_key_id=key.id)
        # The activity log's entry names the scan, not the finding (the route's last argument).
        return hooks.render(given, subject=activity.Subject(scan_id))


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
    def post(self, key, body):
        """Queue up to 100 targets (Business and Enterprise). Costs {price}."""
        outcome = scans.create_bulk(key.customer, key.id, body["targets"], request_id=g.request_id,
                                    livemode=key.livemode, purpose=body.get("purpose"),
                                    case_ref=body.get("case_ref"), entry=hooks.call_entry(key, 202))
        return created(outcome)


@blp.route("/scan/bulk/<string:bulk_id>")
class BulkRead(MethodView):
    @hooks.served_read(reads.serve_bulk_read, scope=access.SCANS_READ, wait=reads.BULK_WAIT)
    @blp.doc(security=SECURITY, summary="Read a bulk batch", operationId="getBulk", parameters=[WAIT_PARAMETER])
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
        400: "`invalid_request` (a filter, `limit` or `starting_after` is not valid; with `details`)"},
        codes={400: ("invalid_request",)})
    @blp.priced("call")
    def get(self, key, **query):
        """List your scans, newest first, 1 to 100 per page; `has_more` says whether to ask for the next page
        with `starting_after`. Each entry is as in a bulk batch's read. Costs {price} per page."""
        return hooks.render(reads.list_scans(key.customer_id, livemode=key.livemode, **query))

