"""Marshmallow fields the API's schemas share, whatever their domain."""
from datetime import UTC
from typing import ClassVar

import marshmallow as ma
from marshmallow import fields

from app.plumbing import time_bounds


class UtcDateTime(fields.AwareDateTime):
    """A list's time bound, loaded as the naive UTC the columns hold: ``app.plumbing.time_bounds``
    holds the rule (ISO 8601, UTC without an offset, within the calendar), which the portal shares."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": time_bounds.NOT_A_TIME}

    def __init__(self, **kwargs):
        super().__init__(default_timezone=UTC, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        try:
            return time_bounds.parse(value)
        except time_bounds.InvalidTime as exc:
            raise ma.ValidationError(str(exc)) from None
