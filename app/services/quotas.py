"""Rolling hour and day windows, the in-flight count, and the limit headers (D8).

A window counts the scans the customer created in the last 3,600 / 86,400 seconds;
both windows come from one indexed query over (customer, created_at), and an
admission gets them with its in-flight count in the same statement. Every call runs
one of these, so they are written once as SQL (``app.db.execute``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from peewee import fn

from app.db import execute, table
from app.errors import ApiError
from app.models import Scan
from app.models.scans import IN_FLIGHT, QUEUED, RUNNING
from app.services.limits import DAY, HOUR, Limits


@dataclass
class Usage:
    hour: int
    day: int
    hour_oldest: datetime | None
    day_oldest: datetime | None
    now: datetime


def _as_datetime(value):
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


_WINDOWS = ("count(*), sum(CASE WHEN created_at > ? THEN 1 ELSE 0 END), min(created_at), "
            "min(CASE WHEN created_at > ? THEN created_at END)")
WINDOW_USAGE = f"SELECT {_WINDOWS} FROM {table(Scan)} WHERE customer_id = ? AND created_at > ?"
INFLIGHT_AND_USAGE = (f"SELECT (SELECT count(*) FROM {table(Scan)} WHERE customer_id = ? AND status IN (?, ?)), "
                      f"{_WINDOWS} FROM {table(Scan)} WHERE customer_id = ? AND created_at > ?")
assert set(IN_FLIGHT) == {QUEUED, RUNNING}


def _usage(row, now: datetime) -> Usage:
    day, hour, day_oldest, hour_oldest = row
    return Usage(hour=int(hour or 0), day=int(day or 0), hour_oldest=_as_datetime(hour_oldest),
                 day_oldest=_as_datetime(day_oldest), now=now)


def window_usage(customer_id: str, now: datetime) -> Usage:
    hour_start, day_start = now - timedelta(seconds=HOUR), now - timedelta(seconds=DAY)
    return _usage(execute(WINDOW_USAGE, (hour_start, hour_start, customer_id, day_start)).fetchone(), now)


def inflight_and_usage(customer_id: str, now: datetime) -> tuple[int, Usage]:
    """The scans in flight and the window usage, in one statement."""
    hour_start, day_start = now - timedelta(seconds=HOUR), now - timedelta(seconds=DAY)
    row = execute(INFLIGHT_AND_USAGE, (customer_id, QUEUED, RUNNING, hour_start, hour_start, customer_id,
                                       day_start)).fetchone()
    return int(row[0]), _usage(row[1:], now)


def with_new_scans(usage: Usage, n: int, created_at: datetime) -> Usage:
    """``usage`` once ``n`` more scans created at ``created_at`` (its ``now``) are counted."""
    if not n:
        return usage
    return Usage(hour=usage.hour + n, day=usage.day + n, hour_oldest=usage.hour_oldest or created_at,
                 day_oldest=usage.day_oldest or created_at, now=usage.now)


def inflight_count(customer_id: str) -> int:
    return Scan.select().where((Scan.customer == customer_id) & Scan.status.in_(IN_FLIGHT)).count()


def _seconds_until(moment: datetime | None, now: datetime) -> int:
    if moment is None:
        return 0
    return max(0, math.ceil((moment - now).total_seconds()))


def limit_headers(limits: Limits, usage: Usage) -> dict:
    """IETF httpapi RateLimit draft-10 fields for the hour and day windows."""
    hour_reset = _seconds_until(usage.hour_oldest + timedelta(seconds=HOUR), usage.now) if usage.hour_oldest else 0
    day_reset = _seconds_until(usage.day_oldest + timedelta(seconds=DAY), usage.now) if usage.day_oldest else 0
    return {
        "RateLimit-Policy": f'"hour";q={limits.hour};w={HOUR}, "day";q={limits.day};w={DAY}',
        "RateLimit": (f'"hour";r={max(0, limits.hour - usage.hour)};t={hour_reset}, '
                      f'"day";r={max(0, limits.day - usage.day)};t={day_reset}'),
    }


def _window_retry_after(customer_id: str, now: datetime, window: int, count: int, limit: int, n: int) -> int:
    """Seconds until enough scans leave the window for ``n`` more to fit."""
    if n > limit:
        return window  # can never fit in this window; the hint is the window itself
    must_leave = count + n - limit
    created = (Scan.select(Scan.created_at)
               .where((Scan.customer == customer_id) & (Scan.created_at > now - timedelta(seconds=window)))
               .order_by(Scan.created_at).offset(must_leave - 1).limit(1).scalar())
    created = _as_datetime(created)
    return max(1, _seconds_until(created + timedelta(seconds=window), now)) if created else 1


def _inflight_retry_after(customer_id: str, now: datetime) -> int:
    soonest = (Scan.select(fn.MIN(Scan.eta_at))
               .where((Scan.customer == customer_id) & Scan.status.in_(IN_FLIGHT)).scalar())
    return max(1, min(_seconds_until(_as_datetime(soonest), now), 900)) if soonest else 30


def check(customer_id: str, limits: Limits, n: int, now: datetime, *, bulk: bool = False) -> Usage:
    """Raise the first 429 that ``n`` new scans would hit (in-flight, hour, day); else the usage."""
    inflight, usage = inflight_and_usage(customer_id, now)
    if inflight + n > limits.inflight:
        fits = max(0, limits.inflight - inflight)
        if bulk:
            message = (f"{n} targets and {inflight} scans in flight exceed the in-flight limit of "
                       f"{limits.inflight}; {fits} targets would fit now")
        else:
            message = f"{inflight} scans are in flight, the limit is {limits.inflight}"
        raise _limited("rate_limit_inflight", message, _inflight_retry_after(customer_id, now))
    if usage.hour + n > limits.hour:
        raise _limited("rate_limit_hour",
                       f"{usage.hour} scans created in the last hour, the hourly quota is {limits.hour}",
                       _window_retry_after(customer_id, now, HOUR, usage.hour, limits.hour, n))
    if usage.day + n > limits.day:
        raise _limited("rate_limit_day",
                       f"{usage.day} scans created in the last 24 hours, the daily quota is {limits.day}",
                       _window_retry_after(customer_id, now, DAY, usage.day, limits.day, n))
    return usage


def _limited(code: str, message: str, retry_after: int) -> ApiError:
    from app.metrics import RATE_LIMITED
    RATE_LIMITED.labels(code=code).inc()
    return ApiError(429, code, message, headers={"Retry-After": retry_after})
