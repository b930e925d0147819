"""The delivery pool (D18): many deliveries at once in one worker process, a bounded share
per endpoint (a larger ceiling per receiver host), and engine tracking on its own loop.

Receivers are real HTTP servers on real threads; the pool runs its real threads against the
test's Redis and database. Waits are bounded polls on the database, never fixed sleeps.
"""
from __future__ import annotations

import threading
import time

import pytest
from peewee import OperationalError
from rq import Queue

from app.accounts.models import ApiKey
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.jobs import (
    ENGINE_QUEUE,
    WEBHOOK_QUEUE,
    delivery_job_id,
    enqueue_delivery,
    enqueue_engine_deletions,
    promote_due,
)
from app.webhooks import deliveries, endpoints, outbox
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from simulator.procutil import wait_until
from tests.conftest import ServerThread
from workers import delivery_pool, webhook_jobs
from workers.__main__ import build_worker
from workers.database_gate import DatabaseGate
from workers.delivery_pool import DeliveryPool, host_of


class Receiver:
    """Answers 200, at once or when ``release`` is set; counts requests and the most at once."""

    def __init__(self, hang: bool):
        self.release = threading.Event()
        if not hang:
            self.release.set()
        self.lock = threading.Lock()
        self.ids: list[str] = []
        self.now = self.most = 0
        self.server = ServerThread(self)

    def __call__(self, environ, start_response):
        with self.lock:
            self.ids.append(environ.get("HTTP_X_SERVICE_DELIVERY"))
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            self.release.wait(60)
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        finally:
            with self.lock:
                self.now -= 1


def statuses(key_id: str) -> dict:
    with db.connection_context():
        rows = WebhookDelivery.select(WebhookDelivery.status).where(WebhookDelivery.api_key == key_id)
        counts: dict = {}
        for row in rows:
            counts[row.status] = counts.get(row.status, 0) + 1
        return counts


def attempts_by_delivery(key_id: str) -> dict:
    with db.connection_context():
        query = (DeliveryAttempt.select(DeliveryAttempt.delivery, DeliveryAttempt.outcome)
                 .join(WebhookDelivery).where(WebhookDelivery.api_key == key_id))
        found: dict = {}
        for attempt in query:
            found.setdefault(attempt.delivery_id, []).append(attempt.outcome)
        return found


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_a_hanging_receiver_takes_its_share_and_the_others_keep_flowing(make_customer):
    hanging, fast = Receiver(hang=True), Receiver(hang=False)
    slow_account = make_customer(webhook_url=f"{hanging.server.url}/hook")
    fast_account = make_customer(webhook_url=f"{fast.server.url}/hook")
    with db.connection_context():
        # The hanging receiver's deliveries first: one at a time, they would hold everything up.
        slow_ids = [outbox.send_test_event(slow_account.key.id, slow_account.customer.id).id for _ in range(12)]
        fast_ids = [outbox.send_test_event(fast_account.key.id, fast_account.customer.id).id for _ in range(30)]
    pool = DeliveryPool(size=6, per_endpoint=2).start()
    try:
        wait_until(lambda: statuses(fast_account.key.id) == {"succeeded": 30}, 30, "the fast receiver's deliveries")
        # Meanwhile the hanging receiver held two requests, never more, and nothing else was sent to it.
        assert hanging.most == 2 and len(hanging.ids) == 2
        assert sorted(fast.ids) == sorted(fast_ids)
        slow = attempts_by_delivery(slow_account.key.id)
        assert sorted(slow.values()) == [["in_progress"], ["in_progress"]]  # one row, written before each request
        assert statuses(slow_account.key.id) == {"pending": 12}

        hanging.release.set()
        wait_until(lambda: statuses(slow_account.key.id) == {"succeeded": 12}, 30, "the hanging receiver's deliveries")
        assert sorted(hanging.ids) == sorted(slow_ids)  # each sent once, in the end
        assert hanging.most == 2
        assert all(outcomes == ["succeeded"] for outcomes in attempts_by_delivery(slow_account.key.id).values())
        assert all(outcomes == ["succeeded"] for outcomes in attempts_by_delivery(fast_account.key.id).values())
        assert len(attempts_by_delivery(slow_account.key.id)) == 12
    finally:
        hanging.release.set()
        pool.stop(timeout=10)
        hanging.server.stop()
        fast.server.stop()
    # Jobs done leave nothing behind in Redis: no queued job, no job hash.
    assert runtime.redis().keys("rq:job:dlv-*") == [] and Queue(WEBHOOK_QUEUE, connection=runtime.redis()).count == 0


class PathReceiver(Receiver):
    """One server (one host and port) for several endpoints: requests to ``/hang`` wait for
    ``release``, the others are answered at once; records when each delivery arrived."""

    def __init__(self):
        super().__init__(hang=True)
        self.arrived: dict[str, float] = {}

    def __call__(self, environ, start_response):
        if environ["PATH_INFO"] == "/hang":
            return super().__call__(environ, start_response)
        with self.lock:
            self.arrived[environ.get("HTTP_X_SERVICE_DELIVERY")] = time.time()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_a_hanging_endpoint_does_not_hold_up_another_customers_endpoint_on_the_same_host(make_customer):
    """Two customers' endpoints on one host and port (a shared gateway): the hanging one holds its
    own share and nothing more; the other's deliveries arrive within a second of being made, while
    the hanging endpoint still holds its requests. (With the share per host, they waited behind it.)"""
    receiver = PathReceiver()
    slow_account = make_customer(webhook_url=f"{receiver.server.url}/hang")
    fast_account = make_customer(webhook_url=f"{receiver.server.url}/fast")
    pool = DeliveryPool(size=8, per_endpoint=2, per_host=4).start()
    try:
        with db.connection_context():
            for _ in range(10):
                outbox.send_test_event(slow_account.key.id, slow_account.customer.id)
        wait_until(lambda: receiver.most == 2 and pool.parked() == 8, 30, "the hanging endpoint at its share")
        made = {}
        with db.connection_context():
            for _ in range(20):
                delivery = outbox.send_test_event(fast_account.key.id, fast_account.customer.id)
                made[delivery.id] = time.time()
        wait_until(lambda: statuses(fast_account.key.id) == {"succeeded": 20}, 30, "the fast endpoint's deliveries")
        assert statuses(slow_account.key.id) == {"pending": 10}  # still held: nothing waited for it to end
        assert receiver.most == 2
        assert set(receiver.arrived) == set(made)
        delays = sorted(receiver.arrived[d] - made[d] for d in made)
        assert delays[-1] < 1.0, delays
    finally:
        receiver.release.set()
        pool.stop(timeout=10)
        receiver.server.stop()


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_two_endpoints_of_one_key_at_the_same_url_hold_a_share_each(make_customer):
    """The share is the endpoint's (D22), not the key's URL's: two endpoints of one key posting to the
    same hanging URL hold ``per_endpoint`` requests each (keyed by key and URL they would share one)."""
    receiver = Receiver(hang=True)
    account = make_customer(webhook_url=receiver.server.url)
    pool = DeliveryPool(size=8, per_endpoint=2, per_host=8).start()
    try:
        with db.connection_context():
            key = ApiKey.get_by_id(account.key.id)
            second, _ = endpoints.create(key, url=receiver.server.url, events=["endpoint.disabled"])
            for _ in range(4):
                outbox.send_test_event(key.id, account.customer.id)  # to the first endpoint
                outbox.record_key_event(key, {"event": "endpoint.disabled"},  # its job goes with the row
                                          leave_out=outbox.first_endpoint_id(key.id))
        wait_until(lambda: receiver.most == 4 and pool.parked() == 4, 30, "each endpoint at its own share")
        receiver.release.set()
        wait_until(lambda: statuses(account.key.id) == {"succeeded": 8}, 30, "every delivery sent")
        assert receiver.most == 4
        with db.connection_context():
            assert WebhookDelivery.select().where(WebhookDelivery.endpoint_id == second["endpoint_id"]).count() == 4
    finally:
        receiver.release.set()
        pool.stop(timeout=10)
        receiver.server.stop()


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_the_host_ceiling_bounds_one_host_across_its_endpoints(make_customer):
    """Politeness toward a receiver many customers share: at most ``per_host`` requests to one
    host and port whatever the endpoints; the others wait parked and are all sent in the end."""
    receiver = Receiver(hang=True)
    accounts = [make_customer(webhook_url=f"{receiver.server.url}/hook/{n}") for n in range(3)]
    pool = DeliveryPool(size=8, per_endpoint=2, per_host=3).start()
    try:
        with db.connection_context():
            for account in accounts:
                for _ in range(2):
                    outbox.send_test_event(account.key.id, account.customer.id)
        wait_until(lambda: receiver.now == 3 and pool.parked() == 3, 30, "three in flight, three parked")
        receiver.release.set()
        for account in accounts:
            wait_until(lambda a=account: statuses(a.key.id) == {"succeeded": 2}, 30, "every delivery")
        assert receiver.most == 3
        assert len(receiver.ids) == 6
    finally:
        receiver.release.set()
        pool.stop(timeout=10)
        receiver.server.stop()


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_a_warm_stop_puts_the_parked_jobs_back_in_redis(make_customer):
    hanging = Receiver(hang=True)
    account = make_customer(webhook_url=f"{hanging.server.url}/hook")
    with db.connection_context():
        for _ in range(5):
            outbox.send_test_event(account.key.id, account.customer.id)
    pool = DeliveryPool(size=4, per_endpoint=1).start()
    try:
        wait_until(lambda: pool.parked() == 4 and len(hanging.ids) == 1, 30, "one request and four parked jobs")
        stopper = threading.Thread(target=pool.stop, kwargs={"timeout": 20})
        stopper.start()
        wait_until(lambda: Queue(WEBHOOK_QUEUE, connection=runtime.redis()).count == 4, 10, "the parked jobs back")
        hanging.release.set()  # the request in flight ends, and is recorded
        stopper.join(20)
    finally:
        hanging.release.set()
        hanging.server.stop()
    assert statuses(account.key.id) == {"succeeded": 1, "pending": 4} and len(hanging.ids) == 1


def test_rq_s_loop_leaves_the_webhooks_queue_to_the_pool(app, redis_conn):
    """Engine jobs are taken by RQ's loop, delivery jobs are left for the pool."""
    enqueue_delivery("dlv_nothing", "dlv-dlv_nothing-1")
    enqueue_engine_deletions(["edl_nothing"])
    worker = build_worker(pooled=(WEBHOOK_QUEUE,))
    worker.work(burst=True, with_scheduler=False, logging_level="WARNING")
    assert Queue(ENGINE_QUEUE, connection=redis_conn).count == 0
    assert Queue(WEBHOOK_QUEUE, connection=redis_conn).job_ids == ["dlv-dlv_nothing-1"]


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=60, WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_a_parked_job_with_nothing_to_send_does_not_strand_the_jobs_parked_behind_it(make_customer):
    """A duplicate of a parked job (the sweep re-enqueues jobs it cannot see alive, parked ones
    included) finds its delivery done when its turn comes; the thread goes on with the host's next
    parked job. It used to stop there: the jobs behind it waited for the sweep."""
    hanging = Receiver(hang=True)
    account = make_customer(webhook_url=f"{hanging.server.url}/hook")
    pool = DeliveryPool(size=4, per_endpoint=1).start()

    def send():
        with db.connection_context():
            return outbox.send_test_event(account.key.id, account.customer.id)

    try:
        send()
        wait_until(lambda: len(hanging.ids) == 1, 10, "the first request held")
        second = send()
        wait_until(lambda: pool.parked() == 1, 10, "the second delivery parked")
        enqueue_delivery(second.id, second.job_id)  # its duplicate, parked behind it
        wait_until(lambda: pool.parked() == 2, 10, "the duplicate parked")
        third = send()
        wait_until(lambda: pool.parked() == 3, 10, "the third delivery parked behind the duplicate")
        hanging.release.set()
        wait_until(lambda: statuses(account.key.id) == {"succeeded": 3}, 10, "every delivery, the third included")
        assert sorted(hanging.ids) == sorted(d for d in attempts_by_delivery(account.key.id))  # one request each
        assert third.id in hanging.ids and pool.parked() == 0
    finally:
        hanging.release.set()
        pool.stop(timeout=10)
        hanging.server.stop()


@pytest.mark.parametrize("url, host", [
    ("https://Hooks.Example.com/a", "hooks.example.com:443"),
    ("http://hooks.example.com/a", "hooks.example.com:80"),
    ("https://hooks.example.com:8443/b?x=1", "hooks.example.com:8443"),
])
def test_the_host_ceiling_is_per_host_name_and_port(url, host):
    assert host_of(url) == host


class FlakyConnections:
    """The database refusing some of the delivery threads' connections, as a PostgreSQL out of
    connection slots does ("too many clients"): every ``every``-th connection a delivery thread
    opens fails, up to ``failures`` times. Other threads (the test's own reads) are not touched."""

    def __init__(self, database, every: int, failures: int):
        self.real = database._connect
        self.every, self.left = every, failures
        self.lock = threading.Lock()
        self.opened = self.refused = 0

    def __call__(self):
        if threading.current_thread().name.startswith("delivery"):
            with self.lock:
                self.opened += 1
                refuse = self.left > 0 and self.opened % self.every == 1
                if refuse:
                    self.left -= 1
                    self.refused += 1
            if refuse:
                raise OperationalError("FATAL:  sorry, too many clients already")
        return self.real()


@pytest.mark.config(WEBHOOK_TEST_EVENTS_PER_MINUTE=1000)
def test_a_job_that_meets_a_database_error_is_retried_not_dropped(make_customer, monkeypatch, redis_conn):
    """A failed connection before the request puts the job back on the schedule; one after it
    (the outcome could not be recorded) is recorded again: every delivery arrives once and ends
    succeeded, none waits for the recovery sweep."""
    receiver = Receiver(hang=False)
    account = make_customer(webhook_url=f"{receiver.server.url}/hook")
    with db.connection_context():
        ids = [outbox.send_test_event(account.key.id, account.customer.id).id for _ in range(20)]
    # Connections 1, 4, 7, ... of the delivery threads fail: both the first (load and reserve)
    # and the second (record) service call of some jobs meet a refused connection.
    flaky = FlakyConnections(db.obj, every=3, failures=12)
    monkeypatch.setattr(db.obj, "_connect", flaky)
    monkeypatch.setattr(delivery_pool, "ERROR_RETRY_SECONDS", 0.2)
    monkeypatch.setattr(webhook_jobs, "RECORD_RETRY_PAUSES", (0.05, 0.05, 0.05))
    webhook_queue = Queue(WEBHOOK_QUEUE, connection=redis_conn)
    pool = DeliveryPool(size=4, per_endpoint=4).start()

    def all_succeeded():
        promote_due(webhook_queue, time.time())  # the workers' scheduler, here
        return statuses(account.key.id) == {"succeeded": 20}

    try:
        wait_until(all_succeeded, 30, "every delivery succeeded")
    finally:
        pool.stop(timeout=10)
        receiver.server.stop()
    assert flaky.refused == 12
    assert sorted(receiver.ids) == sorted(ids)  # each sent exactly once
    assert all(outcomes == ["succeeded"] for outcomes in attempts_by_delivery(account.key.id).values())
    assert redis_conn.keys("rq:job:dlv-*") == [] and webhook_queue.count == 0


class FailingRecords:
    """The database failing the service's record of an outcome ``failures`` times (a refused
    connection, as a primary that is moving does), then answering."""

    def __init__(self, failures: int):
        self.real, self.left, self.calls = deliveries.record, failures, 0

    def __call__(self, *args):
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise OperationalError("could not connect to server: Connection refused")
        return self.real(*args)


@pytest.mark.parametrize("pool", [True, False], ids=["pool thread", "rq job"])
def test_an_outcome_is_recorded_past_the_pauses_only_by_a_pool_thread(make_customer, monkeypatch, pool):
    """A pool thread records the outcome it has until the database answers: given up, the attempt
    waits for the sweep, which sends it a second time. An RQ job gives up after the pauses."""
    receiver = Receiver(hang=False)
    account = make_customer(webhook_url=f"{receiver.server.url}/hook")
    with db.connection_context():
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
    monkeypatch.setattr(webhook_jobs, "RECORD_RETRY_PAUSES", (0.01, 0.01))
    failing = FailingRecords(failures=8)
    monkeypatch.setattr(deliveries, "record", failing)
    job_id = delivery_job_id(delivery.id, 1)
    try:
        if pool:
            assert webhook_jobs.run(delivery.id, job_id, database=DatabaseGate(threading.Event())) == "succeeded"
        else:
            with pytest.raises(OperationalError):
                webhook_jobs.run(delivery.id, job_id)
    finally:
        receiver.server.stop()
    assert receiver.ids == [delivery.id]
    assert failing.calls == (9 if pool else 3)
    assert statuses(account.key.id) == ({"succeeded": 1} if pool else {"pending": 1})


def test_a_pool_thread_stops_recording_when_its_process_stops(make_customer, monkeypatch):
    """A stop ends the tries (the job goes back on the schedule, as for any failed job)."""
    receiver = Receiver(hang=False)
    account = make_customer(webhook_url=f"{receiver.server.url}/hook")
    with db.connection_context():
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
    monkeypatch.setattr(webhook_jobs, "RECORD_RETRY_PAUSES", (0.01,))
    stopping = threading.Event()
    failing = FailingRecords(failures=1000)

    def fail_then_stop(*args):
        if failing.calls == 5:
            stopping.set()
        return failing(*args)

    monkeypatch.setattr(deliveries, "record", fail_then_stop)
    try:
        with pytest.raises(OperationalError):
            webhook_jobs.run(delivery.id, delivery_job_id(delivery.id, 1), database=DatabaseGate(stopping))
    finally:
        receiver.server.stop()
    assert failing.calls == 6


def test_the_pool_starts_once_rq_has_sized_the_redis_timeouts(app, redis_conn, monkeypatch):
    """A Redis connection the pool opened before RQ's worker raised the shared client's socket
    timeout kept the short one; RQ's loop, handed it, timed out in its long wait on the queue
    and quit, taking the process down. The pool starts after the worker is built."""
    import argparse

    from workers import __main__ as worker_main

    redis_conn.connection_pool.connection_kwargs["socket_timeout"] = 5  # as app.plumbing.redis_conn sets it
    redis_conn.connection_pool.reset()  # a process starting: no connection opened yet
    seen = {}

    def work(self, **kwargs):
        wait_until(lambda: pool.started and redis_conn.connection_pool._created_connections > 0, 10,
                   "the pool running")
        pool_kwargs = redis_conn.connection_pool.connection_kwargs
        opened = redis_conn.connection_pool._available_connections + list(redis_conn.connection_pool._in_use_connections)
        seen["timeouts"] = {c.socket_timeout for c in opened} | {pool_kwargs["socket_timeout"]}
        seen["needed"] = self.connection_timeout

    monkeypatch.setattr(worker_main.ScanWorker, "work", work)
    pool = DeliveryPool(connection=redis_conn, size=2)
    try:
        worker_main._work([WEBHOOK_QUEUE], argparse.Namespace(name=None, burst=False), pool)
    finally:
        pool.stop(timeout=5)
    assert min(seen["timeouts"]) >= seen["needed"] > 5
