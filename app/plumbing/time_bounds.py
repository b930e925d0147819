"""The one rule for a list's time bounds (``created_after`` / ``created_before``): the API's
scans list and activity log, and the portal's activity page, read them here.

A bound is an ISO 8601 date or date and time (``2026-11-21``, ``2026-11-21T12:00``,
``2026-11-21T12:00:00+01:00``), UTC when it carries no offset, anywhere in the calendar
(0001-01-01 to 9999-12-31 in UTC: an early year bounds nothing, as the OpenAPI document's
``date-time`` allows it); a time past the calendar's end (``99999``, or
``9999-12-31T23:59-01:00``, whose UTC value does not exist) is refused, saying why.
"""
from __future__ import annotations

from datetime import UTC, datetime

MAX_LENGTH = 64  # longer than any ISO 8601 time; longer text is not parsed at all

NOT_A_TIME = "not a date and time: write it as YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC unless an offset is given)"
OUT_OF_RANGE = "has no UTC time: it must fall between 0001-01-01 and 9999-12-31 (UTC)"


class InvalidTime(ValueError):
    """A bound that breaks the rule; its text says why, in words a customer reads."""


def parse(raw: str) -> datetime:
    """``raw`` as the naive UTC time the columns hold, or :class:`InvalidTime`."""
    text = raw.strip() if isinstance(raw, str) else ""
    if not text or len(text) > MAX_LENGTH:
        raise InvalidTime(NOT_A_TIME)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidTime(NOT_A_TIME) from None
    return check(moment)


def check(moment: datetime) -> datetime:
    """An already parsed time (naive is UTC) as naive UTC, or :class:`InvalidTime` out of range."""
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # the calendar's edge with an offset: no UTC equivalent
            raise InvalidTime(OUT_OF_RANGE) from None
    return moment
