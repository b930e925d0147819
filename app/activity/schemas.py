"""Query and response schemas of the activity log (``GET /api/v1/activity``)."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from app.api.fields import UtcDateTime
from app.targets.schemas import TARGET_DOC

TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}
ID_RULES = [validate.Length(min=1, max=64), validate.Regexp(r"^[A-Za-z0-9_-]+$")]


class ActivityListQuerySchema(ma.Schema):
    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    action = fields.String(validate=[validate.Length(min=1, max=64), validate.Regexp(r"^[a-z_]+\.[a-z_]+$")],
                           metadata={"pattern": "^[a-z_]+\\.[a-z_]+$",
                                     "description": "Only entries of this action, e.g. `scan.create`, `scan.read`, "
                                                    "`bulk.create`, `scans.list`, `portal.login`.",
                                     "example": "scan.create"})
    key_id = fields.String(validate=ID_RULES, metadata={
        "pattern": "^[A-Za-z0-9_-]+$", "description": "Only the calls made with this API key.",
        "example": "key_9aK2mQ7vXt1bLp4nRw8c3d"})
    resource_id = fields.String(validate=ID_RULES, metadata={
        "pattern": "^[A-Za-z0-9_-]+$",
        "description": "Only the entries about this object: a scan, bulk batch or delivery id (who created it, "
                       "who read it).", "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    created_after = UtcDateTime(metadata={
        "description": "Only entries after this time (ISO 8601; UTC when no offset is given).",
        "example": "2026-11-21T00:00:00Z"})
    created_before = UtcDateTime(metadata={
        "description": "Only entries before this time (ISO 8601; UTC when no offset is given).",
        "example": "2026-11-22T00:00:00Z"})
    target = fields.String(validate=validate.Length(min=1, max=1000), metadata={
        **{k: TARGET_DOC[k] for k in ("minLength", "maxLength", "pattern")},
        "description": "Only the creations that looked up this target (a single scan, or a bulk call that queued "
                       "it). Written as in a creation: it is checked and normalised the same way (an invalid one "
                       "is a 400 with the creation's error code), so `Jane@Example.COM` finds the scans of "
                       "`Jane@example.com`. The log keeps no target itself, only a keyed fingerprint of it.",
        "example": "jane.doe@example.com"})
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100), metadata={
        "description": "Page size, 1 to 100.", "example": 20})
    starting_after = fields.String(validate=ID_RULES, metadata={
        "pattern": "^[A-Za-z0-9_-]+$",
        "description": "The last `activity_id` of the previous page: the page starts with the entry just before it. "
                       "A well-formed id that is not one of your entries (of the calling key's mode) is refused "
                       "with 400 `invalid_request`, as a malformed one is.",
        "example": "act_Wq3nV7xL0bKp2mYt9cR4sA"})


class ActivityEntrySchema(ma.Schema):
    activity_id = fields.String(required=True, metadata={"example": "act_Wq3nV7xL0bKp2mYt9cR4sA"})
    created_at = fields.String(required=True, metadata=TIME_DOC)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for the calls of a test key; portal actions are true.", "example": True})
    action = fields.String(required=True, metadata={
        "description": "What was done: `scan.create`, `scan.read`, `bulk.create`, `bulk.read`, `scans.list`, "
                       "`deliveries.list`, `delivery.redeliver`, `activity.list`, and the portal's "
                       "(`portal.login`, `portal.logout`, `key.webhook_update`, `activity.export`, ...).",
        "example": "scan.create"})
    key_id = fields.String(required=True, allow_none=True, metadata={
        "description": "The API key that made the call; null for a portal action.",
        "example": "key_9aK2mQ7vXt1bLp4nRw8c3d"})
    user_id = fields.String(required=True, allow_none=True, metadata={
        "description": "The portal user who acted; null for an API call.", "example": None})
    user_email = fields.String(required=True, allow_none=True, metadata={
        "description": "That portal user's e-mail address; null for an API call.", "example": None})
    resource_id = fields.String(required=True, allow_none=True, metadata={
        "description": "The object the call created or named (a scan, bulk batch, delivery or key id), or null.",
        "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    status = fields.Integer(required=True, metadata={"description": "The HTTP status answered.", "example": 202})
    credits = fields.Integer(required=True, metadata={"description": "Credits the call cost.", "example": 1})
    client_address = fields.String(required=True, allow_none=True, metadata={
        "description": "The address the call came from.", "example": "203.0.113.7"})
    request_id = fields.String(required=True, allow_none=True, metadata={
        "description": "The call's `X-Request-Id`.", "example": "req_4f1c2a9e0b7d3c5a6e8f9a1b"})
    purpose = fields.String(required=True, allow_none=True, metadata={
        "description": "The purpose a creation gave, or null.", "example": "fraud_prevention"})
    case_ref = fields.String(required=True, allow_none=True, metadata={
        "description": "The case reference a creation gave, or null.", "example": "CASE-2026-0042"})


class ActivityListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(ActivityEntrySchema), required=True, metadata={"description": "Newest first."})
    has_more = fields.Boolean(required=True, metadata={
        "description": "More entries follow: ask again with `starting_after` = the last `activity_id` of `data`."})


class ActivityExportQuerySchema(ma.Schema):
    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    cursor = fields.String(validate=[validate.Length(min=1, max=200), validate.Regexp(r"^[A-Za-z0-9_-]+$")],
                           metadata={"pattern": "^[A-Za-z0-9_-]+$",
                                     "description": "The `X-Next-Cursor` of the previous page: the export goes on "
                                                    "just after it. Without it, the export starts with your oldest "
                                                    "entry.",
                                     "example": "MTIzNDU2LjIwMjYxMTIxVDEyMDAwNTAwMDAwMC5hY3RfV3EzblY3eEw"})
    limit = fields.Integer(load_default=1000, validate=validate.Range(min=1, max=1000), metadata={
        "description": "Most entries in the page, 1 to 1000.", "example": 1000})
