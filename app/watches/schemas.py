"""The watches calls' bodies (D28), in the order the service writes them."""
from __future__ import annotations

import copy

import marshmallow as ma
from marshmallow import RAISE, fields

from app.scans.schemas import KIND_DOC, TIME_DOC, BulkCreateSchema, RejectedSchema, ScanCreatedSchema, ScanCreateSchema
from app.watches import event_kinds

INTERVAL_DOC = {"description": "How often the target is scanned again: daily, weekly or monthly (30 days).",
                "example": "weekly"}
INTERVALS = ("daily", "weekly", "monthly")
WATCH_ID_DOC = {"description": "The watch's id.", "example": "wch_Q2x0mV8rLk1cYt6nWb3a9g"}
ID_FIELD = [ma.validate.Length(min=1, max=40), ma.validate.Regexp(r"^[A-Za-z0-9_-]+$")]


class WatchCreateSchema(ScanCreateSchema):
    interval = fields.String(required=True, validate=ma.validate.OneOf(INTERVALS), metadata=INTERVAL_DOC)


class WatchBulkCreateSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    targets = BulkCreateSchema._declared_fields["targets"]
    interval = WatchCreateSchema._declared_fields["interval"]
    purpose = BulkCreateSchema._declared_fields["purpose"]
    case_ref = BulkCreateSchema._declared_fields["case_ref"]
    min_confidence = BulkCreateSchema._declared_fields["min_confidence"]
    required = BulkCreateSchema._declared_fields["required"]


class WatchUpdateSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    interval = fields.String(validate=ma.validate.OneOf(INTERVALS), metadata=INTERVAL_DOC)
    status = fields.String(validate=ma.validate.OneOf(("active", "paused")), metadata={
        "description": "paused: no scheduled scan until it is active again.", "example": "paused"})
    case_ref = fields.Raw(allow_none=True, metadata={"type": "string", "description": "Your own reference; "
                                                     "null removes it.", "example": "CASE-2291"})


class ChangesSchema(ma.Schema):
    added = fields.List(fields.String(), required=True, metadata={"description": "Ids of findings new since "
                                                                                  "the previous scan."})
    removed = fields.List(fields.String(), required=True, metadata={"description": "Ids of findings gone since "
                                                                                    "the previous scan."})
    risk = fields.Dict(required=True, metadata={"description": "`from` and `to`, each `{score, band}`.",
                                                "example": {"from": {"score": 40, "band": "medium"},
                                                            "to": {"score": 55, "band": "high"}}})


class WatchEntrySchema(ma.Schema):
    watch_id = fields.String(required=True, metadata=WATCH_ID_DOC)
    livemode = fields.Boolean(required=True, metadata={"example": True})
    target = fields.String(required=True, allow_none=True, metadata={
        "description": "The target; null once the watch ended because the person opted out of lookups (the "
                       "watch keeps nothing that identifies them).", "example": "jane.doe@example.com"})
    kind = fields.String(required=True, metadata=KIND_DOC)
    interval = fields.String(required=True, metadata=INTERVAL_DOC)
    status = fields.String(required=True, metadata={"description": "active, paused or ended.", "example": "active"})
    purpose = fields.String(required=True, allow_none=True, metadata={"example": "fraud_prevention"})
    case_ref = fields.String(required=True, allow_none=True, metadata={"example": "CASE-2291"})
    created_at = fields.String(required=True, metadata=TIME_DOC)
    next_scan_at = fields.String(required=True, allow_none=True, metadata={
        "description": "When the next scheduled scan is due (null unless active).", "example": "2026-11-28T09:14:03Z"})
    last_scan_id = fields.String(required=True, allow_none=True, metadata={"example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    last_change_at = fields.String(required=True, allow_none=True, metadata={
        "description": "When a scan last found a change.", "example": None})
    last_error = fields.String(required=True, allow_none=True, metadata={
        "description": "Why the last scheduled scan could not be made (it is tried again later).", "example": None})
    last_changes = fields.Nested(ChangesSchema, required=True, allow_none=True, metadata={
        "description": "What the last change found (as in the watch.changed event)."})
    min_confidence = fields.Float(metadata={
        "description": "Only when the watch was created with one: the `min_confidence` each of its scans has (its "
                       "comparisons leave out the findings under it).", "example": 0.5})
    required = fields.String(metadata={
        "description": "Only when the watch was created with one: the `required` rule each of its scans has.",
        "example": "profiles.verified OR breaches"})


class WatchSchema(WatchEntrySchema):
    ok = fields.Boolean(required=True, metadata={"example": True})

    class Meta:
        ordered = True


class WatchBulkEntrySchema(WatchEntrySchema):
    index = fields.Integer(required=True, metadata={"description": "Position of its target in the request's "
                                                                   "targets.", "example": 0})


class WatchBulkCreatedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    livemode = fields.Boolean(required=True, metadata={"example": True})
    bulk_id = fields.String(required=True, metadata={
        "description": "The batch of the watches' first scans: read them all with `GET /api/v1/scan/bulk/{bulk_id}`.",
        "example": "blk_Q2x0mV8rLk1cYt6nWb3a9g"})
    total = fields.Integer(required=True, metadata={"description": "Targets submitted.", "example": 3})
    created = fields.Integer(required=True, metadata={"description": "Watches created (each with its first scan "
                                                                     "queued).", "example": 2})
    rejected = fields.List(fields.Nested(RejectedSchema), required=True, metadata={
        "description": "The targets not watched, each with why (free of charge)."})
    watches = fields.List(fields.Nested(WatchBulkEntrySchema), required=True, metadata={
        "description": "The watches created, in request order."})


class WatchListQuerySchema(ma.Schema):
    class Meta:
        unknown = RAISE

    status = fields.String(validate=ma.validate.OneOf(("active", "paused", "ended")),
                           metadata={"description": "Only watches in this state.", "example": "active"})
    kind = fields.String(validate=ma.validate.OneOf(["email", "phone", "username"]),
                         metadata={"description": "Only watches of this kind.", "example": "email"})
    limit = fields.Integer(load_default=20, validate=ma.validate.Range(min=1, max=100), metadata={
        "description": "Page size, 1 to 100.", "example": 20})
    starting_after = fields.String(validate=ID_FIELD, metadata={
        "description": "The last `watch_id` of the previous page. A well-formed id that is not one of your "
                       "watches (of the calling key's mode) is refused with 400 `invalid_request`, as a malformed "
                       "one is.", "example": "wch_Q2x0mV8rLk1cYt6nWb3a9g"})


class WatchListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(WatchEntrySchema), required=True)
    has_more = fields.Boolean(required=True, metadata={"example": False})


class WatchRunSchema(ScanCreatedSchema):
    watch_id = fields.String(required=True, metadata=WATCH_ID_DOC)


# --- watch events (documented only) ---------------------------------------------------------

# Each field a watch event's body may carry; ``event_kinds.WATCH_KINDS`` says which a kind carries.
_WATCH_EVENT_FIELDS = {
    "watch_id": fields.String(required=True, metadata=WATCH_ID_DOC),
    "livemode": fields.Boolean(required=True, metadata={"description": "false for a test key's watch.",
                                                        "example": True}),
    "purpose": fields.String(required=True, allow_none=True, metadata={"example": "fraud_prevention"}),
    "case_ref": fields.String(required=True, allow_none=True, metadata={"example": "CASE-2291"}),
    "scan_id": fields.String(required=True, metadata={"description": "The watch's scan that found the change.",
                                                      "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"}),
    "previous_scan_id": fields.String(required=True, metadata={
        "description": "The watch's previous completed scan, which it was compared with.",
        "example": "scn_8aP2vR5nQx0wLk3mYt7c1d"}),
    "changes": fields.Nested(ChangesSchema, required=True),
    "reason": fields.String(required=True),
    "last_error": fields.String(required=True, allow_none=True, metadata={
        "description": "Why the last scheduled scan could not be made.",
        "example": "the account balance is below 1 credit"}),
    "target": fields.String(required=True, metadata={"example": "jane.doe@example.com"}),
    "kind": fields.String(required=True, metadata=KIND_DOC),
    "added_items": fields.Dict(required=True, metadata={
        "description": "The added findings' items of the scan's result, by finding id.",
        "example": {"fnd_75Ml5C0uCxYLlJdzJ7o9": {"name": "ExampleForum", "date": "2021-06", "accounts": 1200000,
                                                 "classes": ["emails", "passwords"]}}}),
}
_REASONS = {event_kinds.WATCH_PAUSED: ("no_scan_possible", "No scan could be made for three intervals."),
            event_kinds.WATCH_ENDED: ("target_suppressed", "The person opted out of lookups.")}


def _watch_event_schema(kind: event_kinds.WatchEventKind, *, thin: bool = False) -> type[ma.Schema]:
    """The body schema of a watch event kind: ``event``, then the registry's fields (a thin body's
    only: no target, kind or items)."""
    declared = {"event": fields.String(required=True, metadata={"enum": [kind.name]})}
    for name in kind.body_fields(thin=thin):
        field = copy.deepcopy(_WATCH_EVENT_FIELDS[name])
        if name == "reason":
            code, words = _REASONS[kind.name]
            field.metadata = {"enum": [code], "description": words}
        declared[name] = field
    return ma.Schema.from_dict(declared, name=kind.schema + ("Thin" if thin else ""))


# The body schema of each watch event kind, full and thin, for the OpenAPI document.
WATCH_EVENT_SCHEMAS = {kind.schema + ("Thin" if thin else ""): _watch_event_schema(kind, thin=thin)
                       for kind in event_kinds.WATCH_KINDS for thin in (False, True)}
