"""The watches bench's arithmetic (bench/watches.py), and the due-time spread it reports on."""
from __future__ import annotations

from datetime import datetime, timedelta

from app.billing.limits import TIER_LIMITS, WATCH_LIMITS
from app.watches.watch_times import INTERVALS, next_due
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


def test_a_tier_s_watch_limit_of_daily_watches_stays_within_its_hourly_limit_in_any_hour():
    """The scheduler's spread (each watch's slot among its customer's, ``watch_times``): a customer
    at its tier's watch limit, all daily, never has more of them due in one sliding hour than its
    tier's hourly limit, whenever they were made (a hash per watch put up to about 490 of
    Enterprise's 10,000 in one hour, against its limit of 500)."""
    now = datetime(2026, 1, 7, 9, 30)
    for tier, limit in WATCH_LIMITS.items():
        created = [now - timedelta(days=2, seconds=(i * 7919) % 86400) for i in range(limit)]
        times = sorted(next_due(f"cus_{tier}", i, "daily", created[i], now).timestamp() for i in range(limit))
        assert times[-1] - times[0] < 86400  # one of each a day
        times += [t + 86400 for t in times]  # and the next day's: every hour across midnight too
        # At most a few more than an even spread, well within the tier's limit.
        assert max_in_window(times, HOUR_S) <= limit / 24 + 3 <= TIER_LIMITS[tier].hour, tier


def test_weekly_and_monthly_slots_spread_as_evenly_so_a_mix_stays_within_the_limit():
    """A customer's daily, weekly and monthly watches add up: each interval's slots put within a
    few of an even share in any hour, so 10,000 in any mix stay below Enterprise's 500 an hour."""
    now = datetime(2026, 1, 7, 9, 30)
    for interval, hours in (("weekly", 168), ("monthly", 720)):
        times = sorted(next_due("cus_mix", i, interval, now - timedelta(days=90), now).timestamp()
                       for i in range(10_000))
        times += [t + INTERVALS[interval].total_seconds() for t in times]  # the next interval's too
        assert max_in_window(times, HOUR_S) <= 10_000 / hours + 3, interval


def test_customers_first_slots_fall_due_at_their_own_moments():
    """Each customer's slots are turned by a place of its own: a thousand customers with one daily
    watch each do not all fall due at one moment, as a shared grid would make them."""
    now = datetime(2026, 1, 7, 9, 30)
    times = sorted(next_due(f"cus_{n:04d}", 0, "daily", now - timedelta(days=2), now).timestamp()
                   for n in range(1000))
    assert max_in_window(times + [t + 86400 for t in times], HOUR_S) < 1000 / 24 * 2
