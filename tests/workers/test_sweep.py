"""recovery: the sweep (D13) gives every submitted scan in flight without a due look one, due now
(a scan a job chain tracked before the upgrade that retired them, D24), reverses reservations
never submitted, moves overdue scheduled jobs, and reports what it did; it never touches a scan
the looks track nor a final scan."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app import recovery
from app.accounts.models import Customer
from app.plumbing.jobs import DELIVER_JOB, WEBHOOK_QUEUE, enqueue_delivery, queue
from app.scans.models import Scan
from app.tracking import states
from tests.api.helpers import assert_counters_match
from tests.domain_fixtures import books_of, new_customer, new_scan

NOW = datetime(2026, 11, 22, 12, 0, 0)
STALE = 60  # RECOVERY_STALE_SECONDS of the tests' config


def chained(scan, generation=0):
    """As a job chain of before the upgrade tracked it: no due look, the chain's token."""
    Scan.update(next_look_at=None, tracking_job_id=f"trk-{scan.id}-{generation}").where(Scan.id == scan.id).execute()


def test_a_scan_without_a_due_look_gets_one_at_once_and_once(conn, redis_conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan, tracked = new_scan(cust, key), new_scan(cust, key, "b@example.com")
        chained(scan)
        redis_conn.flushdb()  # its tracking job is gone, too
        assert recovery.recover_scans(NOW) == 1
        row = Scan.get_by_id(scan.id)
        assert (row.next_look_at, row.tracking_job_id) == (NOW, None)
        assert Scan.get_by_id(tracked.id).next_look_at == tracked.next_look_at  # the looks track it: left alone
        assert recovery.recover_scans(NOW + timedelta(hours=1)) == 0  # once


def test_an_old_tracking_job_hands_over_its_scan_only(conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan, other = new_scan(cust, key), new_scan(cust, key, "b@example.com")
        chained(scan, 4)
        chained(other, 2)
        assert recovery.hand_over(scan.id) is True
        assert Scan.get_by_id(scan.id).next_look_at == NOW
        assert Scan.get_by_id(other.id).next_look_at is None  # the sweep's, or its own job's
        assert recovery.hand_over(scan.id) is False  # a duplicate job changes nothing


def test_a_final_or_unsubmitted_scan_is_never_given_a_due_look(conn, redis_conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        final, unsubmitted = new_scan(cust, key), new_scan(cust, key, "b@example.com")
        states.complete(final.id, {})
        chained(final)
        chained(unsubmitted)
        Scan.update(engine_id=None).where(Scan.id == unsubmitted.id).execute()  # still in its engine call
        assert recovery.recover_scans(NOW + timedelta(hours=1)) == 0
        assert recovery.hand_over(final.id) is recovery.hand_over(unsubmitted.id) is False


def test_a_reservation_never_submitted_is_reversed_after_the_stale_window(conn):
    with freeze_time(NOW):
        cust, key = new_customer(credits=5)
        scan = new_scan(cust, key)
        # As if the API process died in its engine call: reserved and charged, never submitted.
        Scan.update(engine_id=None).where(Scan.id == scan.id).execute()
        assert recovery.reverse_unsubmitted(NOW + timedelta(seconds=STALE - 1)) == 0
        assert recovery.reverse_unsubmitted(NOW + timedelta(seconds=STALE + 1)) == 1
        books = books_of(cust.id)
        assert (books.scans, books.balance, books.ledger_sum, books.in_flight, books.quota_minutes) == (0, 5, 5, 0, 0)
        assert_counters_match(cust.id)
        assert recovery.reverse_unsubmitted(NOW + timedelta(hours=1)) == 0  # once


def test_a_submitted_scan_is_never_reversed(conn):
    with freeze_time(NOW):
        cust, key = new_customer(credits=5)
        new_scan(cust, key)
        assert recovery.reverse_unsubmitted(NOW + timedelta(hours=1)) == 0
        assert Customer.get_by_id(cust.id).balance == 4


def test_overdue_scheduled_jobs_are_moved_to_their_queue(conn, redis_conn):
    with freeze_time(NOW):
        enqueue_delivery("dlv_x", "dlv-dlv_x-1", delay_seconds=10)
        due = NOW + timedelta(seconds=10)
        assert recovery.promote_overdue(due + timedelta(seconds=STALE - 1)) == 0  # the scheduler's to move
        assert recovery.promote_overdue(due + timedelta(seconds=STALE + 1)) == 1
        waiting = queue(WEBHOOK_QUEUE)
        assert waiting.job_ids == ["dlv-dlv_x-1"]
        assert waiting.fetch_job("dlv-dlv_x-1").func_name == DELIVER_JOB


def test_the_sweep_reports_every_part(conn, redis_conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        chained(scan)
        redis_conn.flushdb()
        frozen.tick(STALE + 1)
        report = recovery.sweep()
    assert report == {"scheduled_jobs_promoted": 0, "scans_redispatched": 1, "reservations_reversed": 0,
                      "deliveries_redispatched": 0, "attempts_closed": 0, "engine_deletions_redispatched": 0,
                      "idempotency_purged": 0, "quota_minutes_pruned": 0}
    assert Scan.get_by_id(scan.id).next_look_at == NOW + timedelta(seconds=STALE + 1)


@pytest.mark.parametrize("at_once", [False, True])
def test_an_empty_sweep_does_nothing(conn, at_once):
    with freeze_time(NOW):
        assert set(recovery.sweep(at_once=at_once).values()) == {0}
