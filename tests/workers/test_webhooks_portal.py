"""The webhook services behind the key's management page (D12): the URL and secret,
secret rotation, test events, redelivery and the delivery log. Only the owner may
touch a key or delivery: anyone else gets ``LookupError`` (the portal's 404)."""
from __future__ import annotations

import json

import pytest
from freezegun import freeze_time

from app.plumbing.errors import AccountError, DeliveryPending
from app.webhooks import delivery_log, key_settings, outbox
from app.webhooks.models import WebhookDelivery

SECRET = "whsec_cG9ydGFsIHNlY3JldCAwMTIzNDU2Nzg5"
START = "2026-11-21 12:00:00"


@pytest.fixture
def receiver(sim_receiver):
    """A fresh receiver: ``(hook URL, function listing what it received)``."""
    def make(responses=(200,), secret=SECRET):
        return sim_receiver(secret, responses)
    return make


@pytest.fixture
def other(make_customer):
    return make_customer(name="Someone else")


def final(delivery_id: str) -> bool:
    return WebhookDelivery.get_by_id(delivery_id).status != "pending"


# --- test events ----------------------------------------------------------------------------


def test_a_test_event_is_a_signed_scan_completed_marked_test(make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded" and delivery.scan_id is None
    [got] = received()
    body = json.loads(got["body"])
    assert got["signature_valid"] and got["headers"]["X-Service-Event"] == "scan.completed"
    assert body["test"] is True and body["event"] == "scan.completed" and body["status"] == "completed"
    assert body["scan_id"].startswith("scn_test_")
    assert set(body["result"]) == {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile",
                                   "ai_summary", "artifacts", "sources", "coverage", "partial", "findings", "match"}


# --- redelivery -----------------------------------------------------------------------------


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0,))
def test_redelivery_starts_a_new_series_to_the_current_url(make_customer, receiver, jobs):
    old_url, old_received = receiver(responses=[500])
    new_url, new_received = receiver(responses=[500, 200])
    account = make_customer(webhook_url=old_url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
        assert jobs.run(frozen, until=lambda: final(delivery.id))
        failed = WebhookDelivery.get_by_id(delivery.id)
        assert (failed.status, failed.attempts) == ("failed", 2)

        key_settings.set_webhook(account.key.id, account.customer.id, new_url)
        frozen.tick(3600)
        again = delivery_log.redeliver(delivery.id, account.customer.id)
        assert (again.id, again.status, again.body) == (delivery.id, "pending", failed.body)
        with pytest.raises(DeliveryPending, match="pending"):
            delivery_log.redeliver(delivery.id, account.customer.id)  # pending again already
        assert jobs.run(frozen, until=lambda: final(delivery.id))

    done = WebhookDelivery.get_by_id(delivery.id)
    assert (done.status, done.attempts, done.series_start, done.url) == ("succeeded", 4, 2, new_url)
    assert len(old_received()) == 2
    second_series = new_received()
    assert [d["response_status"] for d in second_series] == [500, 200]
    assert {d["body"] for d in second_series} == {failed.body}
    assert {d["headers"]["X-Service-Delivery"] for d in second_series} == {delivery.id}
    log = delivery_log.list_deliveries(account.key.id, account.customer.id).items[0]["attempts"]
    assert [(a["number"], a["url"], a["outcome"]) for a in log] == [
        (4, new_url, "succeeded"), (3, new_url, "failed"), (2, old_url, "failed"), (1, old_url, "failed")]


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_a_pending_delivery_is_not_redelivered_a_succeeded_one_is(make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    with pytest.raises(DeliveryPending, match="pending"):
        delivery_log.redeliver(delivery.id, account.customer.id)  # pending
    jobs.run()
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"
    again = delivery_log.redeliver(delivery.id, account.customer.id)
    assert (again.status, again.series_start) == ("pending", 1)
    jobs.run()
    assert (WebhookDelivery.get_by_id(delivery.id).status, len(received())) == ("succeeded", 2)


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redelivery_needs_a_webhook_url(make_customer, receiver, jobs):
    url, _ = receiver(responses=[500])
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    key_settings.set_webhook(account.key.id, account.customer.id, None)
    with pytest.raises(AccountError, match="no webhook URL"):
        delivery_log.redeliver(delivery.id, account.customer.id)
    assert WebhookDelivery.get_by_id(delivery.id).status == "failed"


# --- the delivery log -----------------------------------------------------------------------


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_the_delivery_log_is_newest_first_filtered_and_paged(client, make_customer, receiver, jobs):
    url, _ = receiver(responses=[200, 500])
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        ok = outbox.send_test_event(account.key.id, account.customer.id)
        jobs.run()
        frozen.tick(1)
        scan_id = client.post("/api/v1/scan", json={"target": "fail.me@example.com"},
                              headers=account.headers).json["scan_id"]
        assert jobs.run(frozen, until=lambda: WebhookDelivery.select()
                        .where(WebhookDelivery.scan_id == scan_id, WebhookDelivery.status == "failed").exists())

    page = delivery_log.list_deliveries(account.key.id, account.customer.id)
    assert (page.total, page.page, page.pages) == (2, 1, 1)
    newest, oldest = page.items
    assert (newest["scan_id"], newest["event"], newest["status"], newest["test"]) == (
        scan_id, "scan.failed", "failed", False)
    assert newest["can_redeliver"] is True and newest["attempts"][0]["status_code"] == 500
    assert (oldest["delivery_id"], oldest["status"], oldest["test"]) == (ok.id, "succeeded", True)
    assert oldest["attempts"][0]["response_excerpt"] == '{"status":200}\n'

    only = delivery_log.list_deliveries
    assert [d["delivery_id"] for d in only(account.key.id, account.customer.id, status="succeeded").items] == [ok.id]
    assert [d["scan_id"] for d in only(account.key.id, account.customer.id, event="scan.failed").items] == [scan_id]
    assert only(account.key.id, account.customer.id, status="failed", event="scan.completed").items == []
    second = only(account.key.id, account.customer.id, page=2, per_page=1)
    assert (second.total, second.pages, [d["delivery_id"] for d in second.items]) == (2, 2, [ok.id])
