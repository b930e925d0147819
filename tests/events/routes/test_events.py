"""The events list over HTTP (D27): the account's events of the key's mode, charged 1 credit,
scope scans:read, paged by cursor, the stored body spliced in as stored."""
import re

from app.events import feed
from app.events.models import Event
from app.extensions import db
from app.tracking import states
from tests.api.helpers import balance

RESULT = {"risk": {"score": 10, "band": "low"}}


def test_the_list_is_charged_paged_and_carries_the_stored_bytes(client, make_customer):
    account = make_customer(credits=50)
    other = make_customer(name="Other")
    scan_id = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    theirs = client.post("/api/v1/scan", json={"target": "joe@example.com"}, headers=other.headers).json["scan_id"]
    with db.connection_context():
        states.complete(scan_id, RESULT)
        states.complete(theirs, RESULT)
        stored = Event.get((Event.scan_id == scan_id) & (Event.kind == "scan.completed"))
    before = balance(account)

    r = client.get("/api/v1/events?limit=1", headers=account.headers)
    assert r.status_code == 200, r.json
    assert balance(account) == before - 1 and r.headers["X-Credits-Remaining"] == str(before - 1)
    [newest] = r.json["data"]
    assert r.json["has_more"] is True
    assert list(newest) == ["event_id", "event", "created_at", "livemode", "body"]
    assert (newest["event_id"], newest["event"], newest["livemode"]) == (feed.event_id(stored.id), "scan.completed", True)
    assert stored.body in r.get_data(as_text=True)  # the stored bytes, spliced in
    r = client.get(f"/api/v1/events?starting_after={newest['event_id']}", headers=account.headers)
    assert [e["event"] for e in r.json["data"]] == ["scan.running"] and r.json["has_more"] is False
    assert all(e["body"]["scan_id"] == scan_id for e in r.json["data"])

    r = client.get("/api/v1/events?payload=thin&events=scan.completed", headers=account.headers)
    assert [e["body"].get("target") for e in r.json["data"]] == [None]
    r = client.get("/api/v1/events?events=scan.exploded", headers=account.headers)
    assert r.status_code == 400 and r.json["error"] == "invalid_request"
    r = client.get("/api/v1/events?starting_after=12x", headers=account.headers)
    assert r.status_code == 400 and r.json["error"] == "invalid_request"


def test_event_ids_show_nothing_of_other_customers_and_numbers_are_refused(client, make_customer):
    account, other = make_customer(credits=50), make_customer(name="Other", credits=50)
    mine = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    theirs = [client.post("/api/v1/scan", json={"target": f"joe{i}@example.com"}, headers=other.headers)
              .json["scan_id"] for i in range(3)]
    with db.connection_context():
        states.complete(mine, RESULT)  # scan.running then scan.completed
        for scan_id in theirs:  # six events of another customer in between
            states.complete(scan_id, RESULT)
        stored = [e.id for e in Event.select().where(Event.customer == account.id).order_by(Event.id)]
    ids = [e["event_id"] for e in client.get("/api/v1/events", headers=account.headers).json["data"]]
    assert all(re.fullmatch(r"evt_[0-9a-f]{32}", i) for i in ids) and len(ids) == 2
    assert ids == [feed.event_id(n) for n in reversed(stored)]  # sealed numbers: no gap between them to measure
    page = client.get(f"/api/v1/events?starting_after={ids[0]}", headers=account.headers).json["data"]
    assert [e["event_id"] for e in page] == ids[1:]  # paging with them loses nothing
    for number in (f"evt_{stored[0]}", str(stored[0]), f"evt_{'0' * 32}"):
        r = client.get(f"/api/v1/events?starting_after={number}", headers=account.headers)
        assert r.status_code == 400 and r.json["error"] == "invalid_request"
        r = client.get(f"/api/v1/events/stream?after={number}", headers=account.headers)
        assert r.status_code == 400 and r.json["error"] == "invalid_request"
        r = client.get("/api/v1/events/stream", headers={**account.headers, "Last-Event-ID": number})
        assert r.status_code == 400 and r.json["error"] == "invalid_request"
