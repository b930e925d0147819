"""tracking: when to look at a scan, its deadline, and its transitions (D5): progress as a look
records it, and a final state set once, with the in-flight counter and the webhook event in the
same transaction."""
import json
from collections import Counter
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts.models import Customer
from app.events.models import Event
from app.extensions import db
from app.plumbing.db import transaction
from app.plumbing.jobs import live_job_ids
from app.scans.models import IN_FLIGHT, Scan
from app.tracking import sandbox_engine, states
from app.tracking.statements import scan_states
from app.webhooks.models import WebhookDelivery
from tests.api.helpers import assert_counters_match
from tests.domain_fixtures import new_customer, new_scan

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
    assert states.first_look_delay(eta, poll, callbacks=callbacks) == delay


@pytest.mark.parametrize("eta_in, callbacks, delay", [
    (timedelta(seconds=5), False, 4.5), (timedelta(seconds=0.4), False, 0.4), (timedelta(seconds=0.1), False, 0.25),
    (timedelta(seconds=-3), False, 10.0), (None, False, 10.0), (timedelta(minutes=5), False, 299.5),
    (timedelta(minutes=5), True, 310.0), (timedelta(seconds=-3), True, 10.0),
])
def test_the_next_look_goes_by_the_eta_then_by_the_poll(eta_in, callbacks, delay):
    eta_at = NOW + eta_in if eta_in is not None else None
    assert states.look_delay(eta_at, NOW, 10.0, callbacks=callbacks) == delay


def test_a_live_scan_times_out_after_scan_timeout_seconds_and_a_test_one_by_the_sandbox(conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        live = new_scan(cust, key)
        assert states.deadline(live) == NOW + timedelta(seconds=900)
        _, test_key = new_customer(livemode=False)
        test = new_scan(Customer.get_by_id(test_key.customer_id), test_key)
        assert states.deadline(test) == NOW + timedelta(seconds=sandbox_engine.timeout_seconds("email", test.target))
        assert states.deadline(test) < states.deadline(live)


def test_completing_sets_the_result_once_and_takes_the_scan_out_of_flight(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        assert Customer.get_by_id(cust.id).in_flight == 1
        frozen.tick(30)
        assert states.complete(scan.id, RESULT) is True
        done = Scan.get_by_id(scan.id)
        assert (done.status, done.completed_at, done.last_checked_at) == ("completed", NOW + timedelta(seconds=30),
                                                                            NOW + timedelta(seconds=30))
        assert json.loads(done.result_json) == RESULT
        assert done.recipes_done == done.recipes_total == scan.recipes_total
        assert Customer.get_by_id(cust.id).in_flight == 0
        assert states.complete(scan.id, {"other": 1}) is False  # a replayed job changes nothing
        assert states.fail(scan.id, "engine_failed", "late") is False
        assert json.loads(Scan.get_by_id(scan.id).result_json) == RESULT
        assert Customer.get_by_id(cust.id).in_flight == 0
        assert WebhookDelivery.select().count() == 0  # the key has no webhook URL
        assert_counters_match(cust.id)


def test_failing_keeps_the_code_and_a_bounded_message_and_fires_scan_failed(conn):
    cust, key = new_customer(webhook_url="https://hooks.example.com/x")
    scan = new_scan(cust, key)
    assert states.fail(scan.id, "engine_timeout", "x" * 900) is True
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
    states.complete(scan.id, RESULT)
    states.complete(scan.id, RESULT)
    [delivery] = WebhookDelivery.select()
    body = json.loads(delivery.body)
    assert (delivery.event, body["event"], body["scan_id"], body["status"]) == (
        "scan.completed", "scan.completed", scan.id, "completed")
    assert delivery.url == "https://hooks.example.com/x"


def test_a_test_scan_leaves_the_test_counter_not_the_live_one(conn):
    cust, key = new_customer(livemode=False)
    scan = new_scan(cust, key)
    assert (Customer.get_by_id(cust.id).in_flight, Customer.get_by_id(cust.id).test_in_flight) == (0, 1)
    states.complete(scan.id, RESULT)
    assert (Customer.get_by_id(cust.id).in_flight, Customer.get_by_id(cust.id).test_in_flight) == (0, 0)


def look(scan_id, running, done, *, generation):
    """What a batch look records of an unfinished scan (``scan_states.record_looks``)."""
    now = datetime.now()
    return scan_states.record_looks([(scan_id, generation, now + timedelta(seconds=1), 0, 8, done, running)],
                                    statuses=IN_FLIGHT, queued="queued", running="running", now=now)


def test_progress_marks_a_queued_scan_running_once_and_leaves_final_scans_alone(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        assert look(scan.id, False, 0, generation=0) == [(scan.id, False)]
        assert (Scan.get_by_id(scan.id).status, Scan.get_by_id(scan.id).started_at) == ("queued", None)
        frozen.tick(5)
        assert look(scan.id, True, 2, generation=1) == [(scan.id, True)]  # moved now
        row = Scan.get_by_id(scan.id)
        assert (row.status, row.started_at, row.recipes_done) == ("running", NOW + timedelta(seconds=5), 2)
        frozen.tick(5)
        assert look(scan.id, True, 5, generation=2) == [(scan.id, False)]
        assert Scan.get_by_id(scan.id).started_at == NOW + timedelta(seconds=5)  # started once
        states.complete(scan.id, RESULT)
        assert look(scan.id, True, 1, generation=3) == []
        assert (Scan.get_by_id(scan.id).status, Scan.get_by_id(scan.id).recipes_done) == ("completed", 8)


# --- A batch look's finals in a number of statements that does not grow with the scans or with the
# customers they belong to (issue 49: with 100 customers a batch of 100 finals was 702 statements,
# each parsed and planned, which made PostgreSQL the cost of many customers).

BATCH_RESULT = {"profiles": [], "contacts": [], "breaches": []}


@pytest.fixture
def statements(monkeypatch):
    """The statements the database object runs from now on (their first words)."""
    calls = []
    database = db.obj
    execute_sql = database.execute_sql
    monkeypatch.setattr(database, "execute_sql",
                        lambda sql, *a, **k: calls.append(" ".join(sql.split()[:3])) or execute_sql(sql, *a, **k))
    return calls


def _scans(customers: int, n: int):
    owners = [new_customer(credits=100, inflight=100, hour=1000, day=1000) for _ in range(customers)]
    return [new_scan(*owners[i % customers], target=f"batch{i}@example.com") for i in range(n)]


def _finish_all(scans, statements) -> int:
    finals = [states.completed(s.id, BATCH_RESULT) if i % 3 else states.failed(s.id, "engine_failed", "no")
              for i, s in enumerate(scans)]
    statements.clear()
    with transaction():
        assert len(states.record_finals(finals)) == len(scans)
    return len(statements)


def test_finals_take_as_many_statements_for_one_customer_as_for_many(conn, simulator, statements):
    one = _finish_all(_scans(1, 24), statements)
    many_scans = _scans(12, 24)
    many = _finish_all(many_scans, statements)
    assert one == many <= 12, Counter(statements)
    # And each was written as one at a time wrote it: final, out of flight, its events stored.
    rows = {s.id: s for s in Scan.select().where(Scan.id.in_([s.id for s in many_scans]))}
    assert Counter(s.status for s in rows.values()) == {"completed": 16, "failed": 8}
    assert all(s.completed_at and s.recipes_done == s.recipes_total for s in rows.values() if s.status == "completed")
    assert all(s.failure_code == "engine_failed" and s.failure_message == "no" and s.completed_at is None
               for s in rows.values() if s.status == "failed")
    for customer_id in {s.customer_id for s in rows.values()}:
        assert Customer.get_by_id(customer_id).in_flight == 0
        assert_counters_match(customer_id)
    kinds = Counter(e.kind for e in Event.select().where(Event.scan_id.in_(list(rows))))
    assert kinds["scan.completed"] == 16 and kinds["scan.failed"] == 8 and kinds["scan.running"] == 24


def test_a_scan_final_already_is_left_as_it_is_by_a_batch(conn, simulator):
    first, second = _scans(1, 2)
    assert states.finish([states.failed(first.id, "engine_failed", "first")]) == 1
    assert states.finish([states.completed(first.id, BATCH_RESULT), states.completed(second.id, BATCH_RESULT)]) == 1
    first, second = Scan.get_by_id(first.id), Scan.get_by_id(second.id)
    assert (first.status, first.failure_message, first.completed_at) == ("failed", "first", None)
    assert second.status == "completed"
    assert Customer.get_by_id(first.customer_id).in_flight == 0
