"""When a watch's scheduled scans fall due (D28: the service spreads a customer's due scans over
the interval).

Each watch holds a slot among its customer's watches of the same mode and interval that are not
ended; a new watch takes the lowest free one. Slot ``k`` sits at the point ``vdc(k)`` of the
interval (the van der Corput sequence: 0, 1/2, 1/4, 3/4, 1/8, ...), counted from the Unix epoch
and turned by a place of the customer's own, so whatever the number of slots taken, they lie
within a few of their even share of any stretch of the interval. A random spread (a hash per
watch) does not: 10,000 daily watches put up to about 490 due in one hour, against Enterprise's
hourly limit of 500; slots put at most 419, and a tier's watch limit of daily watches never
passes its hourly limit (tested). Since the lowest free slot is taken, the slots in use stay
below the most watches the customer has had open at once, so ending and adding watches keeps
the spread.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from app.watches import statements as watch_store

INTERVALS = {"daily": timedelta(days=1), "weekly": timedelta(days=7), "monthly": timedelta(days=30)}
EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001 - naive UTC, as every stored time


def vdc(k: int) -> float:
    """The ``k``-th point of the base-2 van der Corput sequence in [0, 1): ``k``'s bits mirrored."""
    point, weight = 0.0, 0.5
    while k:
        if k & 1:
            point += weight
        k >>= 1
        weight /= 2
    return point


def phase(customer_id: str, slot: int, interval: str) -> timedelta:
    """Where slot ``slot`` of the customer's falls within the interval (to the second): the slot's
    point, turned by a place of the customer's own (a hash of its id), so that customers' first
    slots do not all fall due at one moment; a turn keeps the customer's own spread."""
    seconds = int(INTERVALS[interval].total_seconds())
    turn = int(hashlib.sha256(customer_id.encode()).hexdigest()[:12], 16) % seconds
    return timedelta(seconds=(turn + int(vdc(slot) * seconds)) % seconds)


def next_due(customer_id: str, slot: int, interval: str, created_at: datetime, after: datetime) -> datetime:
    """The watch's first due time after ``after``, and at least an interval after its creation
    (its baseline scan is the first interval's)."""
    step = INTERVALS[interval]
    start = max(after + timedelta(microseconds=1), created_at + step)
    first = EPOCH + phase(customer_id, slot, interval)
    if first >= start:
        return first
    return first + step * -(-(start - first) // step)  # the first point of the slot at or after start


def lowest_free(taken: set[int], n: int) -> list[int]:
    """The ``n`` lowest slots not in ``taken``."""
    free: list[int] = []
    slot = 0
    while len(free) < n:
        if slot not in taken:
            free.append(slot)
        slot += 1
    return free


def place(customer_id: str, livemode: bool, rows: list[dict], now: datetime) -> None:
    """Give new watches' rows (or a watch moving to another interval) their slots and first due
    times: the lowest slots free among the customer's watches of the mode and interval. Called
    under the customer's lock (the admission's), so two calls do not take one slot."""
    for interval in {row["interval"] for row in rows}:
        mine = [row for row in rows if row["interval"] == interval]
        slots = lowest_free(watch_store.taken_slots(customer_id, livemode, interval), len(mine))
        for row, slot in zip(mine, slots):
            row.update(slot=slot, next_scan_at=next_due(customer_id, slot, interval, row["created_at"], now))
