"""recovery: the sweep (D13) re-dispatches scans whose tracking job is lost once they are stale
(or at once, for the operator), reverses reservations never submitted, moves overdue
scheduled jobs, and reports what it did; it never touches a live chain or a final scan."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time
from rq.job import Job

from app.jobs import DELIVER_JOB, WEBHOOK_QUEUE, enqueue_delivery, live_job_ids, queue, tracking_job_id
from app.models import Customer, Scan
from app.services import recovery, tracking
from tests.api.helpers import assert_counters_match
from tests.services.conftest import books_of, new_customer, new_scan

# These tests are about the tracking chains (an RQ job per scan): batch looks off (D24's
# ``ENGINE_BATCH_LOOK=off``); tests/services/test_looks.py tests the batch looks.
pytestmark = pytest.mark.config(ENGINE_BATCH_LOOK="off")

NOW = datetime(2026, 11, 22, 12, 0, 0)
STALE = 60  # RECOVERY_STALE_SECONDS of the tests' config


def test_a_scan_whose_job_was_lost_is_redispatched_once_stale(conn, redis_conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan = new_scan(cust, key)
        redis_conn.flushdb()  # its tracking job is gone
        assert recovery.recover_scans(NOW + timedelta(seconds=STALE - 1)) == 0
        later = NOW + timedelta(seconds=STALE + 1)
        assert recovery.recover_scans(later) == 1
        row = Scan.get_by_id(scan.id)
        assert (row.tracking_job_id, row.last_checked_at) == (tracking_job_id(scan.id, 1), later)
        assert live_job_ids([row.tracking_job_id]) == {row.tracking_job_id}
        assert recovery.recover_scans(later + timedelta(seconds=STALE + 1)) == 0  # its new job is alive


def test_the_operators_sweep_redispatches_at_once_but_not_a_live_chain(conn, redis_conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        lost, alive = new_scan(cust, key), new_scan(cust, key, "b@example.com")
        Job.fetch(lost.tracking_job_id, connection=redis_conn).delete()  # its job is gone
        assert recovery.recover_scans(NOW, at_once=True) == 1
        assert Scan.get_by_id(lost.id).tracking_job_id == tracking_job_id(lost.id, 1)
        assert Scan.get_by_id(alive.id).tracking_job_id == tracking_job_id(alive.id, 0)


def test_a_final_scan_is_never_redispatched(conn, redis_conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan = new_scan(cust, key)
        tracking.complete(scan.id, {})
        redis_conn.flushdb()
        assert recovery.recover_scans(NOW + timedelta(hours=1), at_once=True) == 0


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
        redis_conn.flushdb()
        frozen.tick(STALE + 1)
        report = recovery.sweep()
    assert report == {"scheduled_jobs_promoted": 0, "scans_redispatched": 1, "reservations_reversed": 0,
                      "deliveries_redispatched": 0, "attempts_closed": 0, "engine_deletions_redispatched": 0,
                      "idempotency_purged": 0, "quota_minutes_pruned": 0}
    assert Scan.get_by_id(scan.id).tracking_job_id == tracking_job_id(scan.id, 1)


@pytest.mark.parametrize("at_once", [False, True])
def test_an_empty_sweep_does_nothing(conn, at_once):
    with freeze_time(NOW):
        assert set(recovery.sweep(at_once=at_once).values()) == {0}
