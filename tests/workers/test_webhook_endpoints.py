"""Webhook endpoints end to end (D22): real scans on the simulated engine, deliveries over HTTP to
the simulator's receivers, jobs run on frozen time. Fan-out to each enabled endpoint that lists
the event (own delivery id, body and signature), ``scan.running``, auto-disable and recovery."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts.models import ApiKey
from app.plumbing import metrics
from app.webhooks import endpoints, outbox
from app.webhooks.models import WebhookDelivery
from tests.workers.test_webhooks import SECRET, is_final, receiver, start_scan  # noqa: F401 - fixtures

OTHER_SECRET = "whsec_b3RoZXIgcmVjZWl2ZXIgc2VjcmV0IDAxMjM0NTY="
START = "2026-11-21 12:00:00"


def key_of(account) -> ApiKey:
    return ApiKey.get_by_id(account.key.id)


def deliveries_of(scan_id: str) -> list[WebhookDelivery]:
    return list(WebhookDelivery.select().where(WebhookDelivery.scan_id == scan_id).order_by(WebhookDelivery.event))


def all_final(scan_id: str, count: int) -> bool:
    rows = deliveries_of(scan_id)
    return len(rows) == count and all(d.status != "pending" for d in rows)


def test_an_event_goes_to_each_enabled_endpoint_that_lists_it(client, make_customer, receiver, jobs):  # noqa: F811
    first, thin, off, running_only = receiver(), receiver(secret=OTHER_SECRET), receiver(), receiver()
    account = make_customer(webhook_url=first.url, webhook_secret=SECRET)
    key = key_of(account)
    second, _ = endpoints.create(key, url=thin.url, payload="thin", secret=OTHER_SECRET)
    endpoints.create(key, url=off.url, enabled=False)
    endpoints.create(key, url=running_only.url, events=["scan.running"])
    with freeze_time(START) as frozen:
        scan_id = start_scan(client, account)
        assert jobs.run(frozen, until=lambda: all_final(scan_id, 3))
        jobs.run(frozen)

    [got_first], [got_thin] = first.deliveries(), thin.deliveries()
    assert off.deliveries() == []
    full, slim = json.loads(got_first["body"]), json.loads(got_thin["body"])
    assert full["event"] == slim["event"] == "scan.completed" and full["scan_id"] == slim["scan_id"] == scan_id
    assert "target" in full and "result" in full and "target" not in slim and "result" not in slim
    assert got_first["signature_valid"] is True and got_thin["signature_valid"] is True
    # Each signed with its own endpoint's secret (the receivers check with the one they were given).
    assert got_first["headers"]["X-Service-Delivery"] != got_thin["headers"]["X-Service-Delivery"]
    by_endpoint = {d.endpoint_id: d for d in deliveries_of(scan_id) if d.event == "scan.completed"}
    assert set(by_endpoint) == {outbox.first_endpoint_id(key.id), second["endpoint_id"]}
    # scan.running went only to the endpoint that lists it, once.
    [running] = running_only.deliveries()
    body = json.loads(running["body"])
    assert (body["event"], body["scan_id"], body["status"]) == ("scan.running", scan_id, "running")
    assert [d.event for d in deliveries_of(scan_id)].count("scan.running") == 1

    listed = client.get(f"/api/v1/deliveries?endpoint_id={second['endpoint_id']}", headers=account.headers).json
    assert [(d["endpoint_id"], d["scan_id"]) for d in listed["data"]] == [(second["endpoint_id"], scan_id)]


def fail_one_scan(client, account, jobs, frozen) -> None:
    scan_id = start_scan(client, account)
    assert jobs.run(frozen, until=lambda: is_final(scan_id) and all_final(scan_id, len(deliveries_of(scan_id))))


def delivered_events(hook) -> list[tuple[str, str]]:
    return [(json.loads(d["body"])["event"], d["headers"]["X-Service-Delivery"]) for d in hook.deliveries()]


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(), WEBHOOK_DISABLE_AFTER_HOURS=120)
def test_an_endpoint_failing_for_days_is_disabled_skipped_recovered(client, make_customer, receiver, jobs):  # noqa: F811
    down, healthy = receiver(responses=[500]), receiver(secret=OTHER_SECRET)
    account = make_customer(webhook_url=down.url, webhook_secret=SECRET, credits=500)
    first_id = outbox.first_endpoint_id(account.key.id)
    endpoints.create(key_of(account), url=healthy.url, secret=OTHER_SECRET,
                     events=["scan.completed", "endpoint.disabled"])
    disabled_before = metrics.ENDPOINTS_DISABLED._value.get()
    with freeze_time(START) as frozen:
        # 11 failures, one every 11 hours: the last 110 hours after the first, still enabled.
        for _ in range(11):
            fail_one_scan(client, account, jobs, frozen)
            frozen.tick(timedelta(hours=11))
        assert endpoints.read(key_of(account), first_id)["enabled"] is True
        fail_one_scan(client, account, jobs, frozen)  # 121 hours after the first failure: disabled
        state = endpoints.read(key_of(account), first_id)
        assert state["enabled"] is False and state["disabled_at"].startswith("2026-11-26T13:0")
        jobs.run(frozen)
        notices = [e for e, _ in delivered_events(healthy) if e == "endpoint.disabled"]
        assert notices == ["endpoint.disabled"]
        assert metrics.ENDPOINTS_DISABLED._value.get() == disabled_before + 1

        # Later events to it are recorded as skipped, never sent.
        sent_before = len(down.deliveries())
        skipped_scan = start_scan(client, account)
        assert jobs.run(frozen, until=lambda: all_final(skipped_scan, 2))
        skipped = [d for d in deliveries_of(skipped_scan) if d.endpoint_id == first_id]
        assert [d.status for d in skipped] == ["skipped"] and len(down.deliveries()) == sent_before

        # Enabled again, with the receiver back: recover sends each failed or skipped one once, oldest first.
        down.configure(responses=[200])  # configuring a receiver starts its log afresh
        endpoints.update(key_of(account), first_id, enabled=True)
        frozen.tick(timedelta(minutes=1))
        window = list(WebhookDelivery.select().where((WebhookDelivery.endpoint_id == first_id)
                                                     & WebhookDelivery.status.in_(("failed", "skipped")))
                      .order_by(WebhookDelivery.created_at))
        assert len(window) == 13
        queued = endpoints.recover(key_of(account), first_id, since=datetime(2026, 11, 21))
        assert queued == 13
        jobs.run(frozen)
        assert endpoints.recover(key_of(account), first_id, since=datetime(2026, 11, 21)) == 0  # nothing left
        jobs.run(frozen)
    received = [d["headers"]["X-Service-Delivery"] for d in down.deliveries()]
    assert received == [d.id for d in window]  # each once, oldest first
