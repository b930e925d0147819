"""delivery_log: a key's and a scan's deliveries, the API's list of them, and redelivery."""


import pytest
from freezegun import freeze_time

from app.accounts.models import ApiKey
from app.plumbing import runtime
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import DeliveryNotFound, DeliveryPending, InvalidRequest, WebhookUrlMissing
from app.plumbing.jobs import live_job_ids
from app.tracking import states
from app.webhooks import deliveries, delivery_log, key_settings, outbox, signing_secrets
from app.webhooks.deliveries import Outcome
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan
from tests.webhooks.conftest import NOW, PORTAL_SECRET, RESULT, SECRET, URL


def _attempt(delivery, status_code):
    """One attempt of the delivery's current job, recorded with ``status_code`` (no HTTP here)."""
    attempt = deliveries.start_attempt(delivery.id, WebhookDelivery.get_by_id(delivery.id).job_id)
    return deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=status_code))


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redelivery_starts_a_new_series_to_the_keys_current_url(hooked):
    cust, key = hooked
    delivery = outbox.send_test_event(key.id, cust.id)
    with pytest.raises(DeliveryPending):  # its own attempts are still to come
        delivery_log.redeliver(delivery.id, cust.id)
    assert _attempt(delivery, 500) == "failed"
    key_settings.set_webhook(key.id, cust.id, "https://hooks.example.com/new")
    again = delivery_log.redeliver(delivery.id, cust.id)
    assert (again.status, again.series_start, again.url, again.body) == (
        "pending", 1, "https://hooks.example.com/new", delivery.body)
    assert again.job_id.endswith("-2") and live_job_ids([again.job_id]) == {again.job_id}
    with pytest.raises(DeliveryPending):
        delivery_log.redeliver(delivery.id, cust.id)


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redelivery_refusals(hooked):
    cust, key = hooked
    delivery = outbox.send_test_event(key.id, cust.id)
    _attempt(delivery, 200)
    with pytest.raises(DeliveryNotFound):
        delivery_log.redeliver(delivery.id, new_customer()[0].id)
    with pytest.raises(DeliveryNotFound):
        delivery_log.redeliver(delivery.id, cust.id, livemode=False)  # a test key sees test deliveries only
    with pytest.raises(DeliveryNotFound):
        delivery_log.redeliver("dlv\x00x", cust.id)
    key_settings.set_webhook(key.id, cust.id, None)
    with pytest.raises(WebhookUrlMissing):
        delivery_log.redeliver(delivery.id, cust.id)
    assert delivery_log.delivery_owner(delivery.id) == cust.id
    with pytest.raises(DeliveryNotFound):
        delivery_log.delivery_owner("dlv_unknown")


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_the_keys_deliveries_page_newest_first_with_filters(conn, monkeypatch):
    monkeypatch.setitem(runtime.config, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 100)
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        made = []
        for _ in range(3):
            made.append(outbox.send_test_event(key.id, cust.id))
            frozen.tick(1)
        _attempt(made[0], 500)
        page = delivery_log.list_deliveries(key.id, cust.id, per_page=2)
        assert [d["delivery_id"] for d in page.items] == [made[2].id, made[1].id] and page.total == 3
        [failed] = delivery_log.list_deliveries(key.id, cust.id, status="failed").items
        assert failed["delivery_id"] == made[0].id and failed["can_redeliver"] is True
        assert [a["status_code"] for a in failed["attempts"]] == [500]
        assert delivery_log.list_deliveries(key.id, cust.id, event="scan.failed").total == 0
        with pytest.raises(LookupError):
            delivery_log.list_deliveries(key.id, new_customer()[0].id)


def test_a_scans_deliveries_are_the_customers_only(hooked):
    cust, key = hooked
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    [entry] = delivery_log.scan_deliveries(scan.id, cust.id)
    assert (entry["event"], entry["status"], entry["key_id"]) == ("scan.completed", "pending", key.id)
    assert delivery_log.scan_deliveries(scan.id, new_customer()[0].id) == []


def test_the_api_list_of_deliveries_pages_by_cursor_per_mode(conn, monkeypatch):
    monkeypatch.setitem(runtime.config, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 100)
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        test_key, _ = key_settings.issue_key(cust.id, "sandbox", URL, livemode=False)
        made = []
        for _ in range(3):
            made.append(outbox.send_test_event(key.id, cust.id))
            frozen.tick(1)
        outbox.send_test_event(test_key.id, cust.id)
    page, more = delivery_log.customer_deliveries(cust.id, limit=2)
    assert [d["delivery_id"] for d in page] == [made[2].id, made[1].id] and more is True
    assert page[0]["body"] == made[2].body and page[0]["attempts"] == []
    rest, more = delivery_log.customer_deliveries(cust.id, limit=2, starting_after=made[1].id)
    assert [d["delivery_id"] for d in rest] == [made[0].id] and more is False
    tests, _ = delivery_log.customer_deliveries(cust.id, livemode=False)
    assert len(tests) == 1 and tests[0]["livemode"] is False
    assert delivery_log.customer_deliveries(cust.id, scan_id="x" * 41) == ([], False)


@pytest.mark.parametrize("kwargs", [{"status": "lost"}, {"event": "scan.started"}, {"limit": 0}, {"limit": 101},
                                    {"starting_after": "dlv_unknown"}, {"starting_after": "dlv\x00"}])
def test_a_bad_filter_of_the_api_list_is_an_invalid_request(hooked, kwargs):
    cust, _ = hooked
    with pytest.raises(InvalidRequest):
        delivery_log.customer_deliveries(cust.id, **kwargs)


def test_another_customers_key_or_delivery_is_not_found(conn):
    url = URL
    cust, key = new_customer(webhook_url=url, webhook_secret=PORTAL_SECRET)
    other, _ = new_customer()
    delivery = outbox.send_test_event(key.id, cust.id)
    for call in (lambda: key_settings.set_webhook(key.id, other.id, url, PORTAL_SECRET),
                 lambda: signing_secrets.generate_secret(key.id, other.id),
                 lambda: outbox.send_test_event(key.id, other.id),
                 lambda: delivery_log.list_deliveries(key.id, other.id),
                 lambda: delivery_log.redeliver(delivery.id, other.id),
                 lambda: delivery_log.redeliver("dlv_unknown", cust.id)):
        with pytest.raises(LookupError):
            call()
    assert decrypt_secret(ApiKey.get_by_id(key.id).webhook_secret_enc) == PORTAL_SECRET


