"""The one rule for a list's time bounds, which the API and the portal share."""
from datetime import datetime

import pytest

from app.plumbing import time_bounds


@pytest.mark.parametrize("raw, expected", [
    ("2026-11-21", datetime(2026, 11, 21)),
    ("2026-11-21T12:30", datetime(2026, 11, 21, 12, 30)),
    ("2026-11-21T13:30:05+01:00", datetime(2026, 11, 21, 12, 30, 5)),
    ("2026-11-21T12:30:05Z", datetime(2026, 11, 21, 12, 30, 5)),
    ("1970-01-01T00:00", datetime(1970, 1, 1)),
    ("1969-12-31T23:59:59", datetime(1969, 12, 31, 23, 59, 59)),  # bounds nothing, but a time
    ("0001-01-01", datetime(1, 1, 1)),
    ("1970-01-01T00:30+01:00", datetime(1969, 12, 31, 23, 30)),
    ("9999-12-31T23:59:59", datetime(9999, 12, 31, 23, 59, 59)),
])
def test_a_bound_is_naive_utc(raw, expected):
    assert time_bounds.parse(raw) == expected


@pytest.mark.parametrize("raw, message", [
    ("yesterday", time_bounds.NOT_A_TIME),
    ("0000-00-00", time_bounds.NOT_A_TIME),
    ("99999-01-01", time_bounds.NOT_A_TIME),
    ("2026-11-21" + "0" * 100, time_bounds.NOT_A_TIME),
    ("", time_bounds.NOT_A_TIME),
    ("0001-01-01T00:00:00+01:00", time_bounds.OUT_OF_RANGE),
    ("9999-12-31T23:59:59-01:00", time_bounds.OUT_OF_RANGE),
])
def test_a_bound_out_of_the_rule_says_why(raw, message):
    with pytest.raises(time_bounds.InvalidTime) as refused:
        time_bounds.parse(raw)
    assert str(refused.value) == message
