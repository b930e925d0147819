"""Query and response schemas of the events list (and the stream's query); the OpenAPI parts that
name events, for the routes of every domain: the reads' ``?wait=N`` (D27) and the webhook callbacks
of the creations."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from app.events import kinds
from app.events.feed import EXAMPLE_ID
from app.events.waits import KEY_CHECK_SECONDS, WAIT_RANGE

TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}
KINDS = ", ".join(f"`{name}`" for name in kinds.delivery_events())
_KIND = "|".join(name.replace(".", "\\.") for name in kinds.delivery_events())
KINDS_PATTERN = f"^({_KIND})(,({_KIND}))*$"
# An event id as the list and the stream write it: ``evt_`` and a sealed number (``feed.event_id``).
EVENT_ID_PATTERN = "^evt_[0-9a-f]{32}$"


class EventFilterArgs(ma.Schema):
    """The filters the list and the stream share."""

    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    events = fields.String(validate=validate.Regexp(KINDS_PATTERN), metadata={
        "description": f"Only these kinds of event, separated by commas: any of {KINDS}.",
        "example": "scan.completed,scan.failed"})
    scan_id = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "Only the events of this scan.", "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    bulk_id = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "Only the events of the scans of this bulk batch.", "example": "blk_Q2x0mV8rLk1cYt6nWb3a9g"})
    watch_id = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "Only the events of this watch's scans.", "example": "wch_T3JhbmdlIGp1aWNl"})
    payload = fields.String(validate=validate.OneOf(kinds.PAYLOADS), metadata={
        "description": "`thin`: bodies without the target, the result or the failure message (read those with "
                       "the scan); `full` (the default): bodies as a full webhook sends them."})


class EventListArgs(EventFilterArgs):
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100), metadata={
        "description": "Events per page, 1 to 100."})
    starting_after = fields.String(validate=validate.Regexp(EVENT_ID_PATTERN), metadata={
        "description": "The `event_id` of the last entry of the previous page: the page after it.",
        "example": EXAMPLE_ID})


class EventSchema(ma.Schema):
    event_id = fields.String(required=True, metadata={
        "description": "The event's id, opaque: give it back as `starting_after`, `after` or `Last-Event-ID` to "
                       "resume after it. Ids do not sort in time order: the list and the stream give events in "
                       "their order.", "example": EXAMPLE_ID})
    event = fields.String(required=True, metadata={"enum": list(kinds.delivery_events()), "example": "scan.completed"})
    created_at = fields.String(required=True, metadata=TIME_DOC)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for the events of test scans, true otherwise.", "example": True})
    body = fields.Dict(required=True, metadata={
        "description": "The event's body, as a webhook endpoint receives it (thin with `payload=thin`). Once its "
                       "scan is erased, the thin body only.",
        "example": {"event": "scan.completed", "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "livemode": True,
                    "status": "completed", "purpose": None, "case_ref": None,
                    "completed_at": "2026-11-21T12:03:05Z"}})


class EventListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(EventSchema), required=True, metadata={"description": "Newest first."})
    has_more = fields.Boolean(required=True, metadata={
        "description": "Whether older events follow: ask again with `starting_after` the last `event_id`."})


class EventStreamArgs(EventFilterArgs):
    after = fields.String(validate=validate.Regexp(EVENT_ID_PATTERN), metadata={
        "description": "Start after this event (as the `Last-Event-ID` header does, which wins when both are "
                       "given); without either, the stream starts with the next event.", "example": EXAMPLE_ID})


# ``?wait=N`` of the reads, whose wrapper parses it (``hooks.served_read``): documented by hand.
WAIT_PARAMETER = {"in": "query", "name": "wait", "required": False,
                  "schema": {"type": "integer", "minimum": WAIT_RANGE[0], "maximum": WAIT_RANGE[1]},
                  "description": f"Wait up to this many seconds ({WAIT_RANGE[0]} to {WAIT_RANGE[1]}, in digits) for "
                                 "the answer: it comes as soon as the "
                                 "scan is completed or failed (a batch: every scan of it), else after that long "
                                 "with the state then. Charged as one read, when it answers; a key revoked, "
                                 "expired or without the scope `scans:read` meanwhile gets its refusal (401 or "
                                 f"403, free) within {KEY_CHECK_SECONDS:g} seconds. Each key may have 100 such calls "
                                 "waiting at once; one more is refused with 429 `rate_limited` and `Retry-After`."}
WAIT_ERRORS = {400: f"`invalid_request` (`wait` is not a whole number from {WAIT_RANGE[0]} to {WAIT_RANGE[1]}, or "
                    "`min_confidence` not a number from 0 to 1)",
               429: "`rate_limited` (the key already has 100 calls waiting); with `Retry-After`, free of charge"}

# The webhook callbacks of the creations, in the OpenAPI document (the events' names and bodies).
SIGNATURE_PARAMETERS = [
    {"in": "header", "name": "X-Service-Event", "required": True,
     "schema": {"type": "string", "enum": list(kinds.NAMES)}},
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
         "confidence": 0.88, "matched_on": ["email", "name"], "feedback": None},
        {"id": "fnd_Tk4AfyWcO25EB_XyH-Ff", "path": "contacts.emails[0]", "source_ids": ["mailbox_verifier"],
         "confidence": 1.0, "matched_on": ["email"],
         "feedback": {"verdict": "confirmed", "note": "", "at": "2026-11-21T12:30:00Z",
                      "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"}},
        {"id": "fnd_75Ml5C0uCxYLlJdzJ7o9", "path": "breaches[0]", "source_ids": ["breach_index"],
         "confidence": 0.97, "matched_on": ["email"], "feedback": None}],
    "match": True,
    "filtered": {"min_confidence": 0.5, "findings_left_out": 1}}


def webhook_callbacks(operation_id: str) -> dict:
    """The events a creation leads to, as an OpenAPI 3.0 callback (operation ids must be unique)."""
    return {"scanFinished": {WEBHOOK_URL: {"post": {**WEBHOOK_OPERATION, "operationId": operation_id}}}}


WEBHOOK_URL = "https://receiver.example.com/your-webhook-path"
WEBHOOK_OPERATION = {
    "tags": ["webhooks"],
    "summary": " and ".join(kinds.NAMES) + " events",
    "description": "When a scan finishes, the service POSTs its event to the webhook URL set for the API key "
                   "that created it (on the key's page; the URL is not part of this request). Verify a signature "
                   "on the raw body bytes before trusting the body. A 2xx answer received whole in time "
                   "acknowledges; otherwise the delivery is retried with the same delivery id and body, as the "
                   "Webhooks section at the top of this page says. Missed events can be read with "
                   "`GET /api/v1/deliveries`.",
    "parameters": SIGNATURE_PARAMETERS,
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [{"$ref": f"#/components/schemas/{kind.schema}"} for kind in kinds.EVENTS],
                   "discriminator": {"propertyName": "event", "mapping": {
                       kind.name: f"#/components/schemas/{kind.schema}" for kind in kinds.EVENTS}}},
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
