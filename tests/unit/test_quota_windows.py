"""The rolling windows from per-minute counters are exactly the scans counted one by one (D8)."""
import random
from datetime import datetime, timedelta

from app.extensions import db
from app.models import Customer, QuotaMinute, Scan, new_id
from app.services import accounts, quotas


def _naive(customer_id, now, seconds):
    rows = [s.created_at for s in Scan.select(Scan.created_at).where(
        (Scan.customer == customer_id) & (Scan.created_at > now - timedelta(seconds=seconds)))]
    return len(rows), min(rows) if rows else None


def test_windows_match_counting_the_scans_at_every_edge(app):
    rng = random.Random(7)
    start = datetime(2026, 11, 20, 9, 0, 0)
    with db.connection_context():
        customer = accounts.create_customer("Windows", "enterprise", 0)
        key, _ = accounts.issue_key(customer.id, "k")
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


def test_taking_scans_back_and_pruning(app):
    now = datetime(2026, 11, 21, 12, 0, 30)
    with db.connection_context():
        customer = accounts.create_customer("Prune", "business", 0)
        quotas.count_created(customer.id, now - timedelta(days=1, minutes=2), 4)
        quotas.count_created(customer.id, now, 3)
        quotas.count_created(customer.id, now, -1)
        minutes = {m.minute: m.scans for m in QuotaMinute.select().where(QuotaMinute.customer == customer.id)}
        assert minutes == {datetime(2026, 11, 20, 11, 58): 4, datetime(2026, 11, 21, 12, 0): 2}
        assert quotas.prune_minutes(now) == 1  # no window ending now or later reaches it
        assert [m.minute for m in QuotaMinute.select().where(QuotaMinute.customer == customer.id)] == [
            datetime(2026, 11, 21, 12, 0)]
        assert Customer.get_by_id(customer.id).in_flight == 0
