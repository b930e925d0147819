"""webhooks: the event of a final scan, the key's webhook settings (URL, secrets, rolling
rotation), test events within their limit, redeliveries, the signed headers of an attempt
(D16), and the customer's deliveries as the portal and the API list them (D12, D17)."""
import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from rq.registry import ScheduledJobRegistry
from standardwebhooks import Webhook

from app.accounts import admin
from app.accounts.models import ApiKey
from app.plumbing import runtime
from app.plumbing.crypto import decrypt_secret
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError, DeliveryNotFound, DeliveryPending, InvalidRequest, WebhookUrlMissing
from app.plumbing.jobs import WEBHOOK_QUEUE, live_job_ids, queue
from app.plumbing.models import utcnow
from app.plumbing.signatures import SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER, verify_signature, verify_standard
from app.tracking import states
from app.webhooks import deliveries, outbox
from app.webhooks.deliveries import Outcome
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan

URL = "https://hooks.example.com/x"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="  # 16 bytes
NOW = datetime(2026, 11, 22, 12, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}}


@pytest.fixture
def hooked(conn):
    return new_customer(webhook_url=URL, webhook_secret=SECRET)


def _attempt(delivery, status_code):
    """One attempt of the delivery's current job, recorded with ``status_code`` (no HTTP here)."""
    attempt = deliveries.start_attempt(delivery.id, WebhookDelivery.get_by_id(delivery.id).job_id)
    return deliveries.record(attempt.delivery, attempt.row, Outcome(status_code=status_code))


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


def test_a_thin_key_sends_no_personal_data(hooked):
    cust, key = hooked
    outbox.set_payload(key.id, cust.id, "thin")
    done, failed = new_scan(cust, key), new_scan(cust, key, "fail.me@example.com")
    states.complete(done.id, RESULT)
    states.fail(failed.id, "engine_failed", "the engine could not finish jane@example.com")
    bodies = {json.loads(d.body)["event"]: json.loads(d.body) for d in WebhookDelivery.select()}
    assert list(bodies["scan.completed"]) == ["event", "scan_id", "livemode", "status", "purpose", "case_ref",
                                              "completed_at"]
    assert list(bodies["scan.failed"]) == ["event", "scan_id", "livemode", "status", "purpose", "case_ref",
                                           "failed_at"]
    assert "jane" not in json.dumps(bodies) and "fail.me" not in json.dumps(bodies)
    with pytest.raises(AccountError):
        outbox.set_payload(key.id, cust.id, "medium")
    outbox.set_payload(key.id, cust.id, "full")  # later events carry everything again
    again = new_scan(cust, key)
    states.complete(again.id, RESULT)
    assert json.loads(WebhookDelivery.get(WebhookDelivery.scan_id == again.id).body)["result"] == RESULT


def test_no_event_for_a_key_without_a_url(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    assert outbox.record_event(type(scan).get_by_id(scan.id)) is None


@pytest.mark.parametrize("secret", ["whsec_", "sk_abc", "whsec_" + "A" * 20, "whsec_" + "QUJD" * 5 + "!",
                                    "whsec_QUJDRA==", "whsec_" + "QUFB" * 44])
def test_a_hand_set_secret_must_be_whsec_and_16_to_128_bytes_of_base64(secret):
    with pytest.raises(AccountError):
        outbox.check_secret(secret)


def test_a_valid_secret_is_accepted_as_given():
    assert outbox.check_secret(SECRET) == SECRET


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


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redelivery_starts_a_new_series_to_the_keys_current_url(hooked):
    cust, key = hooked
    delivery = outbox.send_test_event(key.id, cust.id)
    with pytest.raises(DeliveryPending):  # its own attempts are still to come
        outbox.redeliver(delivery.id, cust.id)
    assert _attempt(delivery, 500) == "failed"
    outbox.set_webhook(key.id, cust.id, "https://hooks.example.com/new")
    again = outbox.redeliver(delivery.id, cust.id)
    assert (again.status, again.series_start, again.url, again.body) == (
        "pending", 1, "https://hooks.example.com/new", delivery.body)
    assert again.job_id.endswith("-2") and live_job_ids([again.job_id]) == {again.job_id}
    with pytest.raises(DeliveryPending):
        outbox.redeliver(delivery.id, cust.id)


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redelivery_refusals(hooked):
    cust, key = hooked
    delivery = outbox.send_test_event(key.id, cust.id)
    _attempt(delivery, 200)
    with pytest.raises(DeliveryNotFound):
        outbox.redeliver(delivery.id, new_customer()[0].id)
    with pytest.raises(DeliveryNotFound):
        outbox.redeliver(delivery.id, cust.id, livemode=False)  # a test key sees test deliveries only
    with pytest.raises(DeliveryNotFound):
        outbox.redeliver("dlv\x00x", cust.id)
    outbox.set_webhook(key.id, cust.id, None)
    with pytest.raises(WebhookUrlMissing):
        outbox.redeliver(delivery.id, cust.id)
    assert outbox.delivery_owner(delivery.id) == cust.id
    with pytest.raises(DeliveryNotFound):
        outbox.delivery_owner("dlv_unknown")


def test_delivery_headers_carry_both_signatures_that_receivers_verify(conn):
    with freeze_time(NOW):
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        delivery = outbox.send_test_event(key.id, cust.id)
        body = delivery.body.encode()
        headers = outbox.delivery_headers(delivery, body, NOW)
        assert verify_signature(SECRET, body, headers[SIGNATURE_HEADER])
        assert verify_standard(SECRET, body, headers)
        assert not verify_standard("whsec_" + "QUJD" * 8, body, headers)
    assert headers["X-Service-Timestamp"] == str(int(NOW.replace(tzinfo=UTC).timestamp()) * 1000)
    assert (headers["X-Service-Event"], headers["X-Service-Delivery"], headers["webhook-id"]) == (
        "scan.completed", delivery.id, delivery.id)
    assert headers["webhook-timestamp"] == str(int(headers["X-Service-Timestamp"]) // 1000)


def test_a_key_without_a_secret_sends_no_signature(conn):
    cust, key = new_customer(webhook_url=URL)
    delivery = outbox.send_test_event(key.id, cust.id)
    headers = outbox.delivery_headers(delivery, delivery.body.encode(), NOW)
    assert SIGNATURE_HEADER not in headers and STANDARD_SIGNATURE_HEADER not in headers


def test_a_rolling_rotation_signs_with_both_until_the_switch(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        rolled = outbox.roll_secret(key.id, cust.id, overlap_hours=2)
        assert rolled.overlapping and rolled.switch_at == NOW + timedelta(hours=2)
        with pytest.raises(AccountError, match="already under way"):
            outbox.roll_secret(key.id, cust.id)
        delivery = outbox.send_test_event(key.id, cust.id)
        body = delivery.body.encode()
        headers = outbox.delivery_headers(delivery, body, NOW)
        assert verify_signature(SECRET, body, headers[SIGNATURE_HEADER])  # the current one, still
        assert verify_standard(SECRET, body, headers) and verify_standard(rolled.secret, body, headers)
        assert outbox.secret_state(ApiKey.get_by_id(key.id))["rotating"] is True
        frozen.tick(timedelta(hours=2))
        later = datetime(2026, 11, 22, 14, 0, 0)
        headers = outbox.delivery_headers(delivery, body, later)  # the overlap is over: switched lazily
        assert verify_signature(rolled.secret, body, headers[SIGNATURE_HEADER])
        assert not verify_standard(SECRET, body, headers)
        assert outbox.secret_state(ApiKey.get_by_id(key.id)) == {"has_secret": True, "rotating": False,
                                                                   "switch_at": None}


def test_switching_ends_a_rotation_at_once_and_needs_one(hooked):
    cust, key = hooked
    with pytest.raises(AccountError, match="no secret rotation"):
        outbox.switch_secret(key.id, cust.id)
    rolled = outbox.roll_secret(key.id, None, overlap_hours=24)  # None: the operator, any key
    switched = outbox.switch_secret(key.id, cust.id)
    assert decrypt_secret(switched.webhook_secret_enc) == rolled.secret
    assert switched.webhook_next_secret_enc is None


def test_an_overlap_of_zero_replaces_the_secret_at_once(hooked):
    cust, key = hooked
    rolled = outbox.roll_secret(key.id, cust.id, overlap_hours=0)
    assert rolled.overlapping is False
    assert decrypt_secret(ApiKey.get_by_id(key.id).webhook_secret_enc) == rolled.secret


def test_rolling_another_customers_key_is_refused(hooked):
    _, key = hooked
    with pytest.raises(LookupError):
        outbox.roll_secret(key.id, new_customer()[0].id)
    with pytest.raises(LookupError):
        outbox.roll_secret("key\x00", None)


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
        page = outbox.list_deliveries(key.id, cust.id, per_page=2)
        assert [d["delivery_id"] for d in page.items] == [made[2].id, made[1].id] and page.total == 3
        [failed] = outbox.list_deliveries(key.id, cust.id, status="failed").items
        assert failed["delivery_id"] == made[0].id and failed["can_redeliver"] is True
        assert [a["status_code"] for a in failed["attempts"]] == [500]
        assert outbox.list_deliveries(key.id, cust.id, event="scan.failed").total == 0
        with pytest.raises(LookupError):
            outbox.list_deliveries(key.id, new_customer()[0].id)


def test_a_scans_deliveries_are_the_customers_only(hooked):
    cust, key = hooked
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    [entry] = outbox.scan_deliveries(scan.id, cust.id)
    assert (entry["event"], entry["status"], entry["key_id"]) == ("scan.completed", "pending", key.id)
    assert outbox.scan_deliveries(scan.id, new_customer()[0].id) == []


def test_the_api_list_of_deliveries_pages_by_cursor_per_mode(conn, monkeypatch):
    monkeypatch.setitem(runtime.config, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 100)
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        test_key, _ = admin.issue_key(cust.id, "sandbox", URL, livemode=False)
        made = []
        for _ in range(3):
            made.append(outbox.send_test_event(key.id, cust.id))
            frozen.tick(1)
        outbox.send_test_event(test_key.id, cust.id)
    page, more = outbox.customer_deliveries(cust.id, limit=2)
    assert [d["delivery_id"] for d in page] == [made[2].id, made[1].id] and more is True
    assert page[0]["body"] == made[2].body and page[0]["attempts"] == []
    rest, more = outbox.customer_deliveries(cust.id, limit=2, starting_after=made[1].id)
    assert [d["delivery_id"] for d in rest] == [made[0].id] and more is False
    tests, _ = outbox.customer_deliveries(cust.id, livemode=False)
    assert len(tests) == 1 and tests[0]["livemode"] is False
    assert outbox.customer_deliveries(cust.id, scan_id="x" * 41) == ([], False)


@pytest.mark.parametrize("kwargs", [{"status": "lost"}, {"event": "scan.started"}, {"limit": 0}, {"limit": 101},
                                    {"starting_after": "dlv_unknown"}, {"starting_after": "dlv\x00"}])
def test_a_bad_filter_of_the_api_list_is_an_invalid_request(hooked, kwargs):
    cust, _ = hooked
    with pytest.raises(InvalidRequest):
        outbox.customer_deliveries(cust.id, **kwargs)


def test_a_sample_event_is_marked_as_a_test_of_its_mode():
    with freeze_time(NOW):
        body = outbox.sample_event_body(livemode=False)
    assert (body["test"], body["livemode"], body["completed_at"], body["status"]) == (
        True, False, "2026-11-22T12:00:00Z", "completed")
    assert outbox.sample_event_body()["scan_id"] != body["scan_id"]


# Moved from tests/workers/test_webhook_signatures.py (service calls, no worker).

ROTATION_SECRET = "whsec_c2lnbmF0dXJlcyB0ZXN0IHNlY3JldCAwMTIzNDU2Nzg5"


@pytest.mark.parametrize("hours", [-1, 169, 1.5, True, "24"])
def test_the_overlap_is_0_to_168_whole_hours(conn, hours):
    cust, key = new_customer(webhook_secret=ROTATION_SECRET)
    with pytest.raises(AccountError, match="0 to 168"):
        outbox.roll_secret(key.id, cust.id, overlap_hours=hours)
    assert ApiKey.get_by_id(key.id).webhook_next_secret_enc is None


def test_only_the_owner_rolls_or_switches(conn):
    cust, key = new_customer(webhook_secret=ROTATION_SECRET)
    other, _ = new_customer()
    for action in (lambda: outbox.roll_secret(key.id, other.id),
                   lambda: outbox.switch_secret(key.id, other.id)):
        with pytest.raises(LookupError):
            action()
    assert ApiKey.get_by_id(key.id).webhook_next_secret_enc is None


def test_generated_and_hand_set_secrets_follow_the_standard_form(conn):
    cust, key = new_customer()
    generated = outbox.generate_secret(key.id, cust.id)
    assert Webhook(generated)._whsecret == base64.b64decode(generated[6:])
    assert len(Webhook(generated)._whsecret) == 32
    unpadded = ROTATION_SECRET.rstrip("=")
    outbox.set_webhook(key.id, cust.id, None, unpadded)  # padding is optional
    with pytest.raises(AccountError, match="whsec_ followed by standard base64"):
        admin.issue_key(cust.id, "k", None, "not-a-whsec-secret-0123456789")


# Moved from tests/workers/test_webhooks_portal.py (service calls, no worker).

PORTAL_SECRET = "whsec_cG9ydGFsIHNlY3JldCAwMTIzNDU2Nzg5"
PORTAL_START = "2026-11-21 12:00:00"


def test_set_webhook_stores_the_url_and_the_secret_encrypted(conn):
    cust, key = new_customer()
    key = outbox.set_webhook(key.id, cust.id, " https://hooks.example.com/x ", PORTAL_SECRET)
    assert key.webhook_url == "https://hooks.example.com/x"
    assert PORTAL_SECRET not in key.webhook_secret_enc and decrypt_secret(key.webhook_secret_enc) == PORTAL_SECRET

    key = outbox.set_webhook(key.id, cust.id, "https://hooks.example.com/y")
    assert decrypt_secret(key.webhook_secret_enc) == PORTAL_SECRET  # no secret given: kept
    key = outbox.set_webhook(key.id, cust.id, "")
    assert key.webhook_url is None


@pytest.mark.parametrize("url, secret, message", [
    ("ftp://hooks.example.com/x", None, "absolute"),
    ("https://hooks.example.com/x", "short", "whsec_ followed by standard base64"),
    ("https://hooks.example.com/x", f" {PORTAL_SECRET}", "whsec_ followed by standard base64"),
    ("https://hooks.example.com/x", "0123456789abcdef0123456789abcdef", "whsec_ followed"),  # no prefix
    ("https://hooks.example.com/x", "whsec_c2VjcmV0X3dpdGhfdXJsc2FmZV9hbHBoYWJldA-_", "standard base64"),
    ("https://hooks.example.com/x", "whsec_c2hvcnQ=", "decode to 16 to 128 bytes, not 5"),
])
def test_set_webhook_refuses_bad_input(conn, url, secret, message):
    cust, key = new_customer()
    with pytest.raises(AccountError, match=message):
        outbox.set_webhook(key.id, cust.id, url, secret)


def test_generate_secret_rotates_and_returns_the_new_secret_once(conn):
    cust, key = new_customer(webhook_url="https://hooks.example.com/x", webhook_secret=PORTAL_SECRET)
    plaintext = outbox.generate_secret(key.id, cust.id)
    assert plaintext.startswith("whsec_") and len(plaintext) >= 40
    stored = ApiKey.get_by_id(key.id).webhook_secret_enc
    assert plaintext not in stored and decrypt_secret(stored) == plaintext


def test_another_customers_key_or_delivery_is_not_found(conn):
    url = URL
    cust, key = new_customer(webhook_url=url, webhook_secret=PORTAL_SECRET)
    other, _ = new_customer()
    delivery = outbox.send_test_event(key.id, cust.id)
    for call in (lambda: outbox.set_webhook(key.id, other.id, url, PORTAL_SECRET),
                 lambda: outbox.generate_secret(key.id, other.id),
                 lambda: outbox.send_test_event(key.id, other.id),
                 lambda: outbox.list_deliveries(key.id, other.id),
                 lambda: outbox.redeliver(delivery.id, other.id),
                 lambda: outbox.redeliver("dlv_unknown", cust.id)):
        with pytest.raises(LookupError):
            call()
    assert decrypt_secret(ApiKey.get_by_id(key.id).webhook_secret_enc) == PORTAL_SECRET


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
        pending = outbox.record_watch_event(outbox.key_store.get(key.id), body, scan_id=scan.id)

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
