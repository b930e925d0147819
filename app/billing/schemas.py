"""The response schema of ``GET /api/v1/account`` (D21)."""
import marshmallow as ma
from marshmallow import fields

from app.accounts import access


class WindowsSchema(ma.Schema):
    inflight = fields.Integer(required=True, metadata={"description": "Scans queued or running."})
    hour = fields.Integer(required=True, metadata={"description": "Scans created in the last hour."})
    day = fields.Integer(required=True, metadata={"description": "Scans created in the last 24 hours."})


class KeyAccessSchema(ma.Schema):
    key_id = fields.String(required=True, metadata={"example": "key_7Hc2pQ9xVb4nLm1kRt8s0w"})
    livemode = fields.Boolean(required=True, metadata={"description": "False for a test key (`service_test_...`)."})
    scopes = fields.List(fields.String(), required=True, metadata={
        "description": "What the key may do: " + "; ".join(f"`{scope}`: {words}"
                                                            for scope, words in access.SCOPE_WORDS.items()) + ".",
        "items": {"enum": list(access.SCOPES)}})
    expires_at = fields.String(required=True, allow_none=True, metadata={
        "format": "date-time", "description": "When the key stops working; null: never.",
        "example": "2027-05-21T12:00:00Z"})
    allowed_ips = fields.List(fields.String(), required=True, allow_none=True, metadata={
        "description": "The CIDR blocks the key may be used from; null: anywhere.", "example": ["203.0.113.0/24"]})


class AccountSchema(ma.Schema):
    ok = fields.Boolean(required=True)
    customer_id = fields.String(required=True, metadata={"example": "cus_Q2x0mV8rLk1cYt6nWb3a9g"})
    tier = fields.String(required=True, metadata={"enum": ["pro", "business", "enterprise"]})
    balance = fields.Integer(required=True, metadata={"description": "Credits left, after this call's own charge."})
    limits = fields.Nested(WindowsSchema, required=True, metadata={
        "description": "The account's limits: scans in flight, scans per hour, scans per day."})
    usage = fields.Nested(WindowsSchema, required=True, metadata={
        "description": "Where the account stands against each limit now (a test key: its own test scans)."})
    key = fields.Nested(KeyAccessSchema, required=True, metadata={"description": "The key that made this call."})
