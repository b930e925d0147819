"""quotas: rolling hour and day windows, the in-flight limit and the 429 each refusal gives (D8)."""
import random
from datetime import datetime, timedelta

import pytest

from app.accounts import admin
from app.accounts.models import Customer
from app.api_calls import rate_limit_headers
from app.billing import customers, quotas
from app.billing.limits import Limits
from app.billing.models import QuotaMinute
from app.extensions import db
from app.plumbing.errors import RateLimited
from app.plumbing.models import new_id
from app.scans.models import Scan

NOW = datetime(2026, 11, 22, 12, 0, 0, 500000)


def _scans(customer, key, *moments, status="completed"):
    for moment in moments:
        Scan.create(id=new_id("scn"), customer=customer.id, api_key=key.id, kind="email", target="a@example.com",
                    status=status, created_at=moment)
        quotas.count_created(customer.id, moment, 1)


@pytest.fixture
def customer(conn):
    cust = customers.create_customer("Windows", "business", 0)
    key, _ = admin.issue_key(cust.id, "k")
    return cust, key


def test_a_scan_leaves_the_hour_window_after_3600_seconds_and_the_day_after_86400(customer):
    cust, key = customer
    _scans(cust, key, NOW - timedelta(seconds=3599), NOW - timedelta(seconds=3600), NOW - timedelta(seconds=3601),
           NOW - timedelta(seconds=86399), NOW - timedelta(seconds=86401))
    usage = quotas.window_usage(cust.id, NOW)
    assert (usage.hour, usage.day) == (1, 4)  # exactly 3,600 s old is out: the window is (now - 3600, now]
    assert usage.hour_oldest == NOW - timedelta(seconds=3599)
    assert usage.day_oldest == NOW - timedelta(seconds=86399)
    later = quotas.window_usage(cust.id, NOW + timedelta(seconds=2))
    assert (later.hour, later.day) == (0, 3)


def test_check_admits_up_to_the_limit_and_refuses_one_more_with_its_code(customer):
    cust, key = customer
    limits = Limits(inflight=10, hour=3, day=5)
    _scans(cust, key, NOW - timedelta(minutes=10), NOW - timedelta(minutes=5))
    row = Customer.get_by_id(cust.id)
    assert quotas.check(row, limits, 1, NOW).hour == 2  # 2 + 1 = 3 fits
    with pytest.raises(RateLimited) as refused:
        quotas.check(row, limits, 2, NOW)
    assert refused.value.code == "rate_limit_hour"
    # The oldest of the two must leave for two more to fit: 50 minutes from now.
    assert refused.value.retry_after == 50 * 60
    _scans(cust, key, NOW - timedelta(hours=5), NOW - timedelta(hours=6))
    with pytest.raises(RateLimited) as refused:
        quotas.check(row, limits, 2, NOW)
    assert refused.value.code == "rate_limit_hour"  # the hour is checked before the day
    with pytest.raises(RateLimited) as refused:
        quotas.check(row, Limits(inflight=10, hour=100, day=5), 2, NOW)
    assert refused.value.code == "rate_limit_day"


def test_in_flight_is_the_customers_counter_and_comes_first(customer):
    cust, key = customer
    row = Customer.get_by_id(cust.id)
    row.in_flight = 3
    with pytest.raises(RateLimited) as refused:
        quotas.check(row, Limits(inflight=3, hour=0, day=0), 1, NOW)
    assert refused.value.code == "rate_limit_inflight"
    assert refused.value.retry_after == 30  # no eta known
    with pytest.raises(RateLimited) as refused:
        quotas.check(row, Limits(inflight=5, hour=100, day=100), 3, NOW, bulk=True)
    assert refused.value.code == "rate_limit_inflight" and "2 targets would fit now" in refused.value.message


def test_limit_headers_report_what_is_left_and_when_the_oldest_leaves(customer):
    cust, key = customer
    _scans(cust, key, NOW - timedelta(minutes=20), NOW - timedelta(hours=2))
    usage = quotas.window_usage(cust.id, NOW)
    assert quotas.resets(usage) == (40 * 60, 22 * 3600)
    headers = rate_limit_headers(Limits(inflight=10, hour=100, day=1000), usage)  # the HTTP layer's strings
    assert headers["RateLimit-Policy"] == '"hour";q=100;w=3600, "day";q=1000;w=86400'
    assert headers["RateLimit"] == f'"hour";r=99;t={40 * 60}, "day";r=998;t={22 * 3600}'


def test_windows_are_per_customer(customer):
    cust, key = customer
    other = customers.create_customer("Other", "business", 0)
    other_key, _ = admin.issue_key(other.id, "k")
    _scans(cust, key, NOW - timedelta(minutes=1))
    _scans(other, other_key, NOW - timedelta(minutes=2), NOW - timedelta(minutes=3))
    assert quotas.window_usage(cust.id, NOW).hour == 1
    assert quotas.window_usage(other.id, NOW).hour == 2


# Moved from tests/unit/test_quota_windows.py.


def _naive(customer_id, now, seconds):
    rows = [s.created_at for s in Scan.select(Scan.created_at).where(
        (Scan.customer == customer_id) & (Scan.created_at > now - timedelta(seconds=seconds)))]
    return len(rows), min(rows) if rows else None


def test_windows_match_counting_the_scans_at_every_edge(conn):
    rng = random.Random(7)
    start = datetime(2026, 11, 20, 9, 0, 0)
    customer = customers.create_customer("Windows", "enterprise", 0)
    key, _ = admin.issue_key(customer.id, "k")
    created = []
    for _ in range(300):  # 27 hours of scans, some on whole minutes and seconds
        micro = rng.choice([0, rng.randrange(10 ** 6)])
        moment = start + timedelta(seconds=rng.randrange(27 * 3600), microseconds=micro)
        created.append(moment)
    created += [start + timedelta(hours=3), start + timedelta(hours=3)]  # two in the same microsecond
    with db.atomic():
        for moment in created:
            Scan.create(id=new_id("scn"), customer=customer.id, api_key=key.id, kind="email",
                        target="a@example.com", status="completed", created_at=moment)
            quotas.count_created(customer.id, moment, 1)
    assert QuotaMinute.select().count() < len(created)
    nows = [moment + timedelta(seconds=w) for moment in rng.sample(created, 60) for w in (3600, 86400)]
    nows += [m + delta for m in nows[:40] for delta in (timedelta(microseconds=-1), timedelta(microseconds=1))]
    nows += [start + timedelta(seconds=rng.randrange(30 * 3600)) for _ in range(100)]
    for now in nows:
        usage = quotas.window_usage(customer.id, now)
        assert (usage.hour, usage.hour_oldest) == _naive(customer.id, now, 3600), now
        assert (usage.day, usage.day_oldest) == _naive(customer.id, now, 86400), now


def test_taking_scans_back_and_pruning(conn):
    now = datetime(2026, 11, 21, 12, 0, 30)
    customer = customers.create_customer("Prune", "business", 0)
    quotas.count_created(customer.id, now - timedelta(days=1, minutes=2), 4)
    quotas.count_created(customer.id, now, 3)
    quotas.count_created(customer.id, now, -1)
    minutes = {m.minute: m.scans for m in QuotaMinute.select().where(QuotaMinute.customer == customer.id)}
    assert minutes == {datetime(2026, 11, 20, 11, 58): 4, datetime(2026, 11, 21, 12, 0): 2}
    assert quotas.prune_minutes(now) == 1  # no window ending now or later reaches it
    assert [m.minute for m in QuotaMinute.select().where(QuotaMinute.customer == customer.id)] == [
        datetime(2026, 11, 21, 12, 0)]
    assert Customer.get_by_id(customer.id).in_flight == 0
