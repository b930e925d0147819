"""The client's deliveries calls, webhook verification and test mode against the served API: real
deliveries made by the workers' jobs (run in-process) to the simulator's receivers, real signatures,
real sandbox scans. Time is frozen and moved by the jobs' schedule; nothing sleeps for real."""
from __future__ import annotations

import csv
import io
import json
import time

import pytest
from freezegun import freeze_time
from scan_api_client import (
    Conflict,
    Delivery,
    DeliveryAttempt,
    DeliveryPending,
    NotFound,
    ScanClient,
    ValidationError,
    WebhookVerificationError,
    verify_webhook,
)
from scan_api_client.cli import main

from app.extensions import db
from app.webhooks import key_settings, outbox, signing_secrets
from app.webhooks.models import WebhookDelivery
from tests import factories
from tests.api.helpers import balance
from tests.client.held import HeldOnFrozenTime

SECRET = "whsec_Y2xpZW50IGRlbGl2ZXJpZXMgc2VjcmV0IDAxMjM0NTY3OA=="
START = "2026-11-21 12:00:00"


@pytest.fixture
def receiver(sim_receiver):
    """A simulator receiver answering ``responses`` in order: (its URL, a function listing what it got)."""
    def make(responses=(200,)):
        return sim_receiver(SECRET, responses)
    return make


def no_sleep(seconds):
    raise AssertionError(f"the client slept {seconds} s")


def finished(scan_id: str) -> bool:
    found = WebhookDelivery.get_or_none(WebhookDelivery.scan_id == scan_id)
    return found is not None and found.status != "pending"


def cli(served_app, key, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": key})
    return code, out.getvalue(), err.getvalue()


# --- the deliveries list and redelivery --------------------------------------------------------

@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_iter_deliveries_walks_every_page_with_filters_and_typed_entries(served_app, make_customer, receiver, jobs):
    url, received = receiver(responses=[200, 200, 200, 500, 200])
    account = make_customer(webhook_url=url, webhook_secret=SECRET, credits=100)
    api = ScanClient(served_app.url, account.api_key, sleep=no_sleep)
    with freeze_time(START) as frozen:
        tests = []
        for _ in range(5):  # the 4th is answered 500: failed (no retries in this test)
            tests.append(outbox.send_test_event(account.key.id, account.customer.id).id)
            jobs.run()
            frozen.tick(1)
        failing = api.create("fail.me@example.com").scan_id
        assert jobs.run(frozen, until=lambda: finished(failing))
        frozen.tick(1)
        completing = api.create("jane.doe@example.com").scan_id
        assert jobs.run(frozen, until=lambda: finished(completing))
        frozen.tick(61)  # a 6th test event a minute after the first: the per-key limit is 5 a minute
        pending = outbox.send_test_event(account.key.id, account.customer.id).id  # its job not run
        by_scan = {d.scan_id: d.id for d in WebhookDelivery.select().where(WebhookDelivery.scan_id.is_null(False))}

        before = balance(account)
        found = list(api.iter_deliveries(page_size=3))
        assert balance(account) == before - 3  # pages of 3, 3 and 2
    newest_first = [pending, by_scan[completing], by_scan[failing], *tests[::-1]]
    assert [d.delivery_id for d in found] == newest_first
    assert all(isinstance(d, Delivery) and d.livemode is True and d.created_at.endswith("Z") for d in found)

    by_id = {d.delivery_id: d for d in found}
    failed = by_id[tests[3]]
    assert failed.status == "failed" and failed.next_attempt_at is None and failed.scan_id is None
    # Finished deliveries say so: their next_attempt_at is there, and null (the pending one's is a time).
    assert all(d.raw["next_attempt_at"] is None for d in found if d.status != "pending")
    [attempt] = failed.attempts
    assert isinstance(attempt, DeliveryAttempt) and (attempt.attempt, attempt.http_status, attempt.error) == (1, 500, None)
    assert isinstance(attempt.duration_ms, int) and attempt.at.endswith("Z")
    scan_failed = by_id[by_scan[failing]]
    assert (scan_failed.event, scan_failed.scan_id, scan_failed.status) == ("scan.failed", failing, "succeeded")
    assert scan_failed.payload["failure"]["code"] == "engine_failed" and scan_failed.scan.status == "failed"
    # ``body`` is the exact text the receiver got, byte for byte: the one its signatures cover.
    assert scan_failed.body in {r["body"] for r in received()}
    assert by_id[by_scan[completing]].scan.result.risk.band
    assert by_id[pending].status == "pending" and by_id[pending].attempts == [] and by_id[pending].next_attempt_at

    assert [d.delivery_id for d in api.iter_deliveries(status="failed")] == [tests[3]]
    assert [d.delivery_id for d in api.iter_deliveries(status="pending")] == [pending]
    assert [d.delivery_id for d in api.iter_deliveries(event="scan.failed")] == [by_scan[failing]]
    assert [d.delivery_id for d in api.iter_deliveries(scan_id=completing)] == [by_scan[completing]]
    assert [d.delivery_id for d in api.iter_deliveries(status="succeeded", page_size=2, max_items=3)] \
        == newest_first[1:4]
    page = api.list_deliveries(limit=2, starting_after=tests[2])
    assert [d.delivery_id for d in page] == [tests[1], tests[0]] and page.has_more is False
    with pytest.raises(ValidationError) as caught:
        api.list_deliveries(starting_after="dlv_unknown")
    assert caught.value.code == "invalid_request" and "starting_after" in caught.value.message
    with pytest.raises(ValidationError):
        api.list_deliveries(status="done")


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_redeliver_is_202_and_pending_or_unknown_ids_are_typed_errors(served_app, make_customer, receiver, jobs):
    url, received = receiver(responses=[500, 200])
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    other = make_customer(webhook_url=url, webhook_secret=SECRET, name="Other")
    api = ScanClient(served_app.url, account.api_key, sleep=no_sleep)
    with freeze_time(START) as frozen:
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
        jobs.run()
        frozen.tick(600)
        before = balance(account)
        again = api.redeliver(delivery.id)
        assert api.last_response.status_code == 202 and balance(account) == before - 1
        assert isinstance(again, Delivery) and (again.delivery_id, again.status) == (delivery.id, "pending")
        assert again.body == delivery.body and [a.http_status for a in again.attempts] == [500]
        with pytest.raises(DeliveryPending) as pending:  # its new attempt is not made yet
            api.redeliver(delivery.id)
        assert isinstance(pending.value, Conflict) and pending.value.status == 409
        assert pending.value.code == "delivery_pending" and pending.value.request_id.startswith("req_")
        assert balance(account) == before - 1  # a refused redelivery is free
        jobs.run()
    first, second = received()
    assert first["body"] == second["body"] and second["headers"]["Webhook-Id"] == delivery.id
    [done] = api.list_deliveries().data
    assert done.status == "succeeded" and [a.http_status for a in done.attempts] == [500, 200]

    with pytest.raises(NotFound) as missing:
        api.redeliver("dlv_unknown")
    assert missing.value.code == "not_found"
    with pytest.raises(NotFound):  # another customer's delivery is unknown to this one
        ScanClient(served_app.url, other.api_key).redeliver(delivery.id)
    key_settings.set_webhook(account.key.id, account.customer.id, None)
    with pytest.raises(ValidationError) as no_url:
        api.redeliver(delivery.id)
    assert no_url.value.code == "webhook_url_missing"


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_cli_deliveries_and_redeliver(served_app, make_customer, receiver, jobs):
    url, received = receiver(responses=[200, 500])
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        ok = outbox.send_test_event(account.key.id, account.customer.id).id
        jobs.run()
        frozen.tick(1)
        bad = outbox.send_test_event(account.key.id, account.customer.id).id
        jobs.run()
        frozen.tick(1)
        pending = outbox.send_test_event(account.key.id, account.customer.id).id

        code, out, err = cli(served_app, account.api_key, "deliveries", "--all")
        assert code == 0, err
        assert [(d["delivery_id"], d["status"]) for d in json.loads(out)] \
            == [(pending, "pending"), (bad, "failed"), (ok, "succeeded")]
        code, out, err = cli(served_app, account.api_key, "deliveries", "--status", "failed", "--format", "csv")
        assert code == 0, err
        header, row = out.strip().splitlines()
        assert header.split(",") == ["delivery_id", "endpoint_id", "event", "scan_id", "status", "attempts",
                                     "last_http_status", "last_error", "next_attempt_at"]
        assert row.split(",") == [bad, outbox.first_endpoint_id(account.key.id), "scan.completed", "", "failed",
                                  "1", "500", "", ""]
        code, out, err = cli(served_app, account.api_key, "deliveries", "--status", "pending", "--format", "csv",
                             "--endpoint-id", outbox.first_endpoint_id(account.key.id))
        [row] = list(csv.DictReader(io.StringIO(out)))
        assert (row["delivery_id"], row["status"]) == (pending, "pending") and row["next_attempt_at"].endswith("Z")
        code, out, err = cli(served_app, account.api_key, "deliveries", "--endpoint-id", "ep_other")
        assert code == 0 and json.loads(out) == []
        code, out, err = cli(served_app, account.api_key, "deliveries", "--limit", "1")
        assert code == 0 and [d["delivery_id"] for d in json.loads(out)] == [pending]

        code, out, err = cli(served_app, account.api_key, "redeliver", bad)
        assert code == 0, err
        answer = json.loads(out)
        assert (answer["delivery_id"], answer["status"]) == (bad, "pending") and err == ""
        code, out, err = cli(served_app, account.api_key, "redeliver", pending)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "still under way" in err and "delivery_pending, HTTP 409" in err
        code, out, err = cli(served_app, account.api_key, "redeliver", "dlv_unknown")
        assert code == 1 and "not_found, HTTP 404" in err and "Traceback" not in err
        jobs.run()
    assert len(received()) == 4  # two first attempts, the pending one's, and the redelivery's
    code, out, _ = cli(served_app, account.api_key, "redeliver", "--help")
    assert code == 0 and "delivery_id" in out


# --- webhook verification of real deliveries ---------------------------------------------------

def strip_standard(headers: dict) -> dict:
    return {k: v for k, v in headers.items() if not k.lower().startswith("webhook-")}


def test_verify_webhook_on_real_deliveries_through_a_secret_rotation(app, make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    [got] = received()
    raw, headers = got["body"].encode(), got["headers"]
    event = verify_webhook(raw, headers, SECRET)  # the Standard Webhooks scheme, with the real clock
    assert (event.event, event.delivery_id, event.livemode) == ("scan.completed", delivery.id, True)
    event = verify_webhook(raw, strip_standard(headers), SECRET)  # X-Service-Signature alone
    assert event.delivery_id == delivery.id and event.raw == json.loads(raw)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(raw.replace(b"scan.completed", b"scan.failed"), headers, SECRET)

    with db.connection_context():
        rolled = signing_secrets.roll_secret(account.key.id, account.customer.id, overlap_hours=24)
    nxt = rolled.secret if hasattr(rolled, "secret") else rolled[0]
    assert nxt.startswith("whsec_") and nxt != SECRET
    outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    got = received()[-1]
    raw, headers = got["body"].encode(), got["headers"]
    assert len(headers["Webhook-Signature"].split()) == 2  # both secrets sign during the overlap
    for secrets in (SECRET, nxt, [nxt, SECRET], ["whsec_" + "QUJD" * 8, nxt]):
        assert verify_webhook(raw, headers, secrets).event == "scan.completed"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(raw, headers, "whsec_" + "QUJD" * 8)
    # X-Service-Signature keeps the current secret until the switch.
    assert verify_webhook(raw, strip_standard(headers), [SECRET]).event == "scan.completed"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(raw, strip_standard(headers), nxt)

    # An old timestamp is refused: a captured delivery replayed 5 minutes later.
    sent = int(headers["Webhook-Timestamp"])
    assert abs(sent - time.time()) < 60
    verify_webhook(raw, headers, nxt, now=sent + 300)
    with freeze_time(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sent + 301))), \
            pytest.raises(WebhookVerificationError, match="away from now"):
            verify_webhook(raw, headers, [SECRET, nxt])

    with db.connection_context():
        signing_secrets.switch_secret(account.key.id, account.customer.id)
    outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    got = received()[-1]
    raw, headers = got["body"].encode(), got["headers"]
    assert len(headers["Webhook-Signature"].split()) == 1
    assert verify_webhook(raw, headers, [SECRET, nxt]).event == "scan.completed"
    assert verify_webhook(raw, strip_standard(headers), nxt).event == "scan.completed"
    for scheme in (headers, strip_standard(headers)):
        with pytest.raises(WebhookVerificationError):
            verify_webhook(raw, scheme, SECRET)


# --- test mode ----------------------------------------------------------------------------------

@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_a_test_key_through_the_client(served_app, make_customer, receiver, jobs, capsys):
    url, received = receiver()
    live = make_customer(credits=10)
    with db.connection_context():
        test = factories.sandbox_key(live, webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        def sleep(seconds):
            frozen.tick(seconds)
            jobs.run()
        api = ScanClient(served_app.url, test.api_key, sleep=sleep, poll_interval=2,
                         session=HeldOnFrozenTime(frozen, jobs).session())
        assert api.livemode is False
        created = api.create("jane.doe@example.com")
        assert created.livemode is False and api.last_credits == 10  # free; the live balance shown
        done = api.wait(created, progress=True, timeout=60)
        assert (done.status, done.livemode) == ("completed", False) and done.result.risk.band
        assert done.result.artifacts.pdf.startswith("https://sandbox.invalid/")
        stderr = capsys.readouterr().err
        assert created.scan_id in stderr and "completed 1" in stderr

        failed = api.wait(api.create("fail.user@example.com"), timeout=60)
        assert (failed.status, failed.failure.code, failed.livemode) == ("failed", "engine_failed", False)

        batch = api.bulk(["a.person@example.com", "+14155552671", "ab"])
        assert batch.livemode is False and all(s.livemode is False for s in batch.scans)
        final = api.wait_bulk(batch, timeout=120)
        assert final.all_done and final.livemode is False and final.completed == 2
        assert [s.livemode for s in final.scans] == [False, False]
        assert api.last_credits == 10 and balance(live) == 10

        assert jobs.run(frozen, until=lambda: WebhookDelivery.select().where(
            WebhookDelivery.status == "pending").count() == 0)
    deliveries = list(api.iter_deliveries(page_size=2))
    assert len(deliveries) == 4 and all(d.livemode is False and d.status == "succeeded" for d in deliveries)
    assert {d.payload["livemode"] for d in deliveries} == {False}
    assert {d.scan_id for d in deliveries} >= {done.scan_id, failed.scan_id}
    got = received()
    assert len(got) == 4
    event = verify_webhook(got[0]["body"], got[0]["headers"], SECRET, now=int(got[0]["headers"]["Webhook-Timestamp"]))
    assert event.livemode is False

    live_api = ScanClient(served_app.url, live.api_key)
    assert live_api.livemode is True and live_api.list_deliveries().data == []  # modes never mix
    with pytest.raises(NotFound):
        live_api.redeliver(deliveries[0].delivery_id)
    with pytest.raises(NotFound):
        live_api.get(done.scan_id)
    assert api.redeliver(deliveries[0].delivery_id).livemode is False

    scans = list(api.iter_scans())
    assert len(scans) == 4 and {s.livemode for s in scans} == {False}
    assert live_api.list_scans().data == []
    code, out, err = cli(served_app, test.api_key, "list", "--all")
    assert code == 0 and {s["scan_id"] for s in json.loads(out)} == {s.scan_id for s in scans}
