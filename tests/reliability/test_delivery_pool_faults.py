"""The delivery pool of ``python -m workers`` under faults (D13, D18): a worker SIGKILLed with
deliveries in flight and parked, and Redis restarted empty under it.

Real processes and real parts: ``python -m workers`` (its pool's threads), a dedicated
redis-server, the test's database, and a receiver on a real socket that holds requests open
until it is told to answer (or until its client hangs up). Whatever the fault, every delivery
arrives and is acknowledged exactly once; each HTTP request the receiver saw has exactly one
attempt row, written before the request; every attempt of a delivery carries the same delivery
id and the same body bytes. Waits are bounded polls (``wait_until``), never fixed sleeps.
"""
from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import redis as redis_lib
from freezegun import freeze_time

from app.extensions import db
from app.plumbing.models import utcnow
from app.recovery import sweep
from app.webhooks import deliveries, outbox
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from tests.conftest import ServerThread
from tests.processes import WorkerProcess, service_env, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEADLINE = 60
POOL, PER_ENDPOINT = 8, 4  # the receiver is one endpoint: PER_ENDPOINT requests in flight, the rest parked


class HoldingReceiver:
    """A webhook receiver that, while ``holding``, keeps each request open until it is released
    (then answers 200) or its client hangs up (then it never answered: "abandoned").

    ``requests``: one record per HTTP request, in arrival order: the delivery id header, the
    exact body bytes, and how it ended ("held", 200, "abandoned")."""

    def __init__(self):
        self.holding = threading.Event()
        self.holding.set()
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.server = ServerThread(self)
        self.url = f"{self.server.url}/hook"

    def __call__(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        record = {"delivery": environ.get("HTTP_X_SERVICE_DELIVERY"), "webhook_id": environ.get("HTTP_WEBHOOK_ID"),
                  "signature": environ.get("HTTP_X_SERVICE_SIGNATURE"), "body": body, "end": "held"}
        with self.lock:
            self.requests.append(record)
        sock = environ.get("werkzeug.socket")
        while self.holding.is_set():
            if sock is not None and _hung_up(sock):
                with self.lock:
                    record["end"] = "abandoned"
                start_response("499 Client Closed Request", [("Content-Length", "0")])
                return [b""]
        with self.lock:
            record["end"] = 200
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    def ended(self, how) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["end"] == how]

    def by_delivery(self) -> dict[str, list[dict]]:
        with self.lock:
            found: dict[str, list[dict]] = {}
            for record in self.requests:
                found.setdefault(record["delivery"], []).append(record)
            return found


def _hung_up(sock, wait: float = 0.05) -> bool:
    """True when the client closed its end (the request was read in full: EOF is all that can come)."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def worker_env(app, simulator, tmp_path, redis_url) -> dict:
    # The workers' own sweep is out of the way (RECOVERY_*): the recovery under test is the one run here.
    return service_env(app, simulator.url, tmp_path / "instance", REDIS_URL=redis_url, WEBHOOK_CONCURRENCY=POOL,
                       WEBHOOK_ENDPOINT_CONCURRENCY=PER_ENDPOINT, WEBHOOK_TIMEOUT_SECONDS=60, RECOVERY_INTERVAL_SECONDS=300,
                       RECOVERY_STALE_SECONDS=300, WEBHOOK_RETRY_SCHEDULE="0,30,300", LOG_LEVEL="INFO",
                       LOG_FORMAT="text")


def send_test_events(account, n: int) -> dict[str, bytes]:
    """``n`` deliveries to the account's receiver; their exact body bytes, by delivery id."""
    with db.connection_context():
        made = [outbox.send_test_event(account.key.id, account.customer.id) for _ in range(n)]
    return {d.id: d.body.encode("utf-8") for d in made}


def rows(key_id: str) -> tuple[dict, dict]:
    """(delivery id -> row, delivery id -> its attempt rows in order)."""
    with db.connection_context():
        found = {d.id: d for d in WebhookDelivery.select().where(WebhookDelivery.api_key == key_id)}
        attempts: dict[str, list] = {d: [] for d in found}
        for attempt in (DeliveryAttempt.select().join(WebhookDelivery).where(WebhookDelivery.api_key == key_id)
                        .order_by(DeliveryAttempt.number)):
            attempts[attempt.delivery_id].append(attempt)
    return found, attempts


def in_progress(key_id: str) -> int:
    return sum(a.outcome == "in_progress" for attempts in rows(key_id)[1].values() for a in attempts)


def in_flight_and_parked(receiver, account, redis_server) -> bool:
    """PER_ENDPOINT requests held by the receiver, one attempt row each, and every other job taken
    from Redis by the pool (parked in its memory)."""
    return (len(receiver.requests) == PER_ENDPOINT and in_progress(account.key.id) == PER_ENDPOINT
            and redis_lib.Redis.from_url(redis_server.url).llen("rq:queue:webhooks") == 0)


def all_succeeded(key_id: str) -> bool:
    return {d.status for d in rows(key_id)[0].values()} == {"succeeded"}


def assert_one_row_per_request(receiver: HoldingReceiver, bodies: dict[str, bytes], key_id: str) -> dict:
    """Every delivery succeeded, acknowledged once; one attempt row per request seen, in order;
    the same id and body bytes on every attempt. Returns the attempt rows by delivery."""
    found, attempts = rows(key_id)
    seen = receiver.by_delivery()
    assert sorted(found) == sorted(bodies) == sorted(seen)
    for delivery_id, requests_seen in seen.items():
        assert found[delivery_id].status == "succeeded", delivery_id
        mine = attempts[delivery_id]
        assert [a.number for a in mine] == list(range(1, found[delivery_id].attempts + 1))
        # One row per HTTP request: the i-th request the receiver saw is the i-th row.
        assert len(mine) == len(requests_seen), (delivery_id, [a.outcome for a in mine], requests_seen)
        for attempt, request in zip(mine, requests_seen):
            assert (attempt.outcome == "succeeded") == (request["end"] == 200), (attempt.outcome, request["end"])
        assert [r["end"] for r in requests_seen].count(200) == 1  # acknowledged exactly once
        assert [a.outcome for a in mine].count("succeeded") == 1
        # The same delivery id and the same bytes on every attempt (the receiver dedupes on the id).
        assert {r["delivery"] for r in requests_seen} == {r["webhook_id"] for r in requests_seen} == {delivery_id}
        assert {r["body"] for r in requests_seen} == {bodies[delivery_id]}
        assert len({r["signature"] for r in requests_seen}) == 1
    return attempts


@pytest.mark.config(WEBHOOK_TEST_EVENTS_PER_MINUTE=1000, WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
@pytest.mark.processes  # python -m workers, a dedicated redis-server
def test_a_worker_sigkilled_mid_delivery_loses_nothing_and_the_sweep_redelivers(
        redis_app, dedicated_redis, make_customer, simulator, tmp_path):
    receiver = HoldingReceiver()
    account = make_customer(webhook_url=receiver.url)
    env = worker_env(redis_app, simulator, tmp_path, dedicated_redis.url)
    workers: list[WorkerProcess] = []
    n = 10
    try:
        bodies = send_test_events(account, n)
        workers.append(WorkerProcess(env, tmp_path / "worker-1.log", stop_seconds=20))
        # PER_ENDPOINT requests held open by the receiver, the other deliveries parked in the pool.
        wait_for(lambda: in_flight_and_parked(receiver, account, dedicated_redis), DEADLINE,
                 "the pool's requests in flight, the other jobs parked", workers)

        workers[0].kill(signal.SIGKILL)
        assert workers[0].proc.returncode == -signal.SIGKILL
        # The receiver sees its clients hang up: those requests were never answered.
        wait_for(lambda: len(receiver.ended("abandoned")) == PER_ENDPOINT, 20, "the abandoned requests")
        receiver.holding.clear()  # from now on it answers at once
        assert in_progress(account.key.id) == PER_ENDPOINT
        assert {d.status for d in rows(account.key.id)[0].values()} == {"pending"}

        workers.append(WorkerProcess(env, tmp_path / "worker-2.log", stop_seconds=20))
        # Nothing comes back by itself: the killed worker's jobs are gone (marked started in Redis).
        with freeze_time(utcnow() + timedelta(seconds=deliveries.ATTEMPT_DEADLINE_SECONDS + 5)):
            report = sweep(at_once=True)
        assert report["attempts_closed"] == PER_ENDPOINT  # the abandoned rows, closed as worker_lost
        # Every delivery re-dispatched: the parked ones with their job again, the lost ones with the next.
        assert report["deliveries_redispatched"] == n
        wait_for(lambda: all_succeeded(account.key.id), DEADLINE, "every delivery to succeed", workers)
        assert workers[1].proc.poll() is None
    finally:
        receiver.holding.clear()
        for worker in workers:
            worker.kill(signal.SIGTERM)
        receiver.server.stop()

    attempts = assert_one_row_per_request(receiver, bodies, account.key.id)
    lost = [a for mine in attempts.values() for a in mine if a.outcome != "succeeded"]
    assert len(lost) == PER_ENDPOINT and {(a.outcome, a.error, a.number) for a in lost} == {("failed", "worker_lost", 1)}
    assert sorted(len(mine) for mine in attempts.values()) == [1] * (n - PER_ENDPOINT) + [2] * PER_ENDPOINT
    assert len(receiver.ended(200)) == n and len(receiver.requests) == n + PER_ENDPOINT
    assert "Traceback" not in workers[1].output(), workers[1].output()[-3000:]


@pytest.mark.config(WEBHOOK_TEST_EVENTS_PER_MINUTE=1000, WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
@pytest.mark.processes  # python -m workers, a dedicated redis-server, the CLI
def test_redis_restarted_empty_under_the_pool_loses_no_delivery(
        redis_app, dedicated_redis, make_customer, simulator, tmp_path):
    receiver = HoldingReceiver()
    account = make_customer(webhook_url=receiver.url)
    env = worker_env(redis_app, simulator, tmp_path, dedicated_redis.url)
    worker = None
    n, while_down = 10, 3
    try:
        bodies = send_test_events(account, n)
        worker = WorkerProcess(env, tmp_path / "worker.log", stop_seconds=20)
        wait_for(lambda: in_flight_and_parked(receiver, account, dedicated_redis), DEADLINE,
                 "the pool's requests in flight, the other jobs parked", [worker])

        dedicated_redis.kill()  # SIGKILL, no persistence: every job, queued, parked or running, is gone
        bodies.update(send_test_events(account, while_down))  # their dispatch fails: left for the sweep
        dedicated_redis.start()  # empty
        # The operator's command, right after Redis came back, with requests still held and jobs parked.
        recover = subprocess.run([str(BIN / "flask"), "--app", "wsgi", "scans", "recover", "--json"], cwd=ROOT,
                                 env=env, capture_output=True, text=True, timeout=60)
        assert recover.returncode == 0, recover.stderr
        report = json.loads(recover.stdout)
        # The parked jobs (their copies in Redis gone) and those dispatched while it was down; the
        # requests in flight are left to their worker (their attempt rows are recent).
        assert report["deliveries_redispatched"] == n - PER_ENDPOINT + while_down and report["attempts_closed"] == 0
        receiver.holding.clear()
        wait_for(lambda: all_succeeded(account.key.id), DEADLINE, "every delivery to succeed", [worker])
        assert worker.proc.poll() is None  # it rode out the restart
    finally:
        receiver.holding.clear()
        if worker is not None:
            worker.kill(signal.SIGTERM)
        receiver.server.stop()

    attempts = assert_one_row_per_request(receiver, bodies, account.key.id)
    # No kill: one request and one row per delivery, the re-dispatched duplicates made none.
    assert all(len(mine) == 1 for mine in attempts.values()) and len(attempts) == n + while_down
    assert len(receiver.requests) == n + while_down
    assert "Traceback" not in worker.output(), worker.output()[-3000:]
