"""Held connections (D27) as production runs them: the threaded API (gunicorn.conf.py) and the
held-connection server (gunicorn.held.conf.py, gevent) behind ops/nginx.conf, real processes.

- nginx sends every ``?wait=`` call and the event stream to the held-connection server: with
  the threaded API cut to 2 threads, 40 waits and 8 streams open at once leave ordinary reads
  answered at once, and each waiter and stream is answered when its scans complete;
- the held-connection worker killed while streams are open loses no event: the clients resume
  with Last-Event-ID and see every event exactly once;
- Redis flushed mid-stream loses no event (the streams read the stored events; Redis only
  counts a key's held connections).
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
import urllib3

from app.events import feed, waits
from app.events.models import Event
from app.extensions import db
from app.plumbing import runtime
from app.tracking import states
from tests.processes import service_env
from tests.reliability.servers import Gunicorn

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
RESULT = {"risk": {"score": 10, "band": "low"}}

pytestmark = pytest.mark.processes

sys.path.insert(0, str(ROOT / "ops"))
import check_slow_clients  # noqa: E402

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # nginx's throw-away certificate


@pytest.fixture
def servers(app, simulator, tmp_path):
    """(threaded API with 2 threads, held-connection server) on the test's database and Redis."""
    env = service_env(app, simulator.url, tmp_path / "instance", LOG_LEVEL="WARNING")
    threaded = Gunicorn(env, tmp_path / "web.log", workers=1, threads=2)
    try:
        held = Gunicorn(env, tmp_path / "held.log", workers=1, held=True)
    except BaseException:
        threaded.stop()
        raise
    yield threaded, held
    # Gunicorn's quick stop: a test's followers leave their streams open, which a graceful stop
    # would wait on for the held server's graceful_timeout (10 s a test) before cutting them anyway.
    held.stop(signal.SIGQUIT)
    threaded.stop()
    print("held server's log:", held.log_text()[-3000:], "threaded server's log:", threaded.log_text()[-3000:])


def create_scans(url: str, account, count: int, **session) -> list[str]:
    answer = requests.post(f"{url}/api/v1/scan/bulk", headers=account.headers, timeout=10, **session,
                           json={"targets": [{"target": f"held{i}@example.com"} for i in range(count)]})
    assert answer.status_code == 202, answer.text
    return [entry["scan_id"] for entry in answer.json()["scans"]]


def complete(scan_ids) -> None:
    with db.connection_context():
        for scan_id in scan_ids:
            assert states.complete(scan_id, RESULT)


def stored_events(account) -> list[str]:
    with db.connection_context():
        return [feed.event_id(e.id) for e in Event.select().where(Event.customer == account.id).order_by(Event.id)]


def held_count(account) -> int:
    return runtime.redis().zcard(f"scan-api:held:{account.key.id}")


class Follower(threading.Thread):
    """A client of ``GET /api/v1/events/stream`` that reconnects with Last-Event-ID whenever its
    connection ends (as the Python client and browsers do), keeping every event id it received."""

    def __init__(self, url: str, headers: dict, after: str | None = None, **session):
        super().__init__(daemon=True)
        self.url, self.headers, self.session = url, headers, session
        self.ids: list[str] = []
        self.last = after
        self.connections = 0
        self.connected = threading.Event()
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            headers = dict(self.headers, **({"Last-Event-ID": self.last} if self.last else {}))
            try:
                with requests.get(f"{self.url}/api/v1/events/stream", headers=headers, stream=True, timeout=30,
                                  **self.session) as answer:
                    if answer.status_code != 200:
                        time.sleep(0.2)
                        continue
                    self.connections += 1
                    self.connected.set()
                    for line in answer.iter_lines(decode_unicode=True):
                        if self.stopping:
                            return
                        if line.startswith("id: "):
                            self.last = line[4:]
                            self.ids.append(self.last)
            except (requests.RequestException, OSError):
                pass
            self.connected.clear()
            time.sleep(0.2)  # the server's "retry: 2000" would be longer: the test need not wait

    def stop(self) -> None:
        self.stopping = True


def open_streams(url: str, account, count: int) -> list[Follower]:
    """``count`` followers of the account's event stream, each connected."""
    followers = [Follower(url, account.headers) for _ in range(count)]
    for follower in followers:
        follower.start()
    wait_for(lambda: all(f.connected.is_set() for f in followers), 20, "the streams to open")
    return followers


def wait_for(check, seconds: float, what: str) -> None:
    ends = time.monotonic() + seconds
    while not check():
        if time.monotonic() > ends:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install -y nginx)")
def test_behind_nginx_waits_and_streams_hold_no_thread_of_the_api_and_are_answered_when_done(
        servers, make_customer):
    threaded, held = servers
    nginx = check_slow_clients.Nginx(f"127.0.0.1:{threaded.port}", NGINX, held=f"127.0.0.1:{held.port}")
    try:
        url = f"https://127.0.0.1:{nginx.https_port}"
        account = make_customer(tier="enterprise", credits=1000)
        scans = create_scans(url, account, 20, verify=False)
        answers: dict[int, tuple[float, int, str]] = {}

        def wait_on(i: int, scan_id: str) -> None:
            r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=30", headers=account.headers, timeout=60, verify=False)
            answers[i] = (time.monotonic(), r.status_code, r.json().get("status"))

        waiters = [threading.Thread(target=wait_on, args=(i, scans[i % 20]), daemon=True) for i in range(40)]
        followers = [Follower(url, account.headers, verify=False) for _ in range(8)]
        for thread in (*waiters, *followers):
            thread.start()
        wait_for(lambda: held_count(account) == 48, 20, "48 held connections")
        # The threaded API has 2 threads: were the 48 held there, no read could be answered for 30 s.
        for scan_id in scans:
            started = time.monotonic()
            r = requests.get(f"{url}/api/v1/scan/{scan_id}", headers=account.headers, timeout=10, verify=False)
            assert r.status_code == 200 and r.json()["status"] in ("queued", "running")
            assert time.monotonic() - started < 2
        assert not answers  # all still waiting

        done_at = time.monotonic()
        complete(scans)
        for thread in waiters:
            thread.join(15)
        assert sorted(answers) == list(range(40))
        assert {(status, body) for _, status, body in answers.values()} == {(200, "completed")}
        assert max(at for at, _, _ in answers.values()) - done_at < 5  # answered at completion, not after 30 s

        events = stored_events(account)
        assert len(events) == 40  # running and completed of each scan
        wait_for(lambda: all(len(f.ids) >= 40 for f in followers), 15, "every stream to see the 40 events")
        for follower in followers:
            follower.stop()
            assert follower.ids == events
    finally:
        nginx.stop()


def test_a_killed_held_worker_loses_no_event_clients_resume_and_see_each_once(servers, make_customer):
    threaded, held = servers
    account = make_customer(tier="enterprise", credits=1000)
    scans = create_scans(threaded.url, account, 6)
    followers = open_streams(held.url, account, 5)
    complete(scans[:3])
    wait_for(lambda: all(len(f.ids) == 6 for f in followers), 15, "the first events")

    (worker,) = psutil.Process(held.proc.pid).children()
    os.kill(worker.pid, signal.SIGKILL)  # the held-connection worker, its streams with it
    complete(scans[3:])  # while no worker serves them: stored, announced to no one
    wait_for(lambda: all(len(f.ids) >= 12 for f in followers), 40, "the streams to resume")
    time.sleep(0.5)  # a duplicate would come now
    events = stored_events(account)
    assert len(events) == 12
    for follower in followers:
        follower.stop()
        assert follower.connections >= 2  # it did lose its connection and resume
        assert follower.ids == events  # every event exactly once, in order


def test_redis_flushed_mid_stream_loses_no_event(servers, make_customer):
    _, held = servers
    account = make_customer(tier="enterprise", credits=1000)
    scans = create_scans(held.url, account, 4)
    followers = open_streams(held.url, account, 3)
    complete(scans[:2])
    wait_for(lambda: all(len(f.ids) == 4 for f in followers), 15, "the first events")

    runtime.redis().flushdb()
    assert held_count(account) == 0  # the count of held connections is gone with it
    started = time.monotonic()
    waiting = {}
    waiter = threading.Thread(target=lambda: waiting.update(r=requests.get(
        f"{held.url}/api/v1/scan/{scans[3]}?wait=20", headers=account.headers, timeout=30)))
    waiter.start()
    complete(scans[2:])
    waiter.join(30)
    assert waiting["r"].status_code == 200 and waiting["r"].json()["status"] == "completed"
    assert time.monotonic() - started < waits.REREAD_SECONDS + 2
    wait_for(lambda: all(len(f.ids) >= 8 for f in followers), 15, "the events after the flush")
    time.sleep(0.5)
    events = stored_events(account)
    for follower in followers:
        follower.stop()
        assert follower.connections == 1  # the same connection throughout
        assert follower.ids == events and len(events) == 8


def test_a_revoked_key_loses_its_streams_and_waits_on_the_held_server_within_a_heartbeat(servers, make_customer):
    from app.accounts import admin
    _, held = servers
    account = make_customer(tier="enterprise", credits=1000)
    scans = create_scans(held.url, account, 3)
    seen, ended = [], threading.Event()

    def follow():
        with requests.get(f"{held.url}/api/v1/events/stream", headers=account.headers, stream=True,
                          timeout=30) as answer:
            for line in answer.iter_lines(decode_unicode=True):
                seen.append(line)  # noqa: PERF402 - read by the test while it streams
        ended.set()
    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    wait_for(lambda: seen, 10, "the stream to open")
    waiting = {}
    waiter = threading.Thread(target=lambda: waiting.update(r=requests.get(
        f"{held.url}/api/v1/scan/{scans[2]}?wait=60", headers=account.headers, timeout=70)), daemon=True)
    waiter.start()
    complete(scans[:1])
    wait_for(lambda: sum(line.startswith("data:") for line in seen) == 2, 10, "the events before the change")

    with db.connection_context():
        admin.revoke_key(account.key.id)
    revoked = time.monotonic()
    complete(scans[1:])  # after the revocation: neither the stream nor the wait may show them
    assert ended.wait(feed.HEARTBEAT_SECONDS + 3), "the stream goes on after its key was revoked"
    waiter.join(feed.HEARTBEAT_SECONDS + 3)
    assert time.monotonic() - revoked < feed.HEARTBEAT_SECONDS + 3
    assert sum(line.startswith("data:") for line in seen) == 2 and "held1@example.com" not in "".join(seen)
    assert waiting["r"].status_code == 401 and "held2@example.com" not in waiting["r"].text
    wait_for(lambda: held_count(account) == 0, 5, "the key's held connections to be released")
