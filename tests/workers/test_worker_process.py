"""``python -m workers`` as a real process (D13, D14).

The worker runs on wall-clock time here (a separate process cannot share freezegun's
clock), so the one test that drives it waits in a bounded poll loop. The other tests
exercise the worker's pieces in-process.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from app.extensions import db
from app.plumbing import runtime
from app.scans.models import Scan
from simulator.procutil import wait_until
from tests.conftest import ServerThread
from tests.processes import WorkerProcess, service_env, wait_for
from workers.__main__ import ScanWorker, build_worker

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 60


class HoldingEngine:
    """Forwards to the simulator, but holds every status call (a single look or a batch look)
    about the engine id ``held_id`` until released.

    While one is held, the worker that made it is inside a tracking job or a batch look with the
    scan claimed: the moment to kill it. Only calls about that scan are held: the worker's other
    looker thread, looking at the source probes' investigations, had its call held instead, and
    its first look at the scan went through and recorded it running before the kill. Every such
    call is held, not the first only, so that no retry records anything before the release.
    """

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.held_id: str | None = None
        self.arrived, self.release = threading.Event(), threading.Event()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ["REQUEST_METHOD"]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        looks = (method == "GET" and path.startswith("/v1/investigations/")) or path == "/v1/investigations/status"
        if looks and self.held_id and (self.held_id in path or self.held_id.encode() in body):
            self.arrived.set()
            self.release.wait(30)
        forwarded = requests.request(method, f"{self.upstream}{path}", data=body or None, timeout=5,
                                     headers={"Authorization": environ.get("HTTP_AUTHORIZATION", ""),
                                              "Content-Type": "application/json"})
        start_response(f"{forwarded.status_code} X", [("Content-Type", "application/json")])
        return [forwarded.content]


def scan_row(scan_id) -> Scan:
    with db.connection_context():
        return Scan.get_by_id(scan_id)


def scan_locked(scan_id) -> bool:
    """Whether another transaction holds the scan's row (a batch look's claim)."""
    import psycopg2.errors
    with db.connection_context():
        connection = db.connection()  # psycopg2's own, so that its error class is kept
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM scan WHERE id = %s FOR UPDATE NOWAIT", (scan_id,))
            return False
        except psycopg2.errors.LockNotAvailable:
            return True
        finally:
            connection.rollback()


def test_a_worker_killed_inside_its_batch_look_loses_no_scan(app, client, account, simulator, tmp_path):
    """Batch looks (D24): the scan holds no job; the killed worker's claim ends with its
    connection, and the next worker's look completes it."""
    engine = HoldingEngine(simulator.url)
    proxy = ServerThread(engine)
    # The held look is still waiting when the worker is killed: a status timeout shorter than the
    # test's reaction on a loaded machine let the worker give up and look again.
    env = service_env(app, proxy.url, tmp_path / "instance", ENGINE_POLL_SECONDS=0.5, LOG_LEVEL="INFO",
                      ENGINE_STATUS_TIMEOUT_SECONDS=30)
    workers = []
    try:
        response = client.post("/api/v1/scan", json={"target": "slow.sue@example.com"}, headers=account.headers)
        assert response.status_code == 202, response.json
        scan_id = response.json["scan_id"]
        created = scan_row(scan_id)
        assert created.tracking_job_id is None and runtime.redis().zcard("rq:scheduled:engine") == 0
        engine.held_id = created.engine_id

        workers.append(WorkerProcess(env, tmp_path / "worker-1.log"))
        wait_for(engine.arrived.is_set, 30, "the worker's first batch look at the engine", workers)
        workers[0].kill(signal.SIGKILL)  # inside its batch look, the scan claimed
        engine.release.set()
        claimed = scan_row(scan_id)
        assert claimed.status == "queued" and claimed.look_generation == 0  # nothing recorded
        wait_for(lambda: not scan_locked(scan_id), 30, "the killed worker's claim to end with its connection")

        workers.append(WorkerProcess(env, tmp_path / "worker-2.log"))
        wait_for(lambda: scan_row(scan_id).status in ("completed", "failed"), DEADLINE_SECONDS,
                 "the scan to finish", workers)
        scan = scan_row(scan_id)
        assert scan.status == "completed", (scan.failure_code, scan.failure_message, workers[1].output()[-4000:])
        # By the second worker's look, which logs it after its commit (and the sources' counts): waited for.
        wait_for(lambda: f"scan {scan_id} completed" in workers[1].output(), 30,
                 "the second worker's line for the scan it completed", workers)
        assert "Traceback" not in workers[1].output()
    finally:
        engine.release.set()
        for worker in workers:
            worker.kill(signal.SIGTERM)
        proxy.stop()


# --- the worker's pieces, in-process -----------------------------------------------------

@pytest.mark.config(RECOVERY_INTERVAL_SECONDS=5)
def test_an_idle_worker_still_wakes_up_to_sweep(app):
    """RQ blocks an idle worker on the queues for ``worker_ttl - 15`` s (405 s by default) between
    maintenance runs; the sweep must come every RECOVERY_INTERVAL_SECONDS, jobs or not."""
    worker = build_worker()
    assert isinstance(worker, ScanWorker)
    assert worker.maintenance_interval == 5
    assert worker.dequeue_timeout <= 5


def test_a_failing_sweep_does_not_stop_the_worker(app, monkeypatch):
    def broken():
        raise RuntimeError("database went away")

    monkeypatch.setattr("app.recovery.sweep", broken)
    worker = build_worker()
    worker.run_maintenance_tasks()  # logged, not raised


# --- shutdown while Redis is down ----------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("redis_state", ["down", "up"])
def test_the_first_sigterm_stops_the_worker_within_seconds_and_quietly(app, tmp_path, redis_state):
    """An operator stopping workers during a Redis outage (D14): the first SIGTERM ends the
    process and its scheduler promptly, with exit status 0 and no traceback, however long
    the worker has been retrying; and as promptly when Redis is there."""
    import redis as redis_lib

    from tests.reliability.servers import RedisServer
    redis_server = RedisServer(tmp_path / "redis").start()
    env = service_env(app, "http://127.0.0.1:9", tmp_path / "instance", REDIS_URL=redis_server.url,
                      RECOVERY_INTERVAL_SECONDS=30, LOG_LEVEL="INFO", LOG_FORMAT="text")
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "workers", "--name", "test-sigterm"], cwd=ROOT, env=env,
                                stdout=stdout, stderr=stderr, start_new_session=True)

    def logged() -> str:
        return out.read_text(errors="replace") + err.read_text(errors="replace")

    try:
        watcher = redis_lib.Redis.from_url(redis_server.url)
        wait_for(lambda: watcher.exists("rq:worker:test-sigterm") and "Scheduler for" in logged(), 30,
                 "the worker and its scheduler to start")
        if redis_state == "down":
            redis_server.kill()  # Redis goes away under the idle worker, which retries with back-off
            wait_for(lambda: logged().count("could not connect to Redis") >= 3, 30, "the worker to retry")
        os.kill(proc.pid, signal.SIGTERM)
        try:
            wait_until(lambda: proc.poll() is not None, 10, "the worker to stop", interval=0.1)
        except TimeoutError:
            pass
        assert proc.poll() == 0, f"not stopped 10 s after SIGTERM ({proc.poll()})\n{logged()[-3000:]}"
        with pytest.raises(ProcessLookupError):  # nothing left in its group: the scheduler stopped too
            os.killpg(proc.pid, 0)
        assert "Traceback" not in logged() and "Logging error" not in logged(), logged()[-3000:]
        assert "worker stopped on request" in logged()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        redis_server.kill()
