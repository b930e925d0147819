"""The response schema of ``GET /api/v1/sources``: the engine's sources and their health."""
import marshmallow as ma
from marshmallow import fields

from app.sources import health

STATUS_WORDS = ("`healthy`; `degraded` (under 90 % of its answers usable over at least 20 answers in the last hour, "
                "or its 95th-percentile latency over 10 s); `down` (under 50 % over at least 20 answers); `broken` "
                "(its last two checks against identities it must and must not find were answered wrongly)")


class SourceHealthSchema(ma.Schema):
    id = fields.String(required=True, metadata={"example": "breach_index"})
    name = fields.String(required=True, metadata={"example": "Breach Index"})
    kinds = fields.List(fields.String(metadata={"enum": ["email", "phone", "username"]}), required=True, metadata={
        "description": "The kinds of target the source answers for; empty when the engine does not say."})
    status = fields.String(required=True, metadata={"enum": list(health.STATUSES), "description": STATUS_WORDS + "."})
    since = fields.String(required=True, metadata={"format": "date-time", "description": "Since when it has had "
                                                   "this status.", "example": "2026-11-21T11:45:00Z"})
    answered_ratio = fields.Float(required=True, allow_none=True, metadata={
        "description": "The share of its answers in the last hour that were usable (not `error`, `rate_limited` or "
                       "`timeout`); null without answers.", "example": 0.97})
    p95_latency_ms = fields.Integer(required=True, allow_none=True, metadata={
        "description": "The 95th percentile of its answers' latency in the last hour, rounded up to the bound of "
                       "its latency class; null without answers.", "example": 1000})
    last_probe_at = fields.String(required=True, allow_none=True, metadata={
        "format": "date-time", "description": "When it was last checked against identities it must and must not "
                                              "find; null: never.", "example": "2026-11-21T11:45:00Z"})
    last_probe_ok = fields.Boolean(required=True, allow_none=True, metadata={
        "description": "Whether that check was answered rightly; null: never checked."})
    quarantined = fields.Boolean(required=True, metadata={
        "description": "True while the source is left out of new scans: a scan lists it among its `sources` as "
                       "`skipped` with `reason: \"quarantined\"`, and a re-run asks it again once it is back."})


class SourceListSchema(ma.Schema):
    ok = fields.Boolean(required=True)
    data = fields.List(fields.Nested(SourceHealthSchema), required=True)
