"""Request and response schemas of the webhook endpoints calls (D22)."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from app.api.fields import UtcDateTime
from app.events import kinds as event_registry
from app.webhooks.endpoints import EVENT_NAMES, MAX_DESCRIPTION
from app.webhooks.signing_secrets import DEFAULT_OVERLAP_HOURS, MAX_OVERLAP_HOURS

TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}
ENDPOINT_ID = {"example": "ep_Q2hlcnJ5IHRvbWF0b2Vz"}
# The URL's shape as app.plumbing.outbound_urls checks it (https, a host name, an optional port and path);
# that its host resolves to public addresses only is checked when it is saved and cannot be a pattern.
# whsec_ and standard base64 of 16 to 128 bytes (app.webhooks.key_settings.check_secret), padded.
_B64 = "[A-Za-z0-9+/]"
SECRET_PATTERN = (f"^whsec_(({_B64}{{4}}){{6,42}}|({_B64}{{4}}){{5,42}}({_B64}{{2}}==|{_B64}{{3}}=))$")
URL_DOC = {"description": "Where events are posted: an https URL that resolves to public addresses only.",
           "pattern": r"^https://[A-Za-z0-9]{1,20}(-[A-Za-z0-9]{1,20})?"
                      r"(\.[A-Za-z0-9]{1,20}(-[A-Za-z0-9]{1,20})?)*(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~/-]*)?$",
           "example": "https://hooks.example.com/scans"}


class StrictBoolean(fields.Boolean):
    """true or false only: marshmallow's Boolean also takes "yes", 1 or "on", which the document
    (type boolean) calls invalid."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


def _events(**kwargs):
    # The items are checked by the service (``endpoints.check_events``), so that a refused item is one
    # flat message like every other field's, not an error nested by position.
    return fields.List(fields.Raw(allow_none=True, metadata={"type": "string", "enum": list(EVENT_NAMES)}),
                       validate=validate.Length(min=1), metadata={
        "description": "The events sent to it: " + ", ".join(f"`{n}`" for n in EVENT_NAMES) + ".",
        "example": ["scan.completed", "scan.failed"]}, **kwargs)


class _Settings(ma.Schema):
    class Meta:
        unknown = RAISE

    url = fields.String(validate=validate.Length(min=1, max=2048), metadata=URL_DOC)
    payload = fields.String(validate=validate.OneOf(event_registry.PAYLOADS), metadata={
        "description": "`full`: the scan with its target and result; `thin`: ids, status, times and purpose only "
                       "(read the rest through the API).", "example": "full"})
    enabled = StrictBoolean(metadata={"description": "false: no event is sent to it.", "example": True})
    description = fields.String(validate=validate.Length(max=MAX_DESCRIPTION), metadata={
        "description": "Your note about it.", "example": "Case system"})


class EndpointCreateSchema(_Settings):
    url = fields.String(required=True, validate=validate.Length(min=1, max=2048), metadata=URL_DOC)
    events = _events()
    secret = fields.String(metadata={
        "pattern": SECRET_PATTERN,
        "description": "Your own signing secret (`whsec_` and base64 of 16 to 128 random bytes); by default one "
                       "is generated.", "example": "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="})


class EndpointUpdateSchema(_Settings):
    events = _events()


class EndpointSchema(ma.Schema):
    endpoint_id = fields.String(required=True, metadata=ENDPOINT_ID)
    url = fields.String(required=True, metadata={"example": "https://hooks.example.com/scans"})
    events = fields.List(fields.String(), required=True, metadata={"example": ["scan.completed", "scan.failed"]})
    payload = fields.String(required=True, metadata={"enum": list(event_registry.PAYLOADS), "example": "full"})
    enabled = fields.Boolean(required=True, metadata={"example": True})
    description = fields.String(required=True, metadata={"example": "Case system"})
    disabled_at = fields.String(required=True, allow_none=True, metadata={
        **TIME_DOC, "description": "When it was disabled because every delivery to it failed for days; null "
                                   "otherwise."})
    secret_rotation_ends_at = fields.String(required=True, allow_none=True, metadata={
        **TIME_DOC, "description": "While a rolled secret overlaps the current one: when the new one replaces it."})


class EndpointOneSchema(EndpointSchema):
    ok = fields.Boolean(required=True, metadata={"example": True})


class EndpointCreatedSchema(EndpointOneSchema):
    secret = fields.String(required=True, metadata={
        "description": "Its signing secret: shown in this answer only.", "example": "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="})


class EndpointListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(EndpointSchema), required=True, metadata={"description": "The first first."})


class EndpointDeletedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    endpoint_id = fields.String(required=True, metadata=ENDPOINT_ID)
    deleted = fields.Boolean(required=True, metadata={"example": True})


class RollSecretSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    overlap_hours = fields.Integer(load_default=DEFAULT_OVERLAP_HOURS, strict=True,
                                   validate=validate.Range(min=0, max=MAX_OVERLAP_HOURS), metadata={
        "description": "How long both secrets sign (0 to 168 hours; 0 replaces it at once).", "example": 24})


class RolledSecretSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    endpoint_id = fields.String(required=True, metadata=ENDPOINT_ID)
    secret = fields.String(required=True, metadata={
        "description": "The new secret: shown in this answer only.",
        "example": "whsec_bmV4dCBzZWNyZXQgMDEyMzQ1Njc4OQ=="})
    switch_at = fields.String(required=True, metadata={
        **TIME_DOC, "description": "When it becomes the only secret; until then both sign."})


class RecoverSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    since = UtcDateTime(required=True, metadata={
        **TIME_DOC, "description": "Deliveries created from this time on."})
    until = UtcDateTime(metadata={**TIME_DOC, "description": "And before this time (default: now)."})


class RecoveredSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    queued = fields.Integer(required=True, metadata={
        "description": "How many failed or skipped deliveries are queued to be sent again.", "example": 12})
