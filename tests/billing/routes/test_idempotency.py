"""Idempotency-Key on both POST endpoints (D9)."""
import threading
from datetime import timedelta

import pytest
import requests
from freezegun import freeze_time

from app.billing.models import IdempotencyRecord
from app.extensions import db
from tests.api.helpers import assert_books_balance, balance, engine_mode, scans_of
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"


@pytest.mark.parametrize("path,payload", [
    (SCAN, {"target": "jane@example.com"}),
    (BULK, {"targets": [{"target": "jane@example.com"}, {"target": "ab"}]}),
])
def test_replay_returns_the_first_answer_without_charge(client, account, path, payload):
    headers = {**account.headers, "Idempotency-Key": "order-42"}
    first = client.post(path, json=payload, headers=headers)
    assert first.status_code == 202
    again = client.post(path, json=payload, headers=headers)
    assert again.status_code == 202 and again.get_json() == first.get_json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(scans_of(account)) == 1 and balance(account) == 99
    assert again.headers["X-Credits-Remaining"] == "99"


def test_same_key_different_body_is_409_free(client, account):
    headers = {**account.headers, "Idempotency-Key": "k1"}
    assert client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).status_code == 202
    response = client.post(SCAN, json={"target": "john@example.com"}, headers=headers)
    assert_error(response, 409, "idempotency_conflict")
    assert balance(account) == 99 and len(scans_of(account)) == 1


def test_key_order_and_spacing_do_not_make_a_different_body(client, account):
    headers = {**account.headers, "Idempotency-Key": "k2", "Content-Type": "application/json"}
    assert client.post(SCAN, data='{"target": "jane@example.com", "kind": "email"}', headers=headers).status_code == 202
    assert client.post(SCAN, data='{"kind":"email","target":"jane@example.com"}', headers=headers).status_code == 202
    assert len(scans_of(account)) == 1


def test_errors_are_not_stored_so_a_retry_is_processed_afresh(client, account, simulator):
    headers = {**account.headers, "Idempotency-Key": "retry-me"}
    engine_mode(simulator, "down")
    assert client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).status_code == 502
    engine_mode(simulator, "up")
    assert client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).status_code == 202
    assert len(scans_of(account)) == 1


def test_keys_are_scoped_per_customer(client, account, make_customer):
    other = make_customer()
    for acct in (account, other):
        response = client.post(SCAN, json={"target": "jane@example.com"},
                               headers={**acct.headers, "Idempotency-Key": "shared"})
        assert response.status_code == 202 and "Idempotent-Replayed" not in response.headers
    assert len(scans_of(account)) == len(scans_of(other)) == 1


def test_keys_expire_after_24_hours(client, account):
    headers = {**account.headers, "Idempotency-Key": "daily"}
    with freeze_time("2026-11-21 10:00:00") as frozen:
        first = client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).get_json()
        frozen.tick(timedelta(hours=23, minutes=59))
        assert client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).get_json() == first
        frozen.tick(timedelta(minutes=2))
        second = client.post(SCAN, json={"target": "jane@example.com"}, headers=headers).get_json()
    assert second["scan_id"] != first["scan_id"]


@pytest.mark.parametrize("key", ["", "x" * 256])
def test_key_length_is_checked(client, account, key):
    response = client.post(SCAN, json={"target": "jane@example.com"}, headers={**account.headers,
                                                                             "Idempotency-Key": key})
    assert_error(response, 400, "invalid_request")
    assert scans_of(account) == []


def test_concurrent_requests_with_one_key_never_create_twice(served_app, make_customer):
    acct = make_customer(credits=100, inflight=50)
    headers = {**acct.headers, "Idempotency-Key": "race"}
    barrier = threading.Barrier(8)
    answers = []

    def fire():
        barrier.wait()
        response = requests.post(f"{served_app.url}{SCAN}", json={"target": "jane@example.com"}, headers=headers,
                                 timeout=30)
        answers.append((response.status_code, response.json()))

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(status for status, _ in answers)
    assert set(statuses) <= {202, 409} and 202 in statuses
    created = {body["scan_id"] for status, body in answers if status == 202}
    assert len(created) == 1
    assert all(body["error"] == "idempotency_conflict" for status, body in answers if status == 409)
    assert len(scans_of(acct)) == 1 and balance(acct) == 99
    assert_books_balance(acct)
    with db.connection_context():
        assert IdempotencyRecord.select().count() == 1
