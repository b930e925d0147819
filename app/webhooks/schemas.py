"""Query and response schemas of the webhook delivery endpoints (D17)."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from app.events import kinds as events
from app.webhooks.delivery_log import STATUSES

TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}
BODY_EXAMPLE = ('{"event":"scan.completed","scan_id":"scn_3kT9wQ0vXl2mYp7aRz1b4Q","target":"jane.doe@example.com",'
                '"kind":"email","status":"completed","completed_at":"2026-11-21T12:03:05Z","result":{...}}')


class DeliveryListArgs(ma.Schema):
    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    status = fields.String(validate=validate.OneOf(STATUSES), metadata={
        "description": "Only deliveries in this state."})
    event = fields.String(validate=validate.OneOf(events.delivery_events()), metadata={
        "description": "Only deliveries of this event."})
    scan_id = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "Only the deliveries of this scan.", "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    endpoint_id = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "Only the deliveries to this endpoint.", "example": "ep_Q2hlcnJ5IHRvbWF0b2Vz"})
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100), metadata={
        "description": "Deliveries per page, 1 to 100."})
    starting_after = fields.String(validate=validate.Length(min=1, max=200), metadata={
        "description": "The `delivery_id` of the last entry of the previous page: the page after it. A "
                       "well-formed id that is not one of your account's deliveries (of the calling key's mode) "
                       "is refused with 400 `invalid_request`, as a malformed one is.",
        "example": "dlv_T3JhbmdlIGp1aWNlIGJveA"})


class AttemptSchema(ma.Schema):
    attempt = fields.Integer(required=True, metadata={
        "description": "1, 2, ... over the delivery's whole life (a redelivery continues the count).",
        "example": 1})
    at = fields.String(required=True, metadata={**TIME_DOC, "description": "When the request was sent."})
    outcome = fields.String(required=True, metadata={
        "enum": ["in_progress", "succeeded", "failed"],
        "description": "`in_progress` while the request is under way (its status, error and duration are then "
                       "still null), else how it ended.", "example": "succeeded"})
    http_status = fields.Integer(required=True, allow_none=True, metadata={
        "description": "The receiver's HTTP status; null when none came back.", "example": 200})
    error = fields.String(required=True, allow_none=True, metadata={
        "description": "Why the attempt failed without a usable answer: `timeout`, `connection_error`, "
                       "`tls_error`, `redirect_not_followed`, `ssrf_refused`, `request_error`, `worker_lost`; "
                       "null otherwise.",
        "example": None})
    duration_ms = fields.Integer(required=True, allow_none=True, metadata={"example": 142})


class DeliverySchema(ma.Schema):
    delivery_id = fields.String(required=True, metadata={
        "description": "The same on every attempt (`webhook-id` and `X-Service-Delivery`): drop duplicates by it.",
        "example": "dlv_T3JhbmdlIGp1aWNlIGJveA"})
    endpoint_id = fields.String(required=True, metadata={
        "description": "The endpoint it is addressed to (each endpoint gets its own delivery of an event).",
        "example": "ep_Q2hlcnJ5IHRvbWF0b2Vz"})
    event = fields.String(required=True, metadata={"enum": list(events.delivery_events())})
    scan_id = fields.String(required=True, allow_none=True, metadata={
        "description": "null for a test event sent from the key's page.", "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for the deliveries of a test key (`service_test_…`), true otherwise.", "example": True})
    status = fields.String(required=True, metadata={
        "enum": list(STATUSES), "description": "`cancelled`: it was waiting to be sent when its scan was erased; "
                                               "it will not be sent. `skipped`: its endpoint was disabled after "
                                               "failing for days; recovering the endpoint sends it."})
    created_at = fields.String(required=True, metadata=TIME_DOC)
    attempts = fields.List(fields.Nested(AttemptSchema), required=True, metadata={"description": "Oldest first."})
    next_attempt_at = fields.String(required=True, allow_none=True, metadata={
        **TIME_DOC, "description": "When the next attempt is due while `pending`; null once finished."})
    body = fields.String(required=True, allow_none=True, metadata={
        "description": "The exact body every attempt sends, as a JSON text; null once its scan was erased.",
        "example": BODY_EXAMPLE})


class DeliveryListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(DeliverySchema), required=True, metadata={"description": "Newest first."})
    has_more = fields.Boolean(required=True, metadata={
        "description": "Whether older deliveries follow: ask again with `starting_after` the last `delivery_id`."})


RedeliveredSchema = ma.Schema.from_dict(
    {"ok": fields.Boolean(required=True, metadata={"example": True}), **DeliverySchema().declared_fields},
    name="Redelivered")
