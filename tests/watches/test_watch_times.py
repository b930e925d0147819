"""When a watch falls due (D28): its slot's place in the interval, turned per customer, the
van der Corput points that keep a customer's slots spread, and the lowest free slot."""
from __future__ import annotations

from datetime import datetime, timedelta

from app.watches import watch_times

START = datetime(2026, 11, 21, 12, 0, 0)


def test_due_times_follow_the_interval_at_the_watch_s_slot():
    first = watch_times.next_due("cus_a", 3, "daily", START, START)
    assert START + timedelta(days=1) <= first < START + timedelta(days=2)
    assert (first - watch_times.EPOCH) % timedelta(days=1) == watch_times.phase("cus_a", 3, "daily")
    assert watch_times.next_due("cus_a", 3, "daily", START, first) == first + timedelta(days=1)
    later = watch_times.next_due("cus_a", 3, "daily", START + timedelta(hours=23), START)
    assert later - (START + timedelta(hours=23)) >= timedelta(days=1) and (later - first) % timedelta(days=1) == \
        timedelta(0)
    # Slot k sits at the point vdc(k) of the interval from slot 0 (0, 1/2, 1/4, 3/4, 1/8, ...).
    week = timedelta(days=7)
    turned = [(watch_times.phase("cus_a", k, "weekly") - watch_times.phase("cus_a", 0, "weekly")) % week
              for k in range(8)]
    assert turned == [week * k / 8 for k in (0, 4, 2, 6, 1, 5, 3, 7)]
    assert watch_times.phase("cus_a", 0, "weekly") != watch_times.phase("cus_b", 0, "weekly")


def test_the_lowest_free_slots_fill_the_gaps_first():
    assert watch_times.lowest_free({0, 1, 3}, 3) == [2, 4, 5]
    assert watch_times.lowest_free(set(), 2) == [0, 1]
    assert [watch_times.vdc(k) for k in range(5)] == [0.0, 0.5, 0.25, 0.75, 0.125]
