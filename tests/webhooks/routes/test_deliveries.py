"""The webhook deliveries API (D17): the customer's deliveries, newest first, filtered and
paged by cursor, and redelivery; charged like any call (D3), scoped to the customer."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.errors import from_service_error
from app.plumbing.errors import AccountError, DeliveryNotFound, DeliveryPending, WebhookUrlMissing
from app.plumbing.signatures import verify_signature, verify_standard
from app.webhooks import delivery_log, key_settings, outbox
from app.webhooks.models import WebhookDelivery
from tests.api.helpers import balance

SECRET = "whsec_ZGVsaXZlcmllcyBhcGkgc2VjcmV0IDAxMjM0NQ=="
START = "2026-11-21 12:00:00"


@pytest.fixture
def receiver(sim_receiver):
    def make(responses=(200,)):
        return sim_receiver(SECRET, responses)
    return make


def final(delivery_id: str) -> bool:
    return WebhookDelivery.get_by_id(delivery_id).status != "pending"


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(30,))
def test_the_list_is_the_customers_newest_first_with_attempts_and_the_exact_body(
        client, make_customer, receiver, jobs):
    url, _ = receiver(responses=[200, 500])
    account = make_customer(webhook_url=url, webhook_secret=SECRET, credits=50)
    other = make_customer(webhook_url=url, webhook_secret=SECRET, name="Other")
    with freeze_time(START) as frozen:
        ok = outbox.send_test_event(account.key.id, account.customer.id)
        jobs.run()
        frozen.tick(1)
        scan_id = client.post("/api/v1/scan", json={"target": "fail.me@example.com"},
                              headers=account.headers).json["scan_id"]
        assert jobs.run(frozen, until=lambda: WebhookDelivery.select().where(
            WebhookDelivery.scan_id == scan_id, WebhookDelivery.attempts == 1).exists())
        theirs = outbox.send_test_event(other.key.id, other.customer.id)
        before = balance(account)
        r = client.get("/api/v1/deliveries", headers=account.headers)

    assert r.status_code == 200, r.json
    assert balance(account) == before - 1 and r.headers["X-Credits-Remaining"] == str(before - 1)
    assert r.json["ok"] is True and r.json["has_more"] is False
    newest, oldest = r.json["data"]
    assert theirs.id not in {newest["delivery_id"], oldest["delivery_id"]}
    assert (newest["event"], newest["scan_id"], newest["status"]) == ("scan.failed", scan_id, "pending")
    [attempt] = newest["attempts"]
    assert (attempt["attempt"], attempt["http_status"], attempt["error"]) == (1, 500, None)
    assert attempt["outcome"] == "failed"
    assert isinstance(attempt["duration_ms"], int)
    at = datetime.strptime(attempt["at"], "%Y-%m-%dT%H:%M:%SZ")
    assert newest["next_attempt_at"] == (at + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert newest["body"] == WebhookDelivery.get_by_id(newest["delivery_id"]).body
    assert json.loads(newest["body"])["scan_id"] == scan_id
    assert (oldest["delivery_id"], oldest["status"], oldest["scan_id"]) == (ok.id, "succeeded", None)
    assert oldest["next_attempt_at"] is None  # finished: no next attempt
    assert list(newest) == ["delivery_id", "endpoint_id", "event", "scan_id", "livemode", "status", "created_at",
                            "attempts", "next_attempt_at", "body"]


def test_filters_and_cursor_pages(client, make_customer, receiver, jobs):
    url, _ = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET, credits=50)
    with freeze_time(START) as frozen:
        ids = []
        for _ in range(3):
            ids.append(outbox.send_test_event(account.key.id, account.customer.id).id)
            frozen.tick(1)
        jobs.run()
        pending = outbox.send_test_event(account.key.id, account.customer.id).id  # its job not run
    ids.append(pending)

    def listed(**query):
        r = client.get("/api/v1/deliveries", query_string=query, headers=account.headers)
        assert r.status_code == 200, r.json
        return [d["delivery_id"] for d in r.json["data"]], r.json["has_more"]

    assert listed() == (ids[::-1], False)
    assert listed(limit=2) == ([ids[3], ids[2]], True)
    assert listed(limit=2, starting_after=ids[2]) == ([ids[1], ids[0]], False)
    assert listed(limit=1, starting_after=ids[1]) == ([ids[0]], False)
    assert listed(status="pending") == ([pending], False)
    assert listed(status="succeeded", limit=2) == ([ids[2], ids[1]], True)
    assert listed(event="scan.failed") == ([], False)
    assert listed(scan_id="scn_none") == ([], False)


@pytest.mark.parametrize("query, field", [
    ({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"limit": "x"}, "limit"),
    ({"status": "done"}, "status"), ({"event": "scan.started"}, "event"),
])
def test_a_bad_query_is_a_400_with_details(client, account, query, field):
    r = client.get("/api/v1/deliveries", query_string=query, headers=account.headers)
    assert r.status_code == 400 and r.json["ok"] is False and r.json["error"] == "invalid_request"
    assert field in json.dumps(r.json["details"])


def test_a_cursor_of_another_customer_is_refused(client, make_customer, receiver):
    url, _ = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    other = make_customer(webhook_url=url, webhook_secret=SECRET, name="Other")
    theirs = outbox.send_test_event(other.key.id, other.customer.id)
    for cursor in (theirs.id, "dlv_unknown", "dlv_\x00"):
        r = client.get("/api/v1/deliveries", query_string={"starting_after": cursor}, headers=account.headers)
        assert r.status_code == 400 and r.json["error"] == "invalid_request"
        assert "starting_after" in r.json["message"]


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redeliver_sends_the_same_delivery_again_signed_anew(client, make_customer, receiver, jobs):
    url, received = receiver(responses=[500, 200])
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
        jobs.run()
        assert WebhookDelivery.get_by_id(delivery.id).status == "failed"
        frozen.tick(600)
        before = balance(account)
        r = client.post(f"/api/v1/deliveries/{delivery.id}/redeliver", headers=account.headers)
        assert r.status_code == 202, r.json
        assert balance(account) == before - 1
        assert (r.json["ok"], r.json["delivery_id"], r.json["status"]) == (True, delivery.id, "pending")
        assert r.json["body"] == delivery.body and len(r.json["attempts"]) == 1
        jobs.run()
        first, second = received()
        assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"
        assert first["body"] == second["body"] == delivery.body
        assert second["headers"]["Webhook-Id"] == delivery.id
        assert int(second["headers"]["Webhook-Timestamp"]) - int(first["headers"]["Webhook-Timestamp"]) == 600
        raw = second["body"].encode()
        assert verify_signature(SECRET, raw, second["headers"]["X-Service-Signature"])
        assert verify_standard(SECRET, raw, second["headers"])

        r = client.post(f"/api/v1/deliveries/{delivery.id}/redeliver", headers=account.headers)
        assert r.status_code == 202  # a succeeded delivery too


def test_redeliver_pending_is_409_free_and_another_customers_is_404(client, make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    other = make_customer(webhook_url=url, webhook_secret=SECRET, name="Other")
    pending = outbox.send_test_event(account.key.id, account.customer.id)
    before = balance(account)
    r = client.post(f"/api/v1/deliveries/{pending.id}/redeliver", headers=account.headers)
    assert r.status_code == 409 and r.json["error"] == "delivery_pending"
    assert balance(account) == before

    jobs.run()
    count = len(received())
    r = client.post(f"/api/v1/deliveries/{pending.id}/redeliver", headers=other.headers)
    assert r.status_code == 404 and r.json["error"] == "not_found"
    r = client.post("/api/v1/deliveries/dlv_unknown/redeliver", headers=other.headers)
    assert r.status_code == 404
    assert WebhookDelivery.get_by_id(pending.id).status == "succeeded"
    assert client.get("/api/v1/deliveries", headers=other.headers).json["data"] == []
    jobs.run()
    assert len(received()) == count


def test_redeliver_needs_auth_and_a_webhook_url(client, make_customer, receiver, jobs):
    url, _ = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    assert client.post(f"/api/v1/deliveries/{delivery.id}/redeliver").status_code == 401
    key_settings.set_webhook(account.key.id, account.customer.id, None)
    r = client.post(f"/api/v1/deliveries/{delivery.id}/redeliver", headers=account.headers)
    assert r.status_code == 400 and r.json["error"] == "webhook_url_missing"
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"


def test_the_endpoints_are_in_the_openapi_document(client):
    spec = client.get("/api/v1/openapi.json").json
    listing = spec["paths"]["/api/v1/deliveries"]["get"]
    redeliver = spec["paths"]["/api/v1/deliveries/{delivery_id}/redeliver"]["post"]
    assert (listing["operationId"], redeliver["operationId"]) == ("listDeliveries", "redeliverDelivery")
    assert listing["tags"] == redeliver["tags"] == ["deliveries"]
    assert {p["name"] for p in listing["parameters"]} >= {"status", "event", "scan_id", "limit", "starting_after"}
    assert listing["responses"]["200"]["content"]["application/json"]["example"]["data"][0]["attempts"]
    assert redeliver["responses"]["202"]["content"]["application/json"]["example"]["ok"] is True
    assert {"404", "409"} <= set(redeliver["responses"])
    assert "deliveries" in {t["name"] for t in spec["tags"]}
    for operation in (listing, redeliver):
        for status, response in operation["responses"].items():
            if status.isdigit() and int(status) >= 400:
                examples = response["content"]["application/json"]["examples"]
                assert examples, status
                for code, example in examples.items():
                    assert example["value"]["error"] == code and f"`{code}`" in response["description"]
    assert set(redeliver["responses"]["409"]["content"]["application/json"]["examples"]) == {"delivery_pending",
                                                                                        "delivery_erased"}


def test_the_service_raises_domain_errors_the_portal_and_cli_still_catch(make_customer, receiver, jobs):
    url, _ = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    other = make_customer(webhook_url=url, webhook_secret=SECRET, name="Other")
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    with pytest.raises(DeliveryPending) as pending:
        delivery_log.redeliver(delivery.id, account.customer.id)
    jobs.run()
    with pytest.raises(DeliveryNotFound) as missing:
        delivery_log.redeliver(delivery.id, other.customer.id)
    key_settings.set_webhook(account.key.id, account.customer.id, None)
    with pytest.raises(WebhookUrlMissing) as no_url:
        delivery_log.redeliver(delivery.id, account.customer.id)
    # One table maps them for the API; the portal and the CLI catch LookupError / AccountError.
    assert [(e.status, e.error) for e in map(from_service_error, (missing.value, pending.value, no_url.value))] \
        == [(404, "not_found"), (409, "delivery_pending"), (400, "webhook_url_missing")]
    assert isinstance(missing.value, LookupError)
    assert isinstance(pending.value, AccountError) and isinstance(no_url.value, AccountError)
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"


def test_an_attempt_in_flight_says_so(client, make_customer, receiver):
    """An attempt whose request is under way (its row is written before the request) reads as
    `in_progress`, not as an attempt with every field null."""
    from app.extensions import db
    from app.webhooks import deliveries
    url, _ = receiver()
    account = make_customer(webhook_url=url)
    with db.connection_context():
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
        started = deliveries.start_attempt(delivery.id, delivery.job_id)  # claimed: the request would go now
    assert not isinstance(started, str), started
    [entry] = client.get("/api/v1/deliveries", headers=account.headers).json["data"]
    [attempt] = entry["attempts"]
    assert attempt["outcome"] == "in_progress"
    assert (attempt["http_status"], attempt["error"], attempt["duration_ms"]) == (None, None, None)
    assert entry["status"] == "pending"
