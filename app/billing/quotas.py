"""Rolling hour and day windows, the in-flight count, and the limit headers (D8).

A window counts the scans the customer created in the last 3,600 / 86,400 seconds.
Counting them on every call would cost O(scans created today), paid under the
customer's lock on every admission and on every read (whose answer reports the
windows), so a customer who made 35,000 scans paid 13 ms of PostgreSQL per call.
Instead:

- each admission adds its scans to a per-customer, per-minute counter (``QuotaMinute``),
  in the admitting transaction; a window is the sum of the minutes wholly inside it
  (at most 1,440 rows) plus an exact count of the scans of the one minute cut by the
  window's start (an indexed range of one minute), so the windows stay exact to the
  microsecond, as before;
- the scans in flight are ``Customer.in_flight``, moved by admission, its reversal and
  the final transition, each in the transaction that moves the scans.

Lock order: a transaction that changes both takes the customer's row before its
``QuotaMinute`` row (admission locks the customer first; a reversal that did the
opposite deadlocked against it on PostgreSQL).

Every call runs these, so they are written once as SQL (``app.billing.statements.balances``); the
windows' lengths and which statuses are in flight are decided here.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.accounts.models import Customer
from app.billing.limits import DAY, HOUR, Limits
from app.billing.statements import balances
from app.billing.statements.balances import minute_of
from app.plumbing.errors import RateLimited
from app.plumbing.metrics import RATE_LIMITED
from app.scans.models import IN_FLIGHT


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


def window_starts(now: datetime) -> tuple[datetime, datetime]:
    """Where the day's and the hour's windows ending at ``now`` start (the store's ``starts``)."""
    return now - timedelta(seconds=DAY), now - timedelta(seconds=HOUR)


def usage_from(row, now: datetime) -> Usage:
    """A ``Usage`` from the six window values of ``app.billing.statements.balances.WINDOW_COLUMNS``."""
    day_minutes, hour_minutes, day_edge, hour_edge, day_oldest, hour_oldest = row
    return Usage(hour=int(hour_minutes) + int(hour_edge), day=int(day_minutes) + int(day_edge),
                 hour_oldest=_as_datetime(hour_oldest), day_oldest=_as_datetime(day_oldest), now=now)


def window_usage(customer_id: str, now: datetime, livemode: bool = True) -> Usage:
    """The customer's hour and day windows of live scans (or of test scans: ``livemode=False``)."""
    return usage_from(balances.windows(customer_id, window_starts(now), livemode=livemode), now)


def count_created_statement(customer_id: str, created_at: datetime, n: int, livemode: bool = True) -> tuple:
    """The SQL and parameters of ``count_created``, to run with others."""
    return balances.count_created_statement(customer_id, created_at=created_at, n=n, livemode=livemode)


def count_created(customer_id: str, created_at: datetime, n: int, livemode: bool = True) -> None:
    """Add ``n`` scans created at ``created_at`` to the windows (negative: take them back)."""
    if n:
        balances.run(count_created_statement(customer_id, created_at, n, livemode))


def counted_from_scans(now: datetime, customer_id: str | None = None,
                       livemode: bool | None = True) -> tuple[Counter, Counter]:
    """What the counters should hold, counted from the scans themselves (of one customer, or
    all; of one mode, or with ``livemode=None`` all of them): scans in flight by customer,
    and the last day's scans by (customer, minute)."""
    day_start = now - timedelta(seconds=DAY)
    rows = balances.scans_for_counting(statuses=IN_FLIGHT, since=day_start, customer_id=customer_id,
                                             livemode=livemode)
    in_flight: Counter[str] = Counter()
    minutes: Counter[tuple[str, datetime]] = Counter()
    for customer, status, created_at in rows:
        if status in IN_FLIGHT:
            in_flight[customer] += 1
        if created_at > day_start:
            minutes[customer, minute_of(created_at)] += 1
    return in_flight, minutes


def prune_minutes(now: datetime) -> int:
    """Drop the minutes no window can reach any more (the sweep calls this)."""
    return balances.delete_minutes_before(minute_of(now - timedelta(seconds=DAY)))


def with_new_scans(usage: Usage, n: int, created_at: datetime) -> Usage:
    """``usage`` once ``n`` more scans created at ``created_at`` (its ``now``) are counted."""
    if not n:
        return usage
    return Usage(hour=usage.hour + n, day=usage.day + n, hour_oldest=usage.hour_oldest or created_at,
                 day_oldest=usage.day_oldest or created_at, now=usage.now)


def inflight_count(customer_id: str, livemode: bool = True) -> int:
    """The scans in flight of one mode counted one by one (``Customer.in_flight``, or
    ``test_in_flight`` for test scans, keeps the same number)."""
    return balances.count_scans(customer_id, livemode=livemode, statuses=IN_FLIGHT)


def move_in_flight_statement(customer_id: str, livemode: bool, n: int) -> tuple:
    """The SQL and parameters of ``move_in_flight``, to run with others."""
    return balances.move_in_flight_statement(customer_id, livemode=livemode, n=n)


def move_in_flight(customer_id: str, livemode: bool, n: int) -> None:
    """Move the customer's count of scans in flight of this mode (D15: counted apart) by ``n``.
    (A live admission moves it in ``charges.apply``'s UPDATE, with the charge.)"""
    balances.run(move_in_flight_statement(customer_id, livemode, n))


def move_in_flight_many(moves: dict[tuple[str, bool], int]) -> None:
    """``move_in_flight`` for many customers and modes at once (``moves[(customer_id, livemode)]``),
    in one statement."""
    balances.move_in_flight_many(moves)


def _seconds_until(moment: datetime | None, now: datetime) -> int:
    if moment is None:
        return 0
    return max(0, math.ceil((moment - now).total_seconds()))


def resets(usage: Usage) -> tuple[int, int]:
    """Seconds until the hour and the day window each lose their oldest scan (0: empty window)."""
    hour_reset = _seconds_until(usage.hour_oldest + timedelta(seconds=HOUR), usage.now) if usage.hour_oldest else 0
    day_reset = _seconds_until(usage.day_oldest + timedelta(seconds=DAY), usage.now) if usage.day_oldest else 0
    return hour_reset, day_reset


def _window_retry_after(customer_id: str, now: datetime, window: int, count: int, limit: int, n: int,
                        livemode: bool) -> int:
    """Seconds until enough scans leave the window for ``n`` more to fit."""
    if n > limit:
        return window  # can never fit in this window; the hint is the window itself
    must_leave = count + n - limit
    created = _as_datetime(balances.nth_created_since(customer_id, livemode=livemode,
                                                            since=now - timedelta(seconds=window), n=must_leave))
    return max(1, _seconds_until(created + timedelta(seconds=window), now)) if created else 1


def _inflight_retry_after(customer_id: str, now: datetime, livemode: bool) -> int:
    soonest = balances.soonest_eta(customer_id, livemode=livemode, statuses=IN_FLIGHT)
    return max(1, min(_seconds_until(_as_datetime(soonest), now), 900)) if soonest else 30


def check(customer, limits: Limits, n: int, now: datetime, *, bulk: bool = False, livemode: bool = True,
          usage: Usage | None = None) -> Usage:
    """Raise the first 429 that ``n`` new scans would hit (in-flight, hour, day); else the usage.

    ``customer`` is the row read under the admission's lock, so its ``in_flight`` is current;
    ``usage``, when given, its windows counted under that lock too.
    Test scans (``livemode=False``) have the same limits, counted apart from live ones (D15).
    """
    customer_id = customer.id
    inflight = customer.in_flight if livemode else customer.test_in_flight
    if usage is None:
        usage = window_usage(customer_id, now, livemode)
    if inflight + n > limits.inflight:
        fits = max(0, limits.inflight - inflight)
        if bulk:
            message = (f"{n} targets and {inflight} scans in flight exceed the in-flight limit of "
                       f"{limits.inflight}; {fits} targets would fit now")
        else:
            message = f"{inflight} scans are in flight, the limit is {limits.inflight}"
        raise _limited("rate_limit_inflight", message, _inflight_retry_after(customer_id, now, livemode))
    if usage.hour + n > limits.hour:
        raise _limited("rate_limit_hour",
                       f"{usage.hour} scans created in the last hour, the hourly quota is {limits.hour}",
                       _window_retry_after(customer_id, now, HOUR, usage.hour, limits.hour, n, livemode))
    if usage.day + n > limits.day:
        raise _limited("rate_limit_day",
                       f"{usage.day} scans created in the last 24 hours, the daily quota is {limits.day}",
                       _window_retry_after(customer_id, now, DAY, usage.day, limits.day, n, livemode))
    return usage


def _limited(code: str, message: str, retry_after: int) -> RateLimited:
    RATE_LIMITED.labels(code=code).inc()
    return RateLimited(code, message, retry_after)


def reset_counters(customer_id: str, *, in_flight: int, test_in_flight: int) -> None:
    """Set the customer's counts of scans in flight and forget its minute counters (both modes),
    which ``recount`` then counts again from its scans; under the admission's lock."""
    balances.set_in_flight(customer_id, in_flight=in_flight, test_in_flight=test_in_flight)
    balances.delete_minutes(customer_id)


def lock_and_count(customer_id: str, now: datetime, livemode: bool) -> tuple[Customer, Usage]:
    """The customer's row, locked until the transaction ends, and its windows counted under that
    lock (``Customer.DoesNotExist`` for no such customer): one round trip of two statements (each
    statement takes its own snapshot under READ COMMITTED, so the counts see every admission
    committed before the lock was granted)."""
    found = balances.lock_with_windows(customer_id, window_starts(now), livemode=livemode)
    if found is None:
        raise Customer.DoesNotExist(f"no customer {customer_id}")
    customer, windows = found
    return customer, usage_from(windows, now)
