"""deliveries: the delivery state machine around each attempt (§6, D13): one attempt per
job, reserved before sending; success ends it, failure follows WEBHOOK_RETRY_SCHEDULE, and
the sweep closes abandoned attempts and re-dispatches lost jobs."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.plumbing.jobs import delivery_job_id, live_job_ids
from app.webhooks import deliveries, outbox
from app.webhooks.deliveries import Attempt, Outcome
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from tests.domain_fixtures import new_customer

URL = "https://hooks.example.com/x"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="
NOW = datetime(2026, 11, 22, 12, 0, 0)


def new_delivery():
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    return outbox.send_test_event(key.id, cust.id)


@pytest.fixture
def delivery(conn):
    return new_delivery()


def _row(delivery_id):
    return WebhookDelivery.get_by_id(delivery_id)


def _start(delivery_id, **kw):
    return deliveries.start_attempt(delivery_id, _row(delivery_id).job_id, **kw)


@pytest.mark.parametrize("status_code, error, ok", [
    (200, None, True), (204, None, True), (299, None, True), (300, None, False), (500, None, False),
    (None, "timeout", False), (200, "ssrf_refused", False),
])
def test_only_a_2xx_without_an_error_succeeds(status_code, error, ok):
    assert Outcome(status_code=status_code, error=error).succeeded is ok


def test_an_attempt_is_reserved_once_with_its_signed_request(delivery):
    attempt = _start(delivery.id)
    assert isinstance(attempt, Attempt)
    assert (attempt.url, attempt.body) == (URL, delivery.body.encode())
    assert attempt.headers["X-Service-Delivery"] == delivery.id and "X-Service-Signature" in attempt.headers
    assert (attempt.row.number, attempt.row.outcome) == (1, "in_progress")
    assert _row(delivery.id).attempts == 1
    assert DeliveryAttempt.get_by_id(attempt.row.id).outcome == "in_progress"  # written before sending
    # The same job again (a replay) makes no second attempt.
    assert deliveries.start_attempt(delivery.id, delivery_job_id(delivery.id, 1)) == "stale"
    assert DeliveryAttempt.select().count() == 1


def test_a_job_that_is_not_the_current_one_or_a_final_delivery_makes_no_attempt(delivery):
    assert deliveries.start_attempt(delivery.id, delivery_job_id(delivery.id, 2)) == "stale"
    assert deliveries.start_attempt(delivery.id, None) == "stale"
    assert deliveries.start_attempt("dlv_unknown", "dlv-dlv_unknown-1") == "final"
    attempt = _start(delivery.id)
    deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=200))
    assert _start(delivery.id) == "final"


def test_a_busy_endpoint_defers_the_job_without_an_attempt(delivery):
    asked = []
    result = _start(delivery.id, admit=lambda endpoint_id, url: asked.append((endpoint_id, url)) or False)
    # The share is the endpoint's (D22): the key's first endpoint here.
    assert result == "busy" and asked == [(outbox.first_endpoint_id(delivery.api_key_id), URL)]
    assert (_row(delivery.id).attempts, DeliveryAttempt.select().count()) == (0, 0)
    job_id = _row(delivery.id).job_id
    assert deliveries.defer(delivery.id, job_id, 5) is True
    assert live_job_ids([job_id]) == {job_id}
    assert isinstance(_start(delivery.id, admit=lambda *_: True), Attempt)  # the same job, later


def test_a_success_ends_the_delivery(conn):
    with freeze_time(NOW):
        delivery = new_delivery()
        attempt = _start(delivery.id)
        assert deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=202, excerpt="ok",
                                                                         duration_ms=12)) == "succeeded"
        row = _row(delivery.id)
        assert (row.status, row.finished_at, row.next_attempt_at) == ("succeeded", NOW, None)
        logged = DeliveryAttempt.get_by_id(attempt.row.id)
        assert (logged.outcome, logged.status_code, logged.response_excerpt, logged.duration_ms) == (
            "succeeded", 202, "ok", 12)


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0, 30))
def test_failures_follow_the_retry_schedule_then_fail_the_delivery(conn):
    with freeze_time(NOW):
        delivery = new_delivery()
        for number, delay in ((1, 0), (2, 30)):
            attempt = _start(delivery.id)
            assert attempt.row.number == number
            assert deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=503)) == "failed"
            row = _row(delivery.id)
            assert (row.status, row.job_id, row.next_attempt_at) == (
                "pending", delivery_job_id(delivery.id, number + 1), NOW + timedelta(seconds=delay))
            assert live_job_ids([row.job_id]) == {row.job_id}
        attempt = _start(delivery.id)
        deliveries.record(attempt.delivery, attempt.row, Outcome(error="timeout"))
        row = _row(delivery.id)
        assert (row.status, row.attempts, row.finished_at) == ("failed", 3, NOW)
        assert [a.error for a in DeliveryAttempt.select().order_by(DeliveryAttempt.number)] == [None, None, "timeout"]


@pytest.mark.parametrize("data, excerpt", [
    (None, ""), (b"", ""), (b"ok", "ok"), (b"a\x00b", "ab"), (b"\xff\xfe", "\ufffd\ufffd"),
    (b"x" * 5000, "x" * 1024),
])
def test_a_response_excerpt_is_bounded_text_without_nul(data, excerpt):
    assert deliveries.response_excerpt(data) == excerpt


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0,))
def test_the_sweep_closes_an_abandoned_attempt_and_goes_on(conn, redis_conn):
    with freeze_time(NOW) as frozen:
        delivery = new_delivery()
        attempt = _start(delivery.id)  # its worker dies during the request
        redis_conn.flushdb()
        frozen.tick(deliveries.ATTEMPT_DEADLINE_SECONDS - 1)
        assert deliveries.recover_deliveries(datetime(2026, 11, 22, 12, 1, 59)) == {
            "deliveries_redispatched": 0, "attempts_closed": 0}  # not yet past the deadline
        frozen.tick(2)
        now = NOW + timedelta(seconds=deliveries.ATTEMPT_DEADLINE_SECONDS + 1)
        assert deliveries.recover_deliveries(now) == {"deliveries_redispatched": 1, "attempts_closed": 1}
        lost = DeliveryAttempt.get_by_id(attempt.row.id)
        assert (lost.outcome, lost.error) == ("failed", "worker_lost")
        row = _row(delivery.id)
        assert row.job_id == delivery_job_id(delivery.id, 2) and live_job_ids([row.job_id]) == {row.job_id}
        # The dead worker's late answer changes nothing.
        assert deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=200)) == "superseded"
        assert _row(delivery.id).status == "pending"


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(), WEBHOOK_DISABLE_AFTER_HOURS=120)
def test_a_lost_last_attempt_closed_by_the_sweep_is_judged_by_the_auto_disable_rule(conn, redis_conn):
    """The sweep failing a delivery for good asks the same auto-disable rule as an answered failure (D22)."""
    from app.accounts.models import ApiKey
    from app.webhooks import endpoints
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    first = outbox.first_endpoint_id(key.id)
    with freeze_time(NOW) as frozen:
        for _ in range(10):  # ten failures, the oldest 121 hours before the lost attempt
            body = outbox.sample_event_body()
            outbox._create_delivery(key, body["event"], body, None, status="failed")
        frozen.tick(timedelta(hours=121))
        lost = outbox.send_test_event(key.id, cust.id)
        _start(lost.id)  # its worker dies during the request
        redis_conn.flushdb()
        frozen.tick(deliveries.ATTEMPT_DEADLINE_SECONDS + 1)
        assert endpoints.read(ApiKey.get_by_id(key.id), first)["enabled"] is True
        report = deliveries.recover_deliveries(NOW + timedelta(hours=121, seconds=deliveries.ATTEMPT_DEADLINE_SECONDS + 1))
        assert report == {"deliveries_redispatched": 0, "attempts_closed": 1}
    assert _row(lost.id).status == "failed"
    assert endpoints.read(ApiKey.get_by_id(key.id), first)["enabled"] is False


def test_a_lost_job_is_enqueued_again_once_the_delivery_is_stale(delivery, redis_conn):
    redis_conn.flushdb()
    job_id = delivery.job_id
    created = delivery.created_at
    assert deliveries.recover_deliveries(created + timedelta(seconds=30)) == {
        "deliveries_redispatched": 0, "attempts_closed": 0}  # its job may be on its way
    assert live_job_ids([job_id]) == set()
    assert deliveries.recover_deliveries(created + timedelta(seconds=30), at_once=True)["deliveries_redispatched"] == 1
    assert live_job_ids([job_id]) == {job_id}
    # Alive now: the next sweep leaves it alone.
    assert deliveries.recover_deliveries(created + timedelta(seconds=600))["deliveries_redispatched"] == 0


@pytest.mark.config(DELIVERY_RETENTION_DAYS=30)
def test_deliveries_past_retention_are_removed_with_their_attempts_but_pending_ones_wait(conn):
    with freeze_time(NOW) as frozen:
        old = new_delivery()
        attempt = _start(old.id)
        deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=200))
        still_pending = new_delivery()
        frozen.tick(timedelta(days=29))
        recent = new_delivery()
        frozen.tick(timedelta(days=1, seconds=1))  # the first two are 30 days and a second old
        assert deliveries.remove_past_retention() == 1
        assert not WebhookDelivery.select().where(WebhookDelivery.id == old.id).exists()
        assert not DeliveryAttempt.select().where(DeliveryAttempt.delivery == old.id).exists()
        assert {d.id for d in WebhookDelivery.select()} == {still_pending.id, recent.id}
        assert deliveries.remove_past_retention() == 0
