"""The client's waits and events (over a real server): ``wait=`` on reads and creations, the
events list walked page by page, and ``events()`` following the stream and resuming after the
last event it gave."""
import io
import json
import threading
import time

import pytest
from scan_api_client import Event, ScanClient
from scan_api_client.cli import main

from app.extensions import db
from app.tracking import states

RESULT = {"risk": {"score": 10, "band": "low"}}


def _complete_later(scan_id, delay=0.3):
    def run():
        time.sleep(delay)
        with db.connection_context():
            states.complete(scan_id, RESULT)
    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_a_read_with_wait_answers_when_the_scan_completes(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    scan = api.create("jane@example.com", wait=1)
    assert scan.status == "queued"  # not final within the second: the creation's answer
    worker = _complete_later(scan.scan_id)
    started = time.monotonic()
    done = api.get(scan.scan_id, wait=30)
    worker.join()
    assert done.status == "completed" and time.monotonic() - started < 4


def test_events_are_listed_and_followed_with_resume(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    first = api.create("a@example.com")
    with db.connection_context():
        states.complete(first.scan_id, RESULT)
    listed = list(api.iter_events(page_size=1))
    assert [e.event for e in listed] == ["scan.completed", "scan.running"] and isinstance(listed[0], Event)
    assert listed[0].scan_id == first.scan_id

    followed = api.events(after=listed[1].event_id)
    got = next(followed)
    assert (got.event_id, got.event) == (listed[0].event_id, "scan.completed")
    followed.close()  # the connection ends; a new one resumes after the last event given
    second = api.create("b@example.com")
    worker = _complete_later(second.scan_id)
    resumed = api.events(after=got.event_id, events=["scan.completed"])
    nxt = next(resumed)
    worker.join()
    resumed.close()
    assert nxt.event == "scan.completed" and nxt.scan_id == second.scan_id


def test_the_cli_lists_events(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    scan = api.create("a@example.com")
    with db.connection_context():
        states.fail(scan.scan_id, "engine_failed", "no")
    out, err = io.StringIO(), io.StringIO()
    code = main(["events", "--events", "scan.failed", "--url", served_app.url, "--key", account.api_key],
                stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    [entry] = json.loads(out.getvalue())
    assert entry["event"] == "scan.failed" and entry["body"]["scan_id"] == scan.scan_id


def test_following_events_stops_with_an_error_when_the_key_is_revoked(served_app, account, monkeypatch):
    from scan_api_client.errors import AuthenticationError

    from app.accounts import admin
    from app.events import feed
    monkeypatch.setattr(feed, "HEARTBEAT_SECONDS", 0.5)
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    scan = api.create("a@example.com")
    followed = api.events(events=["scan.running"])
    worker = _complete_later(scan.scan_id)
    assert next(followed).event == "scan.running"
    worker.join()
    with db.connection_context():
        admin.revoke_key(account.key.id)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as refused:  # the stream ends and reconnecting is refused
        next(followed)
    assert refused.value.status == 401 and time.monotonic() - started < 3
