"""Test mode (D15): test keys on every endpoint, free, on the sandbox engine, apart from live data.

Real parts only: the API through Flask's client, the database, Redis and RQ jobs run on frozen
scheduled time (``tests.jobrunner``); the simulator is the live engine, and the webhook receivers
are the simulator's."""
from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
import requests
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import ApiKey, CreditLedger, Customer
from app.billing import quotas
from app.billing.models import IdempotencyRecord
from app.extensions import db
from app.intake.creation import reverse_reservation
from app.plumbing.models import utcnow
from app.plumbing.signatures import sign, verify_standard
from app.scans.models import Scan
from app.webhooks.models import WebhookDelivery
from tests import factories
from tests.api.helpers import assert_books_balance, balance, ledger

START = "2026-11-21 12:00:00"
SECRET = "whsec_c2FuZGJveCByZWNlaXZlciBzZWNyZXQgMDEyMzQ1Njc4OQ=="
FINAL = ("completed", "failed")


@pytest.fixture
def sandbox(account):
    """``(live account, test account)``: one Business customer (100 credits), a key of each mode."""
    with db.connection_context():
        return account, factories.sandbox_key(account)


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def set_engine(simulator, mode: str) -> None:
    assert requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": mode}, timeout=5).status_code == 200


def create(client, account, target="jane@example.com", **headers):
    return client.post("/api/v1/scan", json={"target": target}, headers={**account.headers, **headers})


def final(scan_id: str) -> bool:
    return Scan.get_by_id(scan_id).status in FINAL


def run_until_final(jobs, frozen, *scan_ids) -> None:
    assert jobs.run(frozen, until=lambda: all(final(s) for s in scan_ids))


# --- keys ---------------------------------------------------------------------------------


def test_the_cli_issues_a_test_key_once_stored_as_a_digest_and_lists_its_mode(app, account):
    runner = app.test_cli_runner()
    issued = runner.invoke(args=["keys", "issue", account.id, "--test", "--name", "ci", "--json"])
    assert issued.exit_code == 0, issued.output
    data = json.loads(issued.output.strip().splitlines()[-1])
    plaintext = data["api_key"]
    assert plaintext.startswith("service_test_") and len(plaintext) == len(account.api_key)
    assert data["mode"] == "test" and data["prefix"] == plaintext[:17]
    with db.connection_context():
        key = ApiKey.get_by_id(data["key_id"])
        assert key.livemode is False and plaintext not in json.dumps(list(ApiKey.select().dicts()), default=str)
    listed = runner.invoke(args=["keys", "list", account.id, "--json"])
    assert listed.exit_code == 0, listed.output
    modes = {k["key_id"]: k["mode"] for k in json.loads(listed.output.strip().splitlines()[-1])["keys"]}
    assert modes == {account.key.id: "live", data["key_id"]: "test"}
    table = runner.invoke(args=["keys", "list", account.id])
    assert "mode" in table.output and "test" in table.output and plaintext not in table.output
    # The key works, and it is a test key.
    r = app.test_client().post("/api/v1/scan", json={"target": "jane@example.com"},
                               headers={"Authorization": f"Bearer {plaintext}"})
    assert r.status_code == 202 and r.json["livemode"] is False


def test_a_test_key_is_redacted_from_logs(sandbox):
    import logging

    from app.plumbing.logging_setup import RedactFilter
    _, test = sandbox
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "key %s used", (test.api_key,), None)
    RedactFilter().filter(record)
    assert test.api_key[len("service_test_"):] not in record.getMessage()
    assert "service_test_[redacted]" in record.getMessage()


def test_an_unknown_test_key_is_invalid_token(client, sandbox):
    _, test = sandbox
    r = client.get("/api/v1/scan/scn_x", headers={"Authorization": "Bearer service_test_" + "x" * 43})
    assert r.status_code == 401 and r.json["error"] == "invalid_token"
    with db.connection_context():
        admin.revoke_key(test.key.id)
    r = client.get("/api/v1/scan/scn_x", headers=test.headers)
    assert r.status_code == 401 and r.json["error"] == "invalid_token"


# --- no charge, no credit needed ------------------------------------------------------------


def test_a_test_key_costs_nothing_and_shows_the_live_balance(client, sandbox, jobs):
    live, test = sandbox
    with freeze_time(START) as frozen:
        created = create(client, test)
        assert created.status_code == 202 and created.json["livemode"] is False
        assert created.headers["X-Credits-Remaining"] == "100"
        scan_id = created.json["scan_id"]
        read = client.get(f"/api/v1/scan/{scan_id}", headers=test.headers)
        assert read.status_code == 200 and read.headers["X-Credits-Remaining"] == "100"
        bad = client.post("/api/v1/scan", json={"target": "ab"}, headers=test.headers)  # 400 is charged live
        assert bad.status_code == 400 and bad.headers["X-Credits-Remaining"] == "100"
        missing = client.get("/api/v1/scan/scn_nothing", headers=test.headers)
        assert missing.status_code == 404 and missing.headers["X-Credits-Remaining"] == "100"
        run_until_final(jobs, frozen, scan_id)
    assert ledger(live) == [(100, "grant")] and balance(live) == 100
    assert_books_balance(live)
    # The same calls with the live key are charged.
    assert create(client, live).headers["X-Credits-Remaining"] == "99"
    assert_books_balance(live)


def test_a_test_key_needs_no_credit(client, make_customer):
    broke = make_customer(credits=0)
    with db.connection_context():
        test = factories.sandbox_key(broke)
    assert create(client, broke).status_code == 402
    r = create(client, test)
    assert r.status_code == 202 and r.headers["X-Credits-Remaining"] == "0"
    assert client.get(f"/api/v1/scan/{r.json['scan_id']}", headers=test.headers).status_code == 200
    with db.connection_context():
        assert CreditLedger.select().where(CreditLedger.customer == broke.id).count() == 0
        assert Customer.get_by_id(broke.id).balance == 0


# --- the sandbox engine ----------------------------------------------------------------------


def test_a_test_scan_completes_and_its_webhook_arrives_signed_while_the_engine_is_down(
        client, make_customer, simulator, jobs):
    hook = f"sandbox-{uuid.uuid4().hex[:10]}"
    assert requests.post(f"{simulator.url}/_sim/receivers/{hook}", json={"secret": SECRET, "responses": [200]},
                         timeout=5).status_code in (200, 201)
    live = make_customer()
    with db.connection_context():
        test = factories.sandbox_key(live, webhook_url=f"{simulator.url}/_sim/hooks/{hook}", webhook_secret=SECRET)
    set_engine(simulator, "down")
    before = engine_stats(simulator)
    assert create(client, live).status_code == 502  # the live engine is down indeed
    with freeze_time(START) as frozen:
        created = create(client, test, target="+14155552671")
        assert created.status_code == 202, created.json
        scan_id = created.json["scan_id"]
        assert jobs.run(frozen, until=lambda: (WebhookDelivery.get_or_none(WebhookDelivery.scan_id == scan_id)
                                               is not None and WebhookDelivery.get(
                                                   WebhookDelivery.scan_id == scan_id).status == "succeeded"))
        scan = Scan.get_by_id(scan_id)
        assert scan.status == "completed" and scan.engine_id.startswith("sbx_")
        assert scan.completed_at - scan.created_at <= timedelta(seconds=6)  # SANDBOX_SCAN_SECONDS (5) + a look
    after = engine_stats(simulator)
    assert after["submit"] - before["submit"] == 1 and after["status"] == before["status"]  # only the 502's try

    read = client.get(f"/api/v1/scan/{scan_id}", headers=test.headers).json
    assert read["livemode"] is False and read["result"]["phone_profile"]["e164"] == "+14155552671"
    assert read["result"]["artifacts"]["pdf"].startswith("https://sandbox.invalid/")
    [received] = requests.get(f"{simulator.url}/_sim/receivers/{hook}/deliveries", timeout=5).json()["deliveries"]
    body = json.loads(received["body"])
    assert received["signature_valid"] is True
    assert received["headers"]["X-Service-Signature"] == sign(SECRET, received["body"].encode())
    headers = received["headers"]
    assert headers["Webhook-Id"] == WebhookDelivery.get(WebhookDelivery.scan_id == scan_id).id
    assert verify_standard(SECRET, received["body"].encode(), headers, now=int(headers["Webhook-Timestamp"]))
    assert body["livemode"] is False and body["event"] == "scan.completed" and body["scan_id"] == scan_id
    assert body["result"] == read["result"]
    with db.connection_context():
        assert WebhookDelivery.get(WebhookDelivery.scan_id == scan_id).livemode is False
        assert Customer.get_by_id(live.id).test_in_flight == 0


@pytest.mark.parametrize("target, code, seconds", [
    ("fail.user", "engine_failed", (5, 6)),
    ("+14155550000", "engine_failed", (5, 6)),
    ("hang.user", "engine_timeout", (15, 16)),
    ("+14155558888", "engine_timeout", (15, 16)),
])
def test_magic_targets_fail_as_documented(client, sandbox, jobs, target, code, seconds):
    _, test = sandbox
    with freeze_time(START) as frozen:
        scan_id = create(client, test, target=target).json["scan_id"]
        run_until_final(jobs, frozen, scan_id)
    body = client.get(f"/api/v1/scan/{scan_id}", headers=test.headers).json
    assert body["status"] == "failed" and body["failure"]["code"] == code
    scan = Scan.get_by_id(scan_id)
    low, high = seconds
    assert timedelta(seconds=low) <= scan.failed_at - scan.created_at <= timedelta(seconds=high)


def test_a_slow_target_takes_a_minute_then_completes(client, sandbox, jobs):
    _, test = sandbox
    with freeze_time(START) as frozen:
        created = create(client, test, target="slow.user")
        assert created.json["eta_seconds"] == 60
        scan_id = created.json["scan_id"]
        run_until_final(jobs, frozen, scan_id)
    scan = Scan.get_by_id(scan_id)
    assert scan.status == "completed"
    assert timedelta(seconds=60) <= scan.completed_at - scan.created_at <= timedelta(seconds=61)


def test_results_are_deterministic_by_target(client, sandbox, jobs):
    _, test = sandbox
    with freeze_time(START) as frozen:
        ids = [create(client, test, target="jane@example.com").json["scan_id"] for _ in range(2)]
        run_until_final(jobs, frozen, *ids)
    first, second = (client.get(f"/api/v1/scan/{i}", headers=test.headers).json["result"] for i in ids)
    assert _ids_as_paths(first) == _ids_as_paths(second)
    assert first["findings"] == second["findings"]  # an item's finding id is the same in every scan of the target


def _ids_as_paths(result):
    """The result with each finding id replaced by its path."""
    path_of = {f["id"]: f["path"] for f in result["findings"]}
    reasons = [{**r, "finding_ids": [path_of[i] for i in r["finding_ids"]]} for r in result["risk"]["reasons"]]
    return {**result, "risk": {**result["risk"], "reasons": reasons},
            "findings": [{**f, "id": f["path"]} for f in result["findings"]]}


# --- test and live data never mix -------------------------------------------------------------


def test_live_and_test_scans_and_batches_are_invisible_to_each_other(client, sandbox):
    live, test = sandbox
    live_scan = create(client, live).json["scan_id"]
    test_scan = create(client, test).json["scan_id"]
    targets = {"targets": [{"target": "jane@example.com"}, {"target": "+447700900123"}]}
    live_bulk = client.post("/api/v1/scan/bulk", json=targets, headers=live.headers).json["bulk_id"]
    test_bulk = client.post("/api/v1/scan/bulk", json=targets, headers=test.headers).json["bulk_id"]
    for key, own_scan, own_bulk, other_scan, other_bulk in ((live, live_scan, live_bulk, test_scan, test_bulk),
                                                            (test, test_scan, test_bulk, live_scan, live_bulk)):
        for path in (f"/api/v1/scan/{other_scan}", f"/api/v1/scan/bulk/{other_bulk}"):
            r = client.get(path, headers=key.headers)
            assert r.status_code == 404 and r.json["error"] == "not_found", path
            # The same answer as for an id that does not exist: nothing tells the other mode's data is there.
            assert r.json["message"] in ("no scan with this id", "no bulk batch with this id")
        mode = key is live
        assert client.get(f"/api/v1/scan/{own_scan}", headers=key.headers).json["livemode"] is mode
        assert client.get(f"/api/v1/scan/bulk/{own_bulk}", headers=key.headers).json["livemode"] is mode


def test_bulk_with_a_test_key_is_free_and_runs_in_the_sandbox(client, sandbox, jobs, simulator):
    live, test = sandbox
    before = engine_stats(simulator)
    with freeze_time(START) as frozen:
        r = client.post("/api/v1/scan/bulk", headers=test.headers, json={"targets": [
            {"target": "jane@example.com"}, {"target": "fail.user", "kind": "username"}, {"target": "ab"}]})
        assert r.status_code == 202 and r.json["livemode"] is False and r.json["queued"] == 2
        assert [s["livemode"] for s in r.json["scans"]] == [False, False]  # every scan body says its mode
        assert r.headers["X-Credits-Remaining"] == "100"
        ids = [s["scan_id"] for s in r.json["scans"]]
        run_until_final(jobs, frozen, *ids)
    batch = client.get(f"/api/v1/scan/bulk/{r.json['bulk_id']}", headers=test.headers).json
    assert (batch["livemode"], batch["completed"], batch["failed"], batch["rejected_count"]) == (False, 1, 1, 1)
    assert [s["livemode"] for s in batch["scans"]] == [False, False]
    assert engine_stats(simulator)["total"] == before["total"]
    assert ledger(live) == [(100, "grant")]


# --- idempotency and limits, apart per mode ---------------------------------------------------


def test_an_idempotency_key_is_scoped_by_mode(client, sandbox):
    live, test = sandbox
    first_live = create(client, live, **{"Idempotency-Key": "order-1"})
    first_test = create(client, test, **{"Idempotency-Key": "order-1"})
    assert first_live.status_code == first_test.status_code == 202
    assert first_test.json["scan_id"] != first_live.json["scan_id"] and first_test.json["livemode"] is False
    again = create(client, test, **{"Idempotency-Key": "order-1"})
    assert again.headers["Idempotent-Replayed"] == "true" and again.json == first_test.json
    with db.connection_context():
        assert Scan.select().where(Scan.customer == live.id).count() == 2
        assert {r.livemode for r in IdempotencyRecord.select()} == {True, False}


def test_in_flight_limit_is_counted_apart(client, make_customer):
    live = make_customer(inflight=1)
    with db.connection_context():
        test = factories.sandbox_key(live)
    assert create(client, live).status_code == 202
    assert create(client, live).json["error"] == "rate_limit_inflight"
    assert create(client, test).status_code == 202
    refused = create(client, test)
    assert refused.status_code == 429 and refused.json["error"] == "rate_limit_inflight"
    with db.connection_context():
        customer = Customer.get_by_id(live.id)
        assert (customer.in_flight, customer.test_in_flight) == (1, 1)
        assert quotas.inflight_count(live.id, livemode=False) == 1


def test_hour_windows_are_counted_apart_and_reported_per_mode(client, make_customer):
    live = make_customer(hour=2)
    with db.connection_context():
        test = factories.sandbox_key(live)
    for _ in range(2):
        assert create(client, live).status_code == 202
    assert create(client, live).json["error"] == "rate_limit_hour"
    ok = create(client, test)
    assert ok.status_code == 202 and '"hour";r=1;' in ok.headers["RateLimit"]
    assert create(client, test).status_code == 202
    refused = create(client, test)
    assert refused.status_code == 429 and refused.json["error"] == "rate_limit_hour"
    assert '"hour";r=0;' in client.get("/api/v1/scan/scn_x", headers=live.headers).headers["RateLimit"]
    assert_books_balance(live)


# --- recovery -------------------------------------------------------------------------------


def test_an_unsubmitted_test_reservation_is_undone_without_a_refund(client, sandbox):
    live, test = sandbox
    scan_id = create(client, test).json["scan_id"]
    with db.connection_context():
        Scan.update(engine_id=None).where(Scan.id == scan_id).execute()  # as if the creator died mid-call
        assert reverse_reservation(Scan.get_by_id(scan_id))
        assert Customer.get_by_id(live.id).test_in_flight == 0
        assert quotas.window_usage(live.id, utcnow(), livemode=False).day == 0
    assert ledger(live) == [(100, "grant")]


def test_the_scans_list_shows_the_calling_keys_mode_only(client, sandbox):
    live, test = sandbox
    live_ids = [create(client, live, target=f"live{i}@example.com").json["scan_id"] for i in range(2)]
    test_ids = [create(client, test, target=f"test{i}@example.com").json["scan_id"] for i in range(3)]
    for key, own, other in ((live, live_ids, test_ids), (test, test_ids, live_ids)):
        listed = client.get("/api/v1/scans", headers=key.headers)
        assert listed.status_code == 200
        assert {s["scan_id"] for s in listed.json["data"]} == set(own)
        assert {s["livemode"] for s in listed.json["data"]} == {key is live}
        # A scan of the other mode is no cursor: the same 400 as an unknown id.
        refused = client.get(f"/api/v1/scans?starting_after={other[0]}", headers=key.headers)
        assert refused.status_code == 400 and refused.json["error"] == "invalid_request"
    assert client.get("/api/v1/scans", headers=test.headers).headers["X-Credits-Remaining"] == "96"  # live calls only


def test_the_deliveries_list_and_redelivery_keep_to_the_calling_keys_mode(client, make_customer, simulator, jobs):
    hook = f"modes-{uuid.uuid4().hex[:10]}"
    assert requests.post(f"{simulator.url}/_sim/receivers/{hook}", json={"secret": SECRET, "responses": [200]},
                         timeout=5).status_code in (200, 201)
    url = f"{simulator.url}/_sim/hooks/{hook}"
    live = make_customer(webhook_url=url, webhook_secret=SECRET)
    with db.connection_context():
        test = factories.sandbox_key(live, webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        ids = {key.key.id: create(client, key).json["scan_id"] for key in (live, test)}
        assert jobs.run(frozen, until=lambda: WebhookDelivery.select().where(
            WebhookDelivery.status == "succeeded").count() == 2)
    for key, other in ((live, test), (test, live)):
        listed = client.get("/api/v1/deliveries", headers=key.headers)
        assert listed.status_code == 200, listed.json
        [entry] = listed.json["data"]
        assert entry["scan_id"] == ids[key.key.id] and entry["livemode"] is (key is live)
        assert json.loads(entry["body"])["livemode"] is (key is live)
        other_delivery = WebhookDelivery.get(WebhookDelivery.scan_id == ids[other.key.id]).id
        refused = client.post(f"/api/v1/deliveries/{other_delivery}/redeliver", headers=key.headers)
        assert refused.status_code == 404 and refused.json["error"] == "not_found"
        cursor = client.get(f"/api/v1/deliveries?starting_after={other_delivery}", headers=key.headers)
        assert cursor.status_code == 400
        own = client.post(f"/api/v1/deliveries/{entry['delivery_id']}/redeliver", headers=key.headers)
        assert own.status_code == 202 and own.json["livemode"] is (key is live)
