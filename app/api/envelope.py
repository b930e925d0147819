"""The error body of D1, as documented in the OpenAPI document."""
import marshmallow as ma


class ErrorSchema(ma.Schema):
    ok = ma.fields.Boolean(required=True, metadata={"example": False})
    error = ma.fields.String(required=True, metadata={
        "description": "Machine-readable code, e.g. target_too_short, invalid_token, rate_limit_hour.",
        "example": "target_too_short"})
    message = ma.fields.String(required=True, metadata={
        "description": "A sentence for people.", "example": "target must have at least 3 characters"})
    request_id = ma.fields.String(required=True, metadata={
        "description": "Also in the X-Request-Id header and in the logs.", "example": "req_4f1c2a9e0b7d3c5a6e8f9a1b"})
    details = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.List(ma.fields.String()), metadata={
        "description": "Validation errors by field (invalid_request only)."})
