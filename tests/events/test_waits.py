"""waits: a waiter answered at once when its scan is final, woken by the commit of another
thread's change well before its re-read would see it, or left to its deadline; the held
connections of a key counted in Redis, the 101st refused."""
import threading
import time

import pytest

from app.events import waits
from app.extensions import db
from app.plumbing.errors import InvalidRequest, RateLimited
from app.scans import reads
from app.tracking import states
from tests.domain_fixtures import new_customer, new_scan

RESULT = {"risk": {"score": 10, "band": "low"}}


def _waiting(cust, scan, seconds):
    """Wait for ``scan`` as a read with ``?wait`` does; the final body and the seconds it took."""
    waiter = waits.subscribe(waits.scan_topic(scan.id))
    try:
        started = time.monotonic()
        read = lambda: reads.read_scan(cust.id, scan.id, True)  # noqa: E731
        body = waits.wait_until(waiter, seconds, read, reads.SCAN_WAIT.done, read())
        return body, time.monotonic() - started
    finally:
        waits.unsubscribe(waiter)


def test_a_final_scan_is_answered_at_once(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    body, took = _waiting(cust, scan, 30)
    assert body["status"] == "completed" and took < 0.5


def test_the_commit_of_another_thread_wakes_the_waiter_before_its_re_read(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    waits.hub().subscribe("warm-up")  # the listener is up before the test measures

    def complete_later():
        time.sleep(0.5)
        with db.connection_context():
            states.complete(scan.id, RESULT)
    worker = threading.Thread(target=complete_later)
    worker.start()
    body, took = _waiting(cust, scan, 30)
    worker.join()
    assert body["status"] == "completed"
    assert 0.4 < took < waits.REREAD_SECONDS - 1  # woken by the signal, not found by a re-read


def test_an_unfinished_scan_is_answered_after_the_wait_with_its_state_then(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    body, took = _waiting(cust, scan, 1)
    assert body["status"] in ("queued", "running") and 1.0 <= took < 2.5


def test_a_key_holds_at_most_100_connections_and_a_release_frees_one(app):
    holds = [waits.hold("key_a", 30) for _ in range(waits.MAX_HELD)]
    with pytest.raises(RateLimited) as refused:
        waits.hold("key_a", 30)
    assert refused.value.code == "rate_limited" and 1 <= refused.value.retry_after <= 30
    waits.hold("key_b", 30)  # another key's are its own
    waits.release(holds[0])
    waits.release(waits.hold("key_a", 30))


def test_a_wait_is_1_to_60_seconds_in_ascii_digits():
    assert waits.parse_wait("60") == 60 and waits.parse_wait("1") == 1 and waits.parse_wait("05") == 5
    for bad in ("0", "61", "", " 5", "+5", "5 ", "\uff15", "\u0665", "5.0", "1e1", "0060", None, 5):
        with pytest.raises(InvalidRequest, match="wait must be"):
            waits.parse_wait(bad)


def test_the_listener_hears_with_a_descriptor_above_1023(conn, app):
    """A server holding thousands of connections gives the LISTEN session a high descriptor,
    which select() refuses: the listener failed and reconnected in a loop, waking every waiter."""
    import os

    from app.events.statements import signals
    from app.plumbing import runtime
    dummies = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    session = None
    try:
        session = signals.Listening(runtime.config["DATABASE_DIRECT_URL"] or runtime.config["DATABASE_URL"])
        heard: list[str] = []
        cust, key = new_customer()
        scan = new_scan(cust, key)
        states.complete(scan.id, RESULT)  # its event is announced at commit
        ends = time.monotonic() + 5
        while not heard and time.monotonic() < ends:
            session.receive(1.0, heard.append)
        assert any(scan.id in payload for payload in heard)
    finally:
        if session is not None:
            session.close()
        for fd in dummies:
            os.close(fd)


def test_while_the_listener_listens_an_unwoken_waiter_reads_again_only_after_the_quiet_interval(conn):
    waits.hub().subscribe("warm-up")  # the listener is up
    assert waits.hub().listening.wait(5)
    now = time.monotonic()
    assert not waits.reread_due(now - waits.REREAD_SECONDS)
    assert waits.reread_due(now - waits.QUIET_REREAD_SECONDS)


def test_a_running_event_wakes_the_customers_streams_not_its_scans_waiters(conn, app):
    """Only a final event can end a wait on a scan or its batch: woken by its running event, each
    of 2,000 waiters read its scan again for nothing. The announcement says its kind for that."""
    from app.events.statements import signals
    from app.plumbing import runtime
    session = signals.Listening(runtime.config["DATABASE_DIRECT_URL"] or runtime.config["DATABASE_URL"])
    try:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        states.complete(scan.id, RESULT)  # never seen running: scan.running, then scan.completed
        heard: list[str] = []
        ends = time.monotonic() + 5
        while len([p for p in heard if scan.id in p]) < 2 and time.monotonic() < ends:
            session.receive(1.0, heard.append)
    finally:
        session.close()
    running, final = [p for p in heard if scan.id in p]
    feed = waits.feed_topic(cust.id, True)
    assert waits.topics_of(running) == [feed]
    assert waits.topics_of(final) == [feed, waits.scan_topic(scan.id)]
    assert waits.topics_of(f'{{"c": "{cust.id}", "m": true, "s": "{scan.id}"}}') == [feed, waits.scan_topic(scan.id)]


def test_a_wait_whose_key_is_refused_ends_with_what_it_read_while_allowed(conn, monkeypatch):
    monkeypatch.setattr(waits, "KEY_CHECK_SECONDS", 0.5)
    cust, key = new_customer()
    scan = new_scan(cust, key)
    waiter = waits.subscribe(waits.scan_topic(scan.id))
    asked = []

    def allowed():  # the key is refused from its first check on
        asked.append(time.monotonic())
        return False
    try:
        read = lambda: reads.read_scan(cust.id, scan.id, True)  # noqa: E731
        first = read()
        states.complete(scan.id, RESULT)  # wakes the waiter: its read finds the result, which it may not send
        started = time.monotonic()
        body = waits.wait_until(waiter, 10, read, reads.SCAN_WAIT.done, first, allowed)
    finally:
        waits.unsubscribe(waiter)
    assert body is first and "result" not in body
    assert asked and time.monotonic() - started < 1.5


def test_an_unwoken_wait_asks_about_its_key_once_per_check_interval(conn, monkeypatch):
    monkeypatch.setattr(waits, "KEY_CHECK_SECONDS", 0.5)
    cust, key = new_customer()
    scan = new_scan(cust, key)
    waiter = waits.subscribe(waits.scan_topic(scan.id))
    asked = []
    try:
        read = lambda: reads.read_scan(cust.id, scan.id, True)  # noqa: E731
        started = time.monotonic()
        body = waits.wait_until(waiter, 2, read, reads.SCAN_WAIT.done, read(), lambda: asked.append(1) or True)
    finally:
        waits.unsubscribe(waiter)
    assert body["status"] in ("queued", "running") and 2.0 <= time.monotonic() - started < 3
    assert 3 <= len(asked) <= 6  # every half second, and once more after the read at the end
