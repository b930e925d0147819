"""The events stream over real HTTP (D27): server-sent events of the account's mode, resumed
after Last-Event-ID with no event lost, woken by another thread's commit, charged once per
connection, a heartbeat comment while nothing happens."""
import re
import threading
import time
from pathlib import Path

import pytest
import requests

from app.accounts import admin
from app.accounts.models import ApiKey
from app.events import feed
from app.events.models import Event
from app.extensions import db
from app.plumbing.models import utcnow
from app.tracking import states
from tests.api.helpers import balance

RESULT = {"risk": {"score": 10, "band": "low"}}


def _messages(lines, count, deadline_seconds=8.0):
    """The next ``count`` SSE messages (dicts of their fields) and the comments seen meanwhile."""
    messages, comments, current = [], [], {}
    deadline = time.monotonic() + deadline_seconds
    for raw in lines:
        line = raw.decode() if isinstance(raw, bytes) else raw
        if line.startswith(":"):
            comments.append(line)
        elif line == "":
            if "data" in current:  # an event (not the opening ``retry:``)
                messages.append(current)
                if len(messages) == count:
                    return messages, comments
            current = {}
        else:
            name, _, value = line.partition(": ")
            current[name] = value
        if time.monotonic() > deadline:
            break
    return messages, comments


def _create(url, account, target):
    return requests.post(f"{url}/api/v1/scan", json={"target": target}, headers=account.headers,
                         timeout=10).json()["scan_id"]


def test_the_stream_resumes_after_last_event_id_and_loses_nothing(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    first, second = _create(url, account, "a@example.com"), _create(url, account, "b@example.com")
    with db.connection_context():
        states.complete(first, RESULT)
        states.complete(second, RESULT)
        stored = [feed.event_id(e.id) for e in Event.select().where(Event.customer == account.id).order_by(Event.id)]
    assert len(stored) == 4  # running and completed of each
    before = balance(account)

    with requests.get(f"{url}/api/v1/events/stream", headers={**account.headers, "Last-Event-ID": stored[0]},
                      stream=True, timeout=20) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        lines = r.iter_lines(decode_unicode=True)
        got, _ = _messages(lines, 3)
        assert [m["id"] for m in got] == stored[1:]
        assert [m["event"] for m in got] == ["scan.completed", "scan.running", "scan.completed"]
        assert got[0]["data"] == Event.get_by_id(feed.parse_event_id(stored[1], "id")).body  # the stored bytes

        third = _create(url, account, "c@example.com")
        worker = threading.Thread(target=lambda: _complete(third))
        started = time.monotonic()
        worker.start()
        live, _ = _messages(lines, 2)
        worker.join()
        assert [m["event"] for m in live] == ["scan.running", "scan.completed"]
        assert time.monotonic() - started < 4  # woken by the commit, not a later re-read
        assert all(feed.parse_event_id(m["id"], "id") > feed.parse_event_id(stored[-1], "id") for m in live)
    assert balance(account) == before - 2  # the connection and the third scan's creation


def _complete(scan_id):
    time.sleep(0.3)
    with db.connection_context():
        states.complete(scan_id, RESULT)


@pytest.mark.parametrize("query", ["?events=scan.completed&payload=thin"])
def test_the_stream_filters_and_beats(served_app, make_customer, monkeypatch, query):
    monkeypatch.setattr(feed, "HEARTBEAT_SECONDS", 0.5)
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = _create(url, account, "a@example.com")
    with db.connection_context():
        states.complete(scan_id, RESULT)
    with requests.get(f"{url}/api/v1/events/stream{query}&after={feed.event_id(0)}", headers=account.headers,
                      stream=True, timeout=20) as r:
        lines = r.iter_lines(decode_unicode=True)
        [only], _ = _messages(lines, 1)
        assert only["event"] == "scan.completed" and "a@example.com" not in only["data"]
        _, comments = _messages(lines, 1, deadline_seconds=1.5)
        assert ": heartbeat" in comments
    r = requests.get(f"{url}/api/v1/events/stream", headers={**account.headers, "Last-Event-ID": "nope"}, timeout=5)
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"


def _to_the_end(lines, seconds):
    """The lines until the stream ends, or (it goes on) until ``seconds`` passed; whether it ended."""
    got, deadline = [], time.monotonic() + seconds
    for line in lines:
        got.append(line)
        if time.monotonic() > deadline:
            return got, False
    return got, True


def _revoke(key_id):
    admin.revoke_key(key_id)


def _narrow(key_id):
    with db.connection_context():
        ApiKey.update(scopes=["scans:write"]).where(ApiKey.id == key_id).execute()


def _expire(key_id):
    with db.connection_context():
        ApiKey.update(expires_at=utcnow()).where(ApiKey.id == key_id).execute()


@pytest.mark.parametrize("change", [_revoke, _narrow, _expire], ids=["revoked", "narrowed", "expired"])
def test_a_key_revoked_narrowed_or_expired_ends_its_stream_and_gets_no_later_event(
        served_app, make_customer, monkeypatch, change):
    monkeypatch.setattr(feed, "HEARTBEAT_SECONDS", 1.0)
    account = make_customer(credits=50)
    url = served_app.url
    first, second = _create(url, account, "a@example.com"), _create(url, account, "b@example.com")
    with requests.get(f"{url}/api/v1/events/stream", headers=account.headers, stream=True, timeout=20) as r:
        lines = r.iter_lines(decode_unicode=True)
        _complete(first)
        before, _ = _messages(lines, 2)  # what happens while the key may read arrives
        assert [m["event"] for m in before] == ["scan.running", "scan.completed"]
        with db.connection_context():
            change(account.key.id)
        _complete(second)  # made after the change: its target and result must not reach the stream
        rest, ended = _to_the_end(lines, feed.HEARTBEAT_SECONDS + 1)
    assert not any(line.startswith("data:") for line in rest), rest
    assert ended and ": this key may no longer read events" in rest


def test_a_stream_whose_key_changes_while_nothing_happens_ends_at_the_next_heartbeat(
        served_app, make_customer, monkeypatch):
    monkeypatch.setattr(feed, "HEARTBEAT_SECONDS", 1.0)
    account = make_customer(credits=50)
    with requests.get(f"{served_app.url}/api/v1/events/stream", headers=account.headers, stream=True,
                      timeout=20) as r:
        lines = r.iter_lines(decode_unicode=True)
        next(lines)  # the stream is open
        with db.connection_context():
            admin.revoke_key(account.key.id)
        rest, ended = _to_the_end(lines, feed.HEARTBEAT_SECONDS + 1)
    assert ended and ": this key may no longer read events" in rest


# "comment line every 10 s", "heartbeat comment at least every 15 s", "a comment every 10 seconds"...
HEARTBEAT_TEXT = re.compile(r"(?:comment line|heartbeat comment|a comment)[^.;|]*?every (\d+(?:\.\d+)?) s",
                            re.IGNORECASE)
ROOT = Path(__file__).resolve().parents[3]


def test_the_heartbeat_interval_is_one_number_in_the_code_the_openapi_text_and_every_doc(client):
    """The stream's heartbeat was "at least every 15 s" in the README's table and the OpenAPI text and
    "every 10 s" in the README's details and the code: every text now gives the code's constant."""
    said: dict[float, list[str]] = {}
    for path in [ROOT / "README.md", ROOT / "client" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                 ROOT / "client" / "scan_api_client" / "client.py"]:
        for found in HEARTBEAT_TEXT.finditer(path.read_text()):
            said.setdefault(float(found[1]), []).append(path.name)
    stream = client.get("/api/v1/openapi.json").get_json()["paths"]["/api/v1/events/stream"]["get"]
    for found in HEARTBEAT_TEXT.finditer(stream["responses"]["200"]["description"]):
        said.setdefault(float(found[1]), []).append("openapi.json")
    where = {name for names in said.values() for name in names}
    assert {"openapi.json", "README.md"} <= where, said
    assert set(said) == {feed.HEARTBEAT_SECONDS}, said
