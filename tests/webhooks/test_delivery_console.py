"""delivery_console: a key's deliveries as the portal's console shows them: the exact request
of the last attempt, its timestamp as sent, its signatures masked."""
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from app.plumbing import runtime
from app.webhooks import deliveries, delivery_console, outbox
from app.webhooks.deliveries import Outcome
from app.webhooks.delivery_console import MASK, NOT_SENT
from tests.domain_fixtures import new_customer

URL = "https://hooks.example.com/x"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="
NOW = datetime(2026, 11, 22, 12, 0, 0)


def test_a_delivery_not_yet_sent_shows_its_request_without_a_timestamp(conn):
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    delivery = outbox.send_test_event(key.id, cust.id)
    [entry] = delivery_console.key_deliveries(key.id, cust.id).items
    assert (entry["delivery_id"], entry["test"], entry["status"], entry["can_redeliver"]) == (
        delivery.id, True, "pending", False)
    assert (entry["last"], entry["attempts"], entry["attempt_count"]) == (None, [], 0)
    request = entry["request"]
    assert (request["method"], request["url"], request["sent_at"], request["body"]) == ("POST", URL, None, delivery.body)
    headers = dict(request["headers"])
    assert headers["X-Service-Timestamp"] == headers["webhook-timestamp"] == NOT_SENT
    assert headers["X-Service-Signature"] == "sha256=" + MASK
    assert headers["webhook-signature"] == "v1," + MASK


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0,))
def test_the_request_is_the_last_attempts_with_its_time_as_sent(conn, monkeypatch):
    monkeypatch.setitem(runtime.config, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 10)
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        delivery = outbox.send_test_event(key.id, cust.id)
        for status_code in (500, 200):
            attempt = deliveries.start_attempt(delivery.id, type(delivery).get_by_id(delivery.id).job_id)
            deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=status_code, excerpt="x" * 3))
            frozen.tick(30)
        [entry] = delivery_console.key_deliveries(key.id, cust.id).items
    assert [a["number"] for a in entry["attempts"]] == [2, 1]  # newest first
    assert (entry["last"]["status_code"], entry["status"], entry["can_redeliver"]) == (200, "succeeded", True)
    sent_at = NOW + timedelta(seconds=30)
    assert (entry["request"]["sent_at"], entry["request"]["attempt"]) == (sent_at, 2)
    headers = dict(entry["request"]["headers"])
    assert headers["X-Service-Timestamp"] == str(int(sent_at.replace(tzinfo=UTC).timestamp()) * 1000)
    assert SECRET not in str(entry)


def test_a_key_without_a_secret_shows_no_signature_headers(conn):
    cust, key = new_customer(webhook_url=URL)
    outbox.send_test_event(key.id, cust.id)
    [entry] = delivery_console.key_deliveries(key.id, cust.id).items
    names = {name for name, _ in entry["request"]["headers"]}
    assert "X-Service-Signature" not in names and "webhook-signature" not in names
    assert {"X-Service-Event", "X-Service-Delivery", "webhook-id", "User-Agent"} <= names


def test_filters_and_ownership(conn):
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    outbox.send_test_event(key.id, cust.id)
    assert delivery_console.key_deliveries(key.id, cust.id, status="failed").total == 0
    assert delivery_console.key_deliveries(key.id, cust.id, event="scan.completed").total == 1
    with pytest.raises(LookupError):
        delivery_console.key_deliveries(key.id, new_customer()[0].id)
