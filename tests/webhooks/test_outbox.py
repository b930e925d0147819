"""outbox: the event of a final scan as delivery rows written in the transaction that finishes it and
sent when it commits, test events within their limit, and a watch's events (D12, D13)."""

import json

import pytest
from freezegun import freeze_time
from rq.registry import ScheduledJobRegistry

from app.accounts.models import ApiKey
from app.plumbing import runtime
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.jobs import WEBHOOK_QUEUE, live_job_ids, queue
from app.plumbing.models import utcnow
from app.tracking import states
from app.webhooks import deliveries, outbox
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan
from tests.webhooks.conftest import NOW, PORTAL_SECRET, RESULT, SECRET, URL


def test_the_event_of_a_completed_scan_carries_its_result(hooked):
    cust, key = hooked
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    [delivery] = WebhookDelivery.select()
    body = json.loads(delivery.body)
    assert body == outbox.event_body(type(scan).get_by_id(scan.id))
    assert (body["event"], body["scan_id"], body["livemode"], body["result"]) == (
        "scan.completed", scan.id, True, RESULT)
    assert "bulk_id" not in body
    assert delivery.body == outbox.encode_body(body)  # compact JSON: the bytes every attempt sends


def test_no_event_for_a_key_without_a_url(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    assert outbox.record_event(type(scan).get_by_id(scan.id)) is None


def test_a_test_event_is_a_scan_completed_marked_test_and_dispatched(conn):
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    delivery = outbox.send_test_event(key.id, cust.id)
    body = json.loads(delivery.body)
    assert (body["test"], body["event"], body["livemode"], delivery.scan_id) == (True, "scan.completed", True, None)
    assert body["scan_id"].startswith("scn_test_")
    assert (delivery.url, delivery.status, delivery.livemode) == (URL, "pending", True)
    assert live_job_ids([delivery.job_id]) == {delivery.job_id}


class Refused(Exception):
    """The caller's own error after the service's writes: its transaction rolls back."""


def _rolled_back(body) -> None:
    try:
        with transaction():
            body()
            raise Refused
    except Refused:
        pass


def _jobs_in_redis() -> int:
    webhook_queue = queue(WEBHOOK_QUEUE)
    return webhook_queue.count + len(ScheduledJobRegistry(queue=webhook_queue))


def test_a_delivery_is_sent_once_when_the_transaction_it_was_written_in_commits(hooked):
    cust, key = hooked
    with transaction():  # the service's own transaction is a savepoint of the caller's
        delivery = outbox.send_test_event(key.id, cust.id)
        assert _jobs_in_redis() == 0  # not before the commit: a worker would find no row
    assert live_job_ids([delivery.job_id]) == {delivery.job_id} and _jobs_in_redis() == 1


def test_a_delivery_rolled_back_with_its_callers_transaction_sends_nothing(hooked):
    cust, key = hooked
    _rolled_back(lambda: outbox.send_test_event(key.id, cust.id))
    with transaction():
        pass  # a later commit on the connection sends nothing of it either
    assert WebhookDelivery.select().count() == 0 and _jobs_in_redis() == 0


def test_a_rolled_back_savepoint_drops_only_its_own_delivery(hooked):
    cust, key = hooked
    with transaction():
        kept = outbox.send_test_event(key.id, cust.id)
        _rolled_back(lambda: outbox.send_test_event(key.id, cust.id))  # a savepoint of this transaction
    [delivery] = WebhookDelivery.select()
    assert delivery.id == kept.id and live_job_ids([kept.job_id]) == {kept.job_id} and _jobs_in_redis() == 1


def test_redis_down_after_the_commit_loses_no_delivery(hooked, monkeypatch, caplog):
    cust, key = hooked
    with monkeypatch.context() as redis_down:
        redis_down.setitem(runtime.config, "REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
        delivery = outbox.send_test_event(key.id, cust.id)  # no exception: the row is committed
    assert WebhookDelivery.get_by_id(delivery.id).status == "pending" and _jobs_in_redis() == 0
    assert [r.name for r in caplog.records if r.levelname == "WARNING"] == ["app.plumbing.jobs"]  # one line
    report = deliveries.recover_deliveries(utcnow(), at_once=True)
    assert report["deliveries_redispatched"] == 1 and live_job_ids([delivery.job_id]) == {delivery.job_id}


def test_a_sample_event_is_marked_as_a_test_of_its_mode():
    with freeze_time(NOW):
        body = outbox.sample_event_body(livemode=False)
    assert (body["test"], body["livemode"], body["completed_at"], body["status"]) == (
        True, False, "2026-11-22T12:00:00Z", "completed")
    assert outbox.sample_event_body()["scan_id"] != body["scan_id"]


# Moved from tests/workers/test_webhook_signatures.py (service calls, no worker).

PORTAL_START = "2026-11-21 12:00:00"


def test_a_test_event_needs_a_webhook_url(conn):
    cust, key = new_customer()
    with pytest.raises(AccountError, match="no webhook URL"):
        outbox.send_test_event(key.id, cust.id)


@pytest.mark.config(WEBHOOK_TEST_EVENTS_PER_MINUTE=3)
def test_test_events_are_limited_per_key_with_a_clear_message(conn):
    with freeze_time(PORTAL_START) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=PORTAL_SECRET)
        neighbour, neighbour_key = new_customer(webhook_url=URL, webhook_secret=PORTAL_SECRET)
        for _ in range(3):
            outbox.send_test_event(key.id, cust.id)
            frozen.tick(10)
        with pytest.raises(AccountError, match=r"at most 3 a minute per key\. Try again in 30 seconds"):
            outbox.send_test_event(key.id, cust.id)
        assert WebhookDelivery.select().where(WebhookDelivery.api_key == key.id).count() == 3
        outbox.send_test_event(neighbour_key.id, neighbour.id)  # another key has its own allowance
        frozen.tick(31)  # the first one is now more than a minute old
        outbox.send_test_event(key.id, cust.id)
        with pytest.raises(AccountError, match="Too many test events"):
            outbox.send_test_event(key.id, cust.id)
        assert WebhookDelivery.select().where(WebhookDelivery.api_key == key.id).count() == 4


def test_a_watch_event_takes_the_one_event_path_thin_skipped_and_stored_under_its_watch(conn):
    from app.events.models import Event
    from app.webhooks import endpoints
    from app.webhooks.models import WebhookEndpoint

    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)  # its first endpoint: scan events only
    thin, _ = endpoints.create(key, url="https://hooks.example.com/thin", payload="thin", events=["watch.changed"])
    dead, _ = endpoints.create(key, url="https://hooks.example.com/dead", events=["watch.changed"])
    WebhookEndpoint.update(webhook_enabled=False, webhook_disabled_at=utcnow()).where(
        WebhookEndpoint.id == dead["endpoint_id"]).execute()  # stopped by auto-disable
    scan = new_scan(cust, key)
    body = {"event": "watch.changed", "watch_id": "wch_1", "livemode": True, "purpose": None, "case_ref": None,
            "scan_id": scan.id, "previous_scan_id": "scn_0", "changes": {"added": ["fnd_a"], "removed": [],
                                                                           "risk": {}},
            "target": "jane@example.com", "kind": "email", "added_items": {"fnd_a": {"name": "X"}}}
    with transaction():
        pending = outbox.record_watch_event(ApiKey.get_by_id(key.id), body, scan_id=scan.id)

    rows = {d.endpoint_id: d for d in WebhookDelivery.select()}
    assert set(rows) == {thin["endpoint_id"], dead["endpoint_id"]}
    assert [d.id for d in pending] == [rows[thin["endpoint_id"]].id]
    sent = json.loads(rows[thin["endpoint_id"]].body)
    assert "target" not in sent and "added_items" not in sent and sent["changes"]["added"] == ["fnd_a"]
    # As a scan event to an endpoint auto-disable stopped: recorded skipped, with the full body, to recover.
    assert rows[dead["endpoint_id"]].status == "skipped"
    assert json.loads(rows[dead["endpoint_id"]].body) == body
    [stored] = Event.select()
    assert (stored.kind, stored.watch_id, stored.scan_id) == ("watch.changed", "wch_1", scan.id)
    assert json.loads(stored.body) == body
