"""The watches bench's arithmetic (bench/watches.py), and the due-time spread it reports on."""
from __future__ import annotations

from datetime import datetime, timedelta

from app.services.limits import TIER_LIMITS, WATCH_LIMITS
from app.services.watches import next_due
from bench.watches import HOUR_S, max_in_window, plan


def test_the_most_in_one_window_counts_a_sliding_window_not_clock_hours():
    assert max_in_window([], HOUR_S) == 0
    # 00:50 and 01:10 are within one hour though not in one clock hour; 3,600 s apart is not.
    assert max_in_window([3000, 4200], HOUR_S) == 2
    assert max_in_window([0, 3540, 3599, 3660], HOUR_S) == 3
    assert max_in_window([0, 3600], HOUR_S) == 1


def test_the_mix_stores_the_watches_asked_for_each_customer_within_its_tier_s_watch_limit():
    for total in (1_000_000, 50_000, 20_000):
        groups = plan(total)
        assert sum(customers * each for _, customers, each, _ in groups) >= total
        assert all(each <= WATCH_LIMITS[tier] for tier, _, each, _ in groups)
    # 10,000 watches fall due an hour at 1,000,000: 24 customers of 10,000 daily watches.
    daily = sum(c * e for _, c, e, interval in plan(1_000_000) if interval == "daily")
    assert daily // 24 >= 10_000


def test_a_customer_s_daily_watches_imported_together_stay_within_its_hourly_limit():
    """The scheduler's spread (a hash of each watch's id): an enterprise customer at its watch
    limit, all imported at one moment, never has more of them due in one hour than its hourly
    limit (ids fixed, so the figure is the same every run)."""
    created = datetime(2026, 1, 5, 9, 30)
    now = created + timedelta(days=2)
    limit = WATCH_LIMITS["enterprise"]
    times = sorted(next_due(f"wch_bench{i:05d}", "daily", created + timedelta(milliseconds=i), now).timestamp()
                   for i in range(limit))
    assert times[-1] - times[0] < 86400  # one of each a day
    assert max_in_window(times, HOUR_S) <= TIER_LIMITS["enterprise"].hour
