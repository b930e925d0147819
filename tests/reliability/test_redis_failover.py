"""Redis failing over under Sentinel (D31): a master, its replica and a Sentinel as real processes
(Debian's redis-server and redis-sentinel). A client made by the one factory from a
``redis+sentinel://`` URL follows the new master without a restart, and the service's promises
(D13) hold across it: no answered creation lost, every scan final, every webhook sent once."""
from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
import redis
from freezegun import freeze_time

from app import create_app
from app.plumbing import runtime
from app.plumbing.models import utcnow
from app.plumbing.redis_conn import new_client
from app.recovery import sweep
from bench.load import Call, LoadDriver
from simulator.procutil import wait_until
from tests.conftest import ServerThread, marked_config
from tests.jobrunner import JobRunner
from tests.processes import WorkerProcess, service_env
from tests.reliability.sentinel import SentinelSet, sentinel_binary
from tests.reliability.test_faults import SCAN, SECRET, STALE, Receiver, assert_settled, scans_of, settled

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sentinel_binary() is None,
                       reason="redis-sentinel is not installed (Debian's redis-sentinel package; .ci/run installs it)"),
]


@pytest.fixture
def sentinels(tmp_path):
    sets = SentinelSet(tmp_path).start()
    yield sets
    sets.stop()


def port_of(client: redis.Redis) -> int:
    return int(client.info("server")["tcp_port"])


def test_a_client_of_the_factory_follows_a_sentinel_failover(sentinels):
    client = new_client(sentinels.url)
    client.set("before", "1")
    assert port_of(client) == sentinels.master.port
    new = sentinels.failover()  # the old master is now the new one's replica: it refuses writes
    client.set("after", "2")  # the same client, no restart: READONLY from the old master, then the new one
    with client.pipeline() as pipe:  # as RQ writes (MULTI/EXEC)
        pipe.set("piped", "3").incr("count").execute()
    assert port_of(client) == new.port == sentinels.replica.port
    on_new = sentinels.server(new)
    assert on_new.get("before") == "1" and on_new.get("after") == "2" and on_new.get("piped") == "3"


def test_a_client_of_the_factory_follows_a_killed_master(sentinels):
    client = new_client(sentinels.url)
    client.set("before", "1")
    sentinels.server(sentinels.master).wait(1, 2000)  # replicated before the kill
    new = sentinels.kill_master()
    assert client.get("before") == b"1" and client.set("after", "2")
    assert port_of(client) == new.port


def delivery_ids(received: list[dict]) -> list[str]:
    return [next(v for k, v in d["headers"].items() if k.lower() == "x-service-delivery") for d in received]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1, SCAN_TIMEOUT_SECONDS=60,
                    WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
def test_the_queues_go_on_from_the_new_master_and_nothing_is_lost(app, base_config, sentinels, make_customer,
                                                                   simulator, request, figures):
    """Scans created, tracked and announced before the master is killed, and again after, by the
    same app and the same client (no restart): each creation answers 202, each scan is final, each
    webhook is sent once, the jobs of the second round from the new master."""
    sentinel_app = create_app(dict(base_config, REDIS_URL=sentinels.url, **marked_config(request)))
    hook = Receiver(simulator, "sentinel-failover")
    acct = make_customer(tier="enterprise", credits=10_000, inflight=1000, hour=1000, day=1000,
                         webhook_url=hook.url, webhook_secret=SECRET)
    conn = runtime.redis()  # the app's one client, made from the redis+sentinel URL
    server = ServerThread(sentinel_app)
    driver = LoadDriver(server.url, concurrency=4, timeout=30)

    def round_of(n, phase):
        answers = driver.run([Call("POST", "/api/v1/scan", acct.headers,
                                   {"target": f"sentinel.{phase}.{i}@example.com"}, phase) for i in range(n)])
        with freeze_time(utcnow() + timedelta(seconds=STALE + 5)) as frozen:
            recovered = sweep()["scans_redispatched"]
            assert JobRunner(conn).run(frozen, until=lambda: settled(acct.id))
        return answers, recovered
    try:
        answers, _ = round_of(10, "before")
        assert port_of(conn) == sentinels.master.port and len(hook.deliveries()) == 10
        started = time.monotonic()
        new = sentinels.kill_master()
        failover_seconds = time.monotonic() - started
        after, recovered = round_of(10, "after")
        answers += after
    finally:
        driver.close()
        server.stop()

    assert {a.status for a in answers} == {202}, sorted({a.status for a in answers})
    ids = [a.body["scan_id"] for a in answers]
    assert sorted(scans_of(acct.id)) == sorted(ids)
    assert port_of(conn) == new.port  # the second round's jobs went through the new master
    end = assert_settled(acct)
    assert end["completed"] == len(ids) and end["attempts"] == len(ids)
    received = hook.deliveries()
    assert len(received) == len(ids) and len(set(delivery_ids(received))) == len(ids)
    figures.update(requests=len(answers), concurrency=4,
                   faults="Redis master SIGKILLed between two rounds of scans; Sentinel promoted the replica",
                   inputs={"creations": len(answers)}, failures=0, answered={"202": len(answers)},
                   recovered=recovered, end=dict(end, failover_seconds=round(failover_seconds, 1)))


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0.5, 1))
def test_a_worker_process_and_its_scheduler_go_on_from_the_new_master(app, base_config, sentinels, make_customer,
                                                                      simulator, request, tmp_path):
    """``python -m workers`` on the redis+sentinel URL: its looks, deliveries and RQ's scheduler (a
    failed attempt's retry is a scheduled job) go on after the master is killed, without a restart."""
    sentinel_app = create_app(dict(base_config, REDIS_URL=sentinels.url, **marked_config(request)))
    # The receiver's answers in order: the first request of each round fails (5 requests a round:
    # 4 first attempts and the failed one's retry).
    hook = Receiver(simulator, "sentinel-worker", responses=(500, 200, 200, 200, 200, 500, 200))
    acct = make_customer(tier="enterprise", credits=1000, inflight=100, hour=1000, day=1000,
                         webhook_url=hook.url, webhook_secret=SECRET)
    env = service_env(sentinel_app, simulator.url, tmp_path / "instance", ENGINE_POLL_SECONDS=0.5,
                      WEBHOOK_RETRY_SCHEDULE="0.5,1", LOG_LEVEL="INFO")
    worker = WorkerProcess(env, tmp_path / "worker.log")
    client = sentinel_app.test_client()

    def announced(n):
        wait_until(lambda: sum(d["response_status"] == 200 for d in hook.deliveries()) >= n, 90,
                   f"{n} webhooks delivered\n{worker.output()[-3000:]}")
    try:
        for i in range(4):
            assert client.post(SCAN, json={"target": f"w.before.{i}@example.com"}, headers=acct.headers).status_code == 202
        announced(4)
        new = sentinels.kill_master()
        for i in range(4):
            assert client.post(SCAN, json={"target": f"w.after.{i}@example.com"}, headers=acct.headers).status_code == 202
        announced(8)
        assert worker.proc.poll() is None
    finally:
        worker.kill(signal.SIGTERM)
    received = hook.deliveries()
    ok = [d for d in received if d["response_status"] == 200]
    assert len(ok) == 8 and len(set(delivery_ids(ok))) == 8 and len(received) == 10
    assert port_of(runtime.redis()) == new.port
    assert "Traceback" not in worker.output()
    end = assert_settled(acct)
    assert end["completed"] == 8
