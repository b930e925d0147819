"""Webhook delivery end to end (§6, D11, D13): real scans on the simulated engine,
real Redis and database, deliveries over HTTP to the simulator's receivers, and RQ
jobs run on frozen scheduled time (``tests.jobrunner``), never on sleeps."""
from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from datetime import UTC, timedelta

import pytest
import requests
from freezegun import freeze_time
from rq.job import Job, JobStatus

from app.accounts.models import ApiKey
from app.plumbing.jobs import ENGINE_QUEUE, delivery_job_id, enqueue_delivery
from app.plumbing.models import utcnow
from app.plumbing.signatures import sign, verify_signature
from app.recovery import sweep
from app.scans.models import Scan
from app.webhooks import deliveries, signing_secrets
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from tests.jobrunner import JobRunner

SECRET = "whsec_cmVjZWl2ZXIgc2VjcmV0IDAxMjM0NTY3ODk="
RESULT_FIELDS = {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile", "ai_summary", "artifacts",
                 "sources", "coverage", "partial", "findings", "match"}
START = "2026-11-21 12:00:00"


class Receiver:
    """One named receiver of the simulator (E4)."""

    def __init__(self, base_url: str, name: str):
        self.base_url, self.name = base_url, name
        self.url = f"{base_url}/_sim/hooks/{name}"

    def configure(self, responses=(200,), delay_ms=0, secret=SECRET) -> Receiver:
        r = requests.post(f"{self.base_url}/_sim/receivers/{self.name}",
                          json={"secret": secret, "responses": list(responses), "delay_ms": delay_ms}, timeout=5)
        assert r.status_code in (200, 201), r.text
        return self

    def deliveries(self) -> list[dict]:
        r = requests.get(f"{self.base_url}/_sim/receivers/{self.name}/deliveries", timeout=5)
        return r.json()["deliveries"]


@pytest.fixture
def receiver(simulator):
    def make(responses=(200,), delay_ms=0, secret=SECRET, name=None) -> Receiver:
        return Receiver(simulator.url, name or f"hook-{uuid.uuid4().hex[:12]}").configure(responses, delay_ms, secret)
    return make


@pytest.fixture
def hooked(make_customer, receiver):
    """``(account, receiver)``: a Business customer whose key posts to a fresh receiver."""
    def make(responses=(200,), delay_ms=0, **customer):
        hook = receiver(responses, delay_ms)
        return make_customer(webhook_url=hook.url, webhook_secret=SECRET, **customer), hook
    return make


def delivery_of(scan_id: str) -> WebhookDelivery | None:
    return WebhookDelivery.get_or_none(WebhookDelivery.scan_id == scan_id)


def attempts_of(delivery_id: str) -> list[DeliveryAttempt]:
    return list(DeliveryAttempt.select().where(DeliveryAttempt.delivery == delivery_id)
                .order_by(DeliveryAttempt.number))


def is_final(scan_id: str) -> bool:
    delivery = delivery_of(scan_id)
    return delivery is not None and delivery.status != "pending"


def start_scan(client, account, target="jane@example.com") -> str:
    r = client.post("/api/v1/scan", json={"target": target}, headers=account.headers)
    assert r.status_code == 202, r.json
    return r.json["scan_id"]


def scan_and_deliver(client, account, jobs, frozen, target="jane@example.com") -> WebhookDelivery:
    scan_id = start_scan(client, account, target)
    assert jobs.run(frozen, until=lambda: is_final(scan_id))
    return delivery_of(scan_id)


def finish_scan_only(client, account, redis_conn, frozen, target="jane@example.com") -> WebhookDelivery:
    """Run the engine queue only: the delivery row is written, its job still waits."""
    scan_id = start_scan(client, account, target)
    engine_only = JobRunner(redis_conn, queue_names=(ENGINE_QUEUE,))
    assert engine_only.run(frozen, until=lambda: delivery_of(scan_id) is not None)
    return delivery_of(scan_id)


def unix_ms(moment) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)


# --- success --------------------------------------------------------------------------------


def test_first_attempt_succeeds_with_exact_headers_and_body(client, hooked, jobs):
    account, hook = hooked()
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)

    assert delivery.status == "succeeded" and delivery.attempts == 1 and delivery.finished_at
    [attempt] = attempts_of(delivery.id)
    assert (attempt.number, attempt.outcome, attempt.status_code, attempt.error) == (1, "succeeded", 200, None)
    assert attempt.url == hook.url and json.loads(attempt.response_excerpt) == {"status": 200}

    [received] = hook.deliveries()
    raw = received["body"].encode()
    assert received["signature_valid"] is True
    assert raw == delivery.body.encode()
    headers = received["headers"]
    assert headers["X-Service-Event"] == "scan.completed"
    assert headers["X-Service-Signature"] == sign(SECRET, raw)
    assert headers["X-Service-Delivery"] == delivery.id and delivery.id.startswith("dlv_")
    assert headers["X-Service-Timestamp"] == str(unix_ms(attempt.started_at))
    assert headers["User-Agent"] == "Service-Webhook/1"
    assert headers["Content-Type"] == "application/json"

    body = json.loads(raw)
    read = client.get(f"/api/v1/scan/{delivery.scan_id}", headers=account.headers).json
    assert list(body) == ["event", "scan_id", "livemode", "target", "kind", "status", "purpose", "case_ref",
                          "completed_at", "result"]
    assert body["event"] == "scan.completed" and body["status"] == "completed"
    assert (body["scan_id"], body["target"], body["kind"]) == (read["scan_id"], read["target"], read["kind"])
    assert body["completed_at"] == read["completed_at"]
    assert set(body["result"]) == RESULT_FIELDS and body["result"] == read["result"]


def test_a_key_without_url_gets_no_delivery(client, make_customer, jobs):
    account = make_customer()
    with freeze_time(START) as frozen:
        scan_id = start_scan(client, account)
        assert jobs.run(frozen, until=lambda: Scan.get_by_id(scan_id).status == "completed")
        jobs.run(frozen)
    assert WebhookDelivery.select().count() == 0


def test_each_scan_of_a_bulk_batch_sends_its_webhook_with_the_bulk_id(client, hooked, jobs):
    account, hook = hooked()
    with freeze_time(START) as frozen:
        r = client.post("/api/v1/scan/bulk", headers=account.headers,
                        json={"targets": [{"target": "ann@example.com"}, {"target": "bob_handle"}]})
        assert r.status_code == 202, r.json
        bulk_id = r.json["bulk_id"]
        assert jobs.run(frozen, until=lambda: WebhookDelivery.select()
                        .where(WebhookDelivery.status == "succeeded").count() == 2)
    bodies = [json.loads(d["body"]) for d in hook.deliveries()]
    assert {b["scan_id"] for b in bodies} == {s["scan_id"] for s in r.json["scans"]}
    for body in bodies:
        assert list(body)[:3] == ["event", "scan_id", "bulk_id"] and body["bulk_id"] == bulk_id


def test_a_failed_scan_sends_scan_failed(client, hooked, jobs):
    account, hook = hooked()
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen, target="fail.case@example.com")
    [received] = hook.deliveries()
    assert received["headers"]["X-Service-Event"] == "scan.failed" and delivery.event == "scan.failed"
    body = json.loads(received["body"])
    read = client.get(f"/api/v1/scan/{delivery.scan_id}", headers=account.headers).json
    assert list(body) == ["event", "scan_id", "livemode", "target", "kind", "status", "purpose", "case_ref",
                          "failed_at", "failure"]
    assert (body["event"], body["status"]) == ("scan.failed", "failed")
    assert body["failed_at"] == read["failed_at"]
    assert body["failure"] == read["failure"] and body["failure"]["code"] == "engine_failed"


# --- retries --------------------------------------------------------------------------------


def test_a_500_then_200_takes_two_attempts(client, hooked, jobs):
    account, hook = hooked(responses=[500, 200])
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    assert delivery.status == "succeeded" and delivery.attempts == 2
    first, second = attempts_of(delivery.id)
    assert (first.outcome, first.status_code, json.loads(first.response_excerpt)) == ("failed", 500, {"status": 500})
    assert (second.outcome, second.status_code) == ("succeeded", 200)
    assert [d["response_status"] for d in hook.deliveries()] == [500, 200]


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
def test_retries_follow_the_schedule_then_the_delivery_fails(client, hooked, jobs):
    account, hook = hooked(responses=[500])
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
        assert jobs.pending() == 0 and jobs.next_scheduled() is None

    assert delivery.status == "failed" and delivery.attempts == 4 and delivery.finished_at
    attempts = attempts_of(delivery.id)
    assert [a.number for a in attempts] == [1, 2, 3, 4]
    assert all(a.outcome == "failed" and a.status_code == 500 for a in attempts)
    gaps = [(later.started_at - (earlier.started_at + timedelta(milliseconds=earlier.duration_ms))).total_seconds()
            for earlier, later in zip(attempts, attempts[1:])]
    assert gaps == [pytest.approx(0, abs=0.01), pytest.approx(30, abs=0.01), pytest.approx(300, abs=0.01)]
    assert len(hook.deliveries()) == 4


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(5, 30))
def test_every_attempt_sends_the_same_bytes_and_delivery_id_with_a_new_timestamp(client, hooked, jobs):
    account, hook = hooked(responses=[503, 500, 204])
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    received = hook.deliveries()
    assert [d["response_status"] for d in received] == [503, 500, 204] and delivery.status == "succeeded"
    assert {d["body"] for d in received} == {delivery.body}
    assert {d["headers"]["X-Service-Delivery"] for d in received} == {delivery.id}
    assert all(d["signature_valid"] for d in received)
    stamps = [int(d["headers"]["X-Service-Timestamp"]) for d in received]
    assert stamps == sorted(set(stamps))
    assert [b - a for a, b in zip(stamps, stamps[1:])] == [pytest.approx(5000, abs=10), pytest.approx(30000, abs=10)]


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(), WEBHOOK_TIMEOUT_SECONDS=0.3)
def test_a_receiver_slower_than_the_timeout_is_a_timeout(client, hooked, jobs):
    account, hook = hooked(delay_ms=900)
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    [attempt] = attempts_of(delivery.id)
    assert (attempt.outcome, attempt.error, attempt.status_code) == ("failed", "timeout", None)
    assert delivery.status == "failed" and len(hook.deliveries()) == 1


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_a_closed_port_is_a_connection_error(client, make_customer, jobs):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    account = make_customer(webhook_url=f"http://127.0.0.1:{port}/hook", webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    [attempt] = attempts_of(delivery.id)
    assert (attempt.outcome, attempt.error, attempt.status_code) == ("failed", "connection_error", None)
    assert attempt.duration_ms is not None and delivery.status == "failed"


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_a_redirect_is_a_failure_and_is_not_followed(client, hooked, receiver, jobs):
    account, hook = hooked(responses=[302])
    target = receiver(name=f"{hook.name}-redirected")
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    [attempt] = attempts_of(delivery.id)
    assert (attempt.outcome, attempt.error, attempt.status_code) == ("failed", "redirect_not_followed", 302)
    assert delivery.status == "failed"
    assert len(hook.deliveries()) == 1 and target.deliveries() == []


# --- exactly once ---------------------------------------------------------------------------


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(30,))
def test_duplicate_and_replayed_jobs_send_nothing_twice(client, hooked, jobs, redis_conn):
    account, hook = hooked(responses=[500, 200])
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        first_job = delivery.job_id
        enqueue_delivery(delivery.id, first_job)  # a duplicate of the waiting job
        assert jobs.run(frozen, until=lambda: WebhookDelivery.get_by_id(delivery.id).attempts == 1)
        assert len(hook.deliveries()) == 1

        enqueue_delivery(delivery.id, first_job)  # a replay while attempt 2 is scheduled
        jobs.run()
        assert len(hook.deliveries()) == 1

        assert jobs.run(frozen, until=lambda: is_final(delivery.scan_id))
        for number in (1, 2):  # replays after the delivery succeeded
            enqueue_delivery(delivery.id, delivery_job_id(delivery.id, number))
        assert jobs.pending() == 2
        jobs.run(frozen)
        assert jobs.pending() == 0
    assert len(hook.deliveries()) == 2
    assert [a.number for a in attempts_of(delivery.id)] == [1, 2]
    assert WebhookDelivery.get_by_id(delivery.id).attempts == 2


def test_two_jobs_racing_for_one_attempt_claim_it_once(client, hooked, redis_conn):
    account, _ = hooked()
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        claims = [deliveries.reserve(delivery, 1, delivery.job_id, utcnow()) for _ in range(2)]
    assert claims[0] is not None and claims[1] is None
    assert [a.outcome for a in attempts_of(delivery.id)] == ["in_progress"]


def _kill_worker_mid_attempt(delivery: WebhookDelivery, redis_conn) -> None:
    """What a worker killed during its HTTP request leaves: the attempt claimed and
    logged as in progress, and no job in Redis (RQ dropped the abandoned job)."""
    assert deliveries.reserve(delivery, 1, delivery.job_id, utcnow()) is not None
    Job.fetch(delivery.job_id, connection=redis_conn).delete()


def test_an_attempt_abandoned_by_a_killed_worker_is_closed_and_the_schedule_goes_on(
        client, hooked, jobs, redis_conn):
    account, hook = hooked()
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        _kill_worker_mid_attempt(delivery, redis_conn)

        frozen.tick(deliveries.ATTEMPT_DEADLINE_SECONDS - 1)
        assert sweep()["attempts_closed"] == 0  # it may still be running

        frozen.tick(2)
        report = sweep()
        assert (report["attempts_closed"], report["deliveries_redispatched"]) == (1, 1)
        assert sweep()["attempts_closed"] == 0
        assert jobs.run(frozen, until=lambda: is_final(delivery.scan_id))

    lost, second = attempts_of(delivery.id)
    assert (lost.number, lost.outcome, lost.error, lost.status_code) == (1, "failed", "worker_lost", None)
    assert (second.number, second.outcome, second.status_code) == (2, "succeeded", 200)
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"
    assert len(hook.deliveries()) == 1


def test_a_late_answer_from_a_worker_taken_for_lost_is_not_logged_twice(client, hooked, redis_conn):
    account, _ = hooked()
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        attempt = deliveries.reserve(delivery, 1, delivery.job_id, utcnow())
        Job.fetch(delivery.job_id, connection=redis_conn).set_status(JobStatus.STARTED)  # still hanging
        frozen.tick(deliveries.ATTEMPT_DEADLINE_SECONDS + 1)
        assert sweep()["attempts_closed"] == 1
        late = deliveries.record(delivery, attempt, deliveries.Outcome(status_code=200, duration_ms=5))
    assert late == "superseded"
    assert [(a.number, a.error) for a in attempts_of(delivery.id)] == [(1, "worker_lost")]
    assert WebhookDelivery.get_by_id(delivery.id).job_id == delivery_job_id(delivery.id, 2)


def test_a_delivery_whose_job_redis_lost_is_enqueued_by_the_sweep(client, hooked, jobs, redis_conn):
    account, hook = hooked()
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        redis_conn.flushdb()
        assert sweep()["deliveries_redispatched"] == 0  # too recent: its job may be on its way

        frozen.tick(61)
        assert sweep()["deliveries_redispatched"] == 1
        assert sweep()["deliveries_redispatched"] == 0  # now queued again
        assert jobs.run(frozen, until=lambda: is_final(delivery.scan_id))
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"
    assert len(hook.deliveries()) == 1


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(300,))
def test_a_lost_scheduled_retry_keeps_its_due_time(client, hooked, jobs, redis_conn):
    account, hook = hooked(responses=[500, 200])
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        assert jobs.run(frozen, until=lambda: WebhookDelivery.get_by_id(delivery.id).attempts == 1)
        redis_conn.flushdb()
        frozen.tick(100)
        assert sweep()["deliveries_redispatched"] == 1
        assert jobs.run(frozen, until=lambda: is_final(delivery.scan_id))
    first, second = attempts_of(delivery.id)
    assert (second.started_at - first.started_at).total_seconds() == pytest.approx(300, abs=0.01)
    assert [d["response_status"] for d in hook.deliveries()] == [500, 200]


# --- secrets --------------------------------------------------------------------------------


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(30,))
def test_a_retry_after_rotation_is_signed_with_the_new_secret(client, hooked, jobs, redis_conn):
    account, hook = hooked(responses=[500, 200])
    with freeze_time(START) as frozen:
        delivery = finish_scan_only(client, account, redis_conn, frozen)
        assert jobs.run(frozen, until=lambda: WebhookDelivery.get_by_id(delivery.id).attempts == 1)
        new_secret = signing_secrets.generate_secret(account.key.id, account.customer.id)
        assert jobs.run(frozen, until=lambda: is_final(delivery.scan_id))
    first, second = hook.deliveries()
    raw = delivery.body.encode()
    assert verify_signature(SECRET, raw, first["headers"]["X-Service-Signature"])
    assert verify_signature(new_secret, raw, second["headers"]["X-Service-Signature"])
    assert not verify_signature(SECRET, raw, second["headers"]["X-Service-Signature"])


def test_a_key_without_secret_sends_unsigned(client, make_customer, receiver, jobs):
    hook = receiver()
    account = make_customer(webhook_url=hook.url)
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    [received] = hook.deliveries()
    assert delivery.status == "succeeded"
    assert "X-Service-Signature" not in received["headers"] and received["signature_valid"] is False


def test_the_secret_is_never_logged_nor_stored_in_clear(client, hooked, jobs, caplog):
    caplog.set_level(logging.DEBUG)
    account, hook = hooked(responses=[500, 200])
    with freeze_time(START) as frozen:
        delivery = scan_and_deliver(client, account, jobs, frozen)
    assert delivery.status == "succeeded" and len(hook.deliveries()) == 2
    assert caplog.records and SECRET not in caplog.text
    stored = [json.dumps(list(WebhookDelivery.select().where(WebhookDelivery.id == delivery.id).dicts()),
                         default=str),
              json.dumps(list(DeliveryAttempt.select().dicts()), default=str),
              ApiKey.get_by_id(account.key.id).webhook_secret_enc]
    assert all(SECRET not in text for text in stored)


# --- what a receiver answers --------------------------------------------------------------

class BodyReceiver:
    """A receiver answering 200 with fixed bytes, on a real socket; counts the requests."""

    def __init__(self, body: bytes, content_type: str):
        self.body, self.content_type, self.requests = body, content_type, 0

    def __call__(self, environ, start_response):
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        self.requests += 1
        start_response("200 OK", [("Content-Type", self.content_type), ("Content-Length", str(len(self.body)))])
        return [self.body]


ODD_BODIES = {
    # name: (answer, content type, what the attempt keeps)
    "a NUL byte": (b'{"ok":true}\x00trailer', "application/json", '{"ok":true}trailer'),
    "binary": (bytes(range(256)) * 8, "application/octet-stream",
               "".join(chr(b) if b < 0x80 else "\ufffd" for b in range(1, 256)) * 4),
    "UTF-16 text": ("accepted, thank you".encode("utf-16"), "text/plain; charset=utf-16",
                    "\ufffd\ufffdaccepted, thank you"),
    "UTF-8 cut mid-character at 1 KiB": ("é".encode() * 1000, "text/plain", "é" * 512),
}


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
@pytest.mark.parametrize("kind", list(ODD_BODIES), ids=list(ODD_BODIES))
def test_a_2xx_with_any_body_is_recorded_once_as_succeeded(client, make_customer, jobs, kind):
    """Whatever bytes a receiver answers, its 200 is recorded on one attempt and the excerpt is
    stored as text (PostgreSQL refuses NUL in text: a failed write used to leave the attempt
    open, and the sweep sent the delivery again)."""
    from tests.conftest import ServerThread
    body, content_type, kept = ODD_BODIES[kind]
    app_ = BodyReceiver(body, content_type)
    server = ServerThread(app_)
    try:
        account = make_customer(webhook_url=f"{server.url}/hook", webhook_secret=SECRET)
        with freeze_time(START) as frozen:
            delivery = scan_and_deliver(client, account, jobs, frozen)
            frozen.tick(3600)  # long after any retry or sweep would have come
            sweep()
            assert jobs.run(frozen)
    finally:
        server.stop()
    delivery = WebhookDelivery.get_by_id(delivery.id)
    [attempt] = attempts_of(delivery.id)
    assert (delivery.status, delivery.attempts) == ("succeeded", 1)
    assert (attempt.outcome, attempt.status_code, attempt.error) == ("succeeded", 200, None)
    assert attempt.response_excerpt == kept
    assert "\x00" not in attempt.response_excerpt and len(attempt.response_excerpt.encode()) <= 4 * 1024
    assert app_.requests == 1


class StallingReceiver:
    """A raw socket server that reads the request, sends the first bytes of an answer, then
    stalls (holds the connection open, sending nothing more) until ``stop``."""

    def __init__(self, prefix: bytes):
        self.prefix, self.requests = prefix, 0
        self.released = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.released.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)  # the request (small: a test event)
                self.requests += 1
                conn.sendall(self.prefix)
                self.released.wait(30)

    def stop(self):
        self.released.set()
        self.listener.close()


STALLS = {
    "after the status line": b"HTTP/1.1 200 OK\r\n",
    "after the headers": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nack",
}


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(), WEBHOOK_TIMEOUT_SECONDS=0.5)
@pytest.mark.parametrize("stall", list(STALLS), ids=list(STALLS))
def test_an_answer_not_complete_within_the_timeout_is_a_timeout(client, make_customer, jobs, stall):
    """A 200 that starts in time but does not finish (the receiver stalls after its status line or
    its headers) acknowledges nothing: the attempt is a timeout, not a success."""
    receiver = StallingReceiver(STALLS[stall])
    try:
        account = make_customer(webhook_url=f"{receiver.url}/hook", webhook_secret=SECRET)
        with freeze_time(START) as frozen:
            delivery = scan_and_deliver(client, account, jobs, frozen)
    finally:
        receiver.stop()
    [attempt] = attempts_of(delivery.id)
    assert attempt.error == "timeout"
    assert attempt.outcome == "failed"
    assert delivery.status == "failed"
    assert receiver.requests == 1
