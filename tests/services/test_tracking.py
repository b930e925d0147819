"""tracking: when to look at a scan, its deadline, and its transitions (D5): progress, the
hand-over of the tracking chain by compare-and-set, and a final state set once, with the
in-flight counter and the webhook event in the same transaction."""
import json
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.jobs import live_job_ids, tracking_job_id
from app.models import Customer, Scan, WebhookDelivery
from app.services import sandbox_engine, tracking
from tests.api.helpers import assert_counters_match
from tests.services.conftest import new_customer, new_scan

# These tests are about the tracking chains (an RQ job per scan): batch looks off (D24's
# ``ENGINE_BATCH_LOOK=off``); tests/services/test_looks.py tests the batch looks.
pytestmark = pytest.mark.config(ENGINE_BATCH_LOOK="off")

NOW = datetime(2026, 11, 22, 12, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}}


@pytest.mark.parametrize("eta, poll, callbacks, delay", [
    (5, 10.0, False, 4.5),     # half a second before the eta
    (60, 10.0, False, 59.5),   # no look long before the scan can be done, however long the poll
    (0.3, 10.0, False, 0.3),   # too close to take the slack off
    (0, 10.0, False, 0.25),    # never sooner than MIN_DELAY
    (60, 10.0, True, 70.0),    # the engine calls back: one poll past the eta, the safety net
    (0, 10.0, True, 10.0),
])
def test_the_first_look_is_just_before_the_eta_or_a_poll_past_it_with_callbacks(eta, poll, callbacks, delay):
    assert tracking.first_look_delay(eta, poll, callbacks=callbacks) == delay


@pytest.mark.parametrize("eta_in, callbacks, delay", [
    (timedelta(seconds=5), False, 4.5), (timedelta(seconds=0.4), False, 0.4), (timedelta(seconds=0.1), False, 0.25),
    (timedelta(seconds=-3), False, 10.0), (None, False, 10.0), (timedelta(minutes=5), False, 299.5),
    (timedelta(minutes=5), True, 310.0), (timedelta(seconds=-3), True, 10.0),
])
def test_the_next_look_goes_by_the_eta_then_by_the_poll(eta_in, callbacks, delay):
    eta_at = NOW + eta_in if eta_in is not None else None
    assert tracking.look_delay(eta_at, NOW, 10.0, callbacks=callbacks) == delay


def test_a_live_scan_times_out_after_scan_timeout_seconds_and_a_test_one_by_the_sandbox(conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        live = new_scan(cust, key)
        assert tracking.deadline(live) == NOW + timedelta(seconds=900)
        _, test_key = new_customer(livemode=False)
        test = new_scan(Customer.get_by_id(test_key.customer_id), test_key)
        assert tracking.deadline(test) == NOW + timedelta(seconds=sandbox_engine.timeout_seconds("email", test.target))
        assert tracking.deadline(test) < tracking.deadline(live)


def test_completing_sets_the_result_once_and_takes_the_scan_out_of_flight(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        assert Customer.get_by_id(cust.id).in_flight == 1
        frozen.tick(30)
        assert tracking.complete(scan.id, RESULT) is True
        done = Scan.get_by_id(scan.id)
        assert (done.status, done.completed_at, done.last_checked_at) == ("completed", NOW + timedelta(seconds=30),
                                                                            NOW + timedelta(seconds=30))
        assert json.loads(done.result_json) == RESULT
        assert done.recipes_done == done.recipes_total == scan.recipes_total
        assert Customer.get_by_id(cust.id).in_flight == 0
        assert tracking.complete(scan.id, {"other": 1}) is False  # a replayed job changes nothing
        assert tracking.fail(scan.id, "engine_failed", "late") is False
        assert json.loads(Scan.get_by_id(scan.id).result_json) == RESULT
        assert Customer.get_by_id(cust.id).in_flight == 0
        assert WebhookDelivery.select().count() == 0  # the key has no webhook URL
        assert_counters_match(cust.id)


def test_failing_keeps_the_code_and_a_bounded_message_and_fires_scan_failed(conn):
    cust, key = new_customer(webhook_url="https://hooks.example.com/x")
    scan = new_scan(cust, key)
    assert tracking.fail(scan.id, "engine_timeout", "x" * 900) is True
    failed = Scan.get_by_id(scan.id)
    assert (failed.status, failed.failure_code, len(failed.failure_message)) == ("failed", "engine_timeout", 500)
    assert failed.failed_at is not None
    [delivery] = WebhookDelivery.select()
    assert (delivery.event, delivery.scan_id, delivery.status) == ("scan.failed", scan.id, "pending")
    assert json.loads(delivery.body)["failure"] == {"code": "engine_timeout", "message": "x" * 500}
    assert live_job_ids([delivery.job_id]) == {delivery.job_id}  # dispatched after the commit
    assert Customer.get_by_id(cust.id).in_flight == 0


def test_a_completed_scan_of_a_key_with_a_webhook_gets_one_event(conn):
    cust, key = new_customer(webhook_url="https://hooks.example.com/x")
    scan = new_scan(cust, key)
    tracking.complete(scan.id, RESULT)
    tracking.complete(scan.id, RESULT)
    [delivery] = WebhookDelivery.select()
    body = json.loads(delivery.body)
    assert (delivery.event, body["event"], body["scan_id"], body["status"]) == (
        "scan.completed", "scan.completed", scan.id, "completed")
    assert delivery.url == "https://hooks.example.com/x"


def test_a_test_scan_leaves_the_test_counter_not_the_live_one(conn):
    cust, key = new_customer(livemode=False)
    scan = new_scan(cust, key)
    assert (Customer.get_by_id(cust.id).in_flight, Customer.get_by_id(cust.id).test_in_flight) == (0, 1)
    tracking.complete(scan.id, RESULT)
    assert (Customer.get_by_id(cust.id).in_flight, Customer.get_by_id(cust.id).test_in_flight) == (0, 0)


def test_progress_marks_a_queued_scan_running_once_and_leaves_final_scans_alone(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        tracking.record_progress(scan.id, running=False, recipes_total=8, recipes_done=0)
        assert (Scan.get_by_id(scan.id).status, Scan.get_by_id(scan.id).started_at) == ("queued", None)
        frozen.tick(5)
        tracking.record_progress(scan.id, running=True, recipes_total=8, recipes_done=2)
        row = Scan.get_by_id(scan.id)
        assert (row.status, row.started_at, row.recipes_done, row.last_checked_at) == (
            "running", NOW + timedelta(seconds=5), 2, NOW + timedelta(seconds=5))
        frozen.tick(5)
        tracking.record_progress(scan.id, running=True, recipes_total=8, recipes_done=5)
        assert Scan.get_by_id(scan.id).started_at == NOW + timedelta(seconds=5)  # started once
        tracking.complete(scan.id, RESULT)
        tracking.record_progress(scan.id, running=True, recipes_total=8, recipes_done=1)
        assert (Scan.get_by_id(scan.id).status, Scan.get_by_id(scan.id).recipes_done) == ("completed", 8)


def test_the_chain_is_handed_over_only_by_its_current_job(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    first = tracking_job_id(scan.id, 0)
    assert scan.tracking_job_id == first
    assert tracking.hand_over(scan.id, first, 5, recipes_done=1) is True
    second = tracking_job_id(scan.id, 1)
    row = Scan.get_by_id(scan.id)
    assert (row.tracking_job_id, row.recipes_done) == (second, 1)
    assert live_job_ids([second]) == {second}
    assert tracking.hand_over(scan.id, first, 5, recipes_done=7) is False  # a stale job
    assert Scan.get_by_id(scan.id).recipes_done == 1
    assert tracking.hand_over(scan.id, second, 5, durable=False, recipes_done=3) is True
    assert Scan.get_by_id(scan.id).tracking_job_id == tracking_job_id(scan.id, 2)


def test_in_flight_only_hand_over_leaves_a_final_scan(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    tracking.complete(scan.id, RESULT)
    token = Scan.get_by_id(scan.id).tracking_job_id
    assert tracking.hand_over(scan.id, token, 0, in_flight_only=True) is False
    assert Scan.get_by_id(scan.id).tracking_job_id == token
    assert tracking.hand_over(scan.id, None, 0) is True  # without a token: the sweep's restart
