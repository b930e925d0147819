"""The audit sinks' pusher as a real worker process, and its isolation per sink in-process.

A worker killed while its batch is at the receiver has moved nothing: the next worker, once the
killed one's lease has expired, sends the same entries again (each with its stable
``activity_id``), so every entry arrives at least once. A sink that hangs holds one thread and
delays only its own entries. These run on wall-clock time (separate processes and real sockets),
waiting in bounded poll loops.
"""
from __future__ import annotations

import json
import signal
import threading
from collections import Counter

import pytest
import requests

from app.activity import audit_sinks, entries
from app.extensions import db
from simulator.receiver import hec_events
from tests.conftest import ServerThread
from tests.domain_fixtures import new_customer
from tests.processes import WorkerProcess, service_env, wait_for
from workers.audit_sinks import SinkPusher

TOKEN = "hec-token-kill-test"


class HoldingHec:
    """A HEC collector that records every batch, and holds its first one (after recording it)
    until released: the moment to kill the worker that sent it."""

    def __init__(self, hold_first: bool = True):
        self.batches: list[list[str]] = []
        self.arrived, self.release = threading.Event(), threading.Event()
        self.hold_first = hold_first
        self._lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def __call__(self, environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        if environ.get("HTTP_AUTHORIZATION") != f"Splunk {TOKEN}":
            start_response("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"text":"Invalid token","code":4}']
        events = hec_events(body) or []
        with self._lock:
            self.batches.append([e["event"]["activity_id"] for e in events])
            first = len(self.batches) == 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if first and self.hold_first:
            self.arrived.set()
            self.release.wait(30)
        with self._lock:
            self.in_flight -= 1
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"text":"Success","code":0}']

    def received(self) -> Counter:
        with self._lock:
            return Counter(i for batch in self.batches for i in batch)


def write_entries(customer_id: str, n: int) -> list[str]:
    with db.connection_context():
        return [entries.record(customer_id=customer_id, livemode=True, action="scan.read", status=200)
                for _ in range(n)]


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=2)
def test_a_worker_killed_mid_batch_loses_no_entry(app, simulator, tmp_path):
    receiver = HoldingHec()
    server = ServerThread(receiver)
    env = service_env(app, simulator.url, tmp_path / "instance", LOG_LEVEL="INFO", WEBHOOK_TIMEOUT_SECONDS=2)
    workers = []
    try:
        with db.connection_context():
            cust, _ = new_customer()
            sink_id = audit_sinks.add(cust.id, url=f"{server.url}/services/collector/event", token=TOKEN)["sink_id"]
        written = write_entries(cust.id, 7)

        workers.append(WorkerProcess(env, tmp_path / "worker-1.log"))
        wait_for(receiver.arrived.is_set, 30, "the first batch at the receiver", workers)
        workers[0].kill(signal.SIGKILL)  # the receiver holds the batch: not acknowledged
        receiver.release.set()
        assert set(receiver.received()) == set(written)  # it had them all, unacknowledged
        later = write_entries(cust.id, 3)  # written while no worker runs

        workers.append(WorkerProcess(env, tmp_path / "worker-2.log"))
        wait_for(lambda: set(written + later) <= {i for b in receiver.batches[1:] for i in b}, 60,
                 "every entry sent again by the second worker", workers)
        counts = receiver.received()
        assert set(counts) == set(written + later) and all(counts[i] >= 1 for i in written + later)
        assert all(counts[i] == 2 for i in written)  # the killed batch: once to the dead worker, once again

        def sink_now():
            with db.connection_context():
                [sink] = audit_sinks.list_sinks(cust.id)
            return sink
        # The worker records a batch once the receiver has answered it: a moment after the receiver
        # has it (read at once, on a loaded machine, it still said 0).
        wait_for(lambda: sink_now()["delivered"] == len(written + later), 30, "the deliveries recorded", workers)
        assert sink_now()["sink_id"] == sink_id
        assert TOKEN not in workers[1].output() and "Traceback" not in workers[1].output()
    finally:
        receiver.release.set()
        for worker in workers:
            worker.kill(signal.SIGTERM)
        server.stop()


@pytest.mark.config(WEBHOOK_TIMEOUT_SECONDS=30)
def test_a_hanging_sink_delays_only_its_own_entries(app):
    hanging, quick = HoldingHec(), HoldingHec(hold_first=False)
    servers = [ServerThread(hanging), ServerThread(quick)]
    pusher = SinkPusher(size=4, poll_seconds=0.1)
    try:
        with db.connection_context():
            slow_cust, _ = new_customer()
            fast_cust, _ = new_customer()
            audit_sinks.add(slow_cust.id, url=f"{servers[0].url}/services/collector/event", token=TOKEN)
            audit_sinks.add(fast_cust.id, url=f"{servers[1].url}/services/collector/event", token=TOKEN)
        write_entries(slow_cust.id, 2)
        pusher.start()
        wait_for(hanging.arrived.is_set, 10, "the hanging sink's batch")
        fast = write_entries(fast_cust.id, 3)
        wait_for(lambda: set(fast) <= set(quick.received()), 10, "the other sink's entries, while one hangs")
        more = write_entries(fast_cust.id, 2)
        wait_for(lambda: set(more) <= set(quick.received()), 15, "its next entries too")
        assert len(hanging.batches) == 1 and hanging.in_flight == 1  # still held: one batch, not sent again
    finally:
        hanging.release.set()
        pusher.stop()
        for server in servers:
            server.stop()


def test_the_simulator_receiver_takes_hec_batches_and_checks_the_token(simulator):
    name = "hec-sim-check"
    requests.post(f"{simulator.url}/_sim/receivers/{name}", json={"secret": TOKEN}, timeout=5).raise_for_status()
    url = f"{simulator.url}/_sim/hec/{name}/services/collector/event"
    body = json.dumps({"time": 1, "event": {"activity_id": "act_1"}}) + json.dumps({"event": {"activity_id": "act_2"}})
    assert requests.post(url, data=body, headers={"Authorization": f"Splunk {TOKEN}"}, timeout=5).status_code == 200
    assert requests.post(url, data=body, headers={"Authorization": "Splunk wrong"}, timeout=5).status_code == 401
    assert requests.post(url, data="[1]", headers={"Authorization": f"Splunk {TOKEN}"}, timeout=5).status_code == 400
    got = requests.get(f"{simulator.url}/_sim/receivers/{name}/deliveries", timeout=5).json()["deliveries"]
    assert [[e["event"]["activity_id"] for e in d["events"]] for d in got] == [["act_1", "act_2"], [], []]
    assert [d["token_valid"] for d in got] == [True, False, True]
