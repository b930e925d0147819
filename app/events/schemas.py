"""Query and response schemas of the events list (and the stream's query)."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from app.events import kinds
from app.events.feed import EXAMPLE_ID

TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}
KINDS = ", ".join(f"`{name}`" for name in kinds.DELIVERY_EVENTS)
_KIND = "|".join(name.replace(".", "\\.") for name in kinds.DELIVERY_EVENTS)
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
    event = fields.String(required=True, metadata={"enum": list(kinds.DELIVERY_EVENTS), "example": "scan.completed"})
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
