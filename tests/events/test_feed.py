"""feed: every event stored once per customer and mode (D27) with the bytes a full delivery
sends, thin bodies derived from it, erasure leaving thin bodies, retention, and the list's
paging and filters."""
import json
from datetime import timedelta

import pytest
from freezegun import freeze_time

from app.events import feed
from app.events.models import Event
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import utcnow
from app.privacy import erasure
from app.tracking import states
from app.webhooks import endpoints, outbox
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan

URL = "https://hooks.example.com/x"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="
RESULT = {"risk": {"score": 10, "band": "low"}}


def test_an_event_is_stored_once_with_the_full_deliverys_bytes_and_thin_from_them(conn):
    cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    endpoints.create(key, url="https://hooks.example.com/thin", payload="thin",
                     events=["scan.completed", "scan.running"])
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)

    stored = list(Event.select().where(Event.scan_id == scan.id).order_by(Event.id))
    assert [e.kind for e in stored] == ["scan.running", "scan.completed"]  # one of each, running first
    completed = stored[1]
    assert (completed.customer_id, completed.livemode, completed.bulk_id) == (cust.id, True, None)
    bodies = {d.endpoint_id: d.body for d in WebhookDelivery.select().where(
        WebhookDelivery.scan_id == scan.id, WebhookDelivery.event == "scan.completed")}
    full, thin = bodies[outbox.first_endpoint_id(key.id)], next(b for e, b in bodies.items()
                                                                  if e != outbox.first_endpoint_id(key.id))
    assert completed.body == full  # the same bytes
    assert feed.thin_body("scan.completed", completed.body) == thin
    assert "jane" not in thin and json.loads(full)["result"] == RESULT


def test_events_are_stored_without_any_endpoint_each_of_its_own_mode(conn):
    cust, key = new_customer()
    test_cust, test_key = new_customer(livemode=False)
    live, sandbox = new_scan(cust, key), new_scan(test_cust, test_key)
    states.fail(live.id, "engine_failed", "no")
    states.complete(sandbox.id, RESULT)
    assert WebhookDelivery.select().count() == 0
    rows = {(e.customer_id, e.livemode, e.kind) for e in Event.select()}
    assert rows == {(cust.id, True, "scan.running"), (cust.id, True, "scan.failed"),
                    (test_cust.id, False, "scan.running"), (test_cust.id, False, "scan.completed")}
    assert feed.list_events(cust.id, livemode=False)["data"] == []


def test_the_list_pages_newest_first_and_filters(conn):
    cust, key = new_customer(credits=20)
    scans = [new_scan(cust, key, f"p{i}@example.com") for i in range(3)]
    for scan in scans:
        states.complete(scan.id, RESULT)
    first = feed.list_events(cust.id, livemode=True, limit=4)
    assert first["has_more"] is True
    ids = [feed.parse_event_id(e["event_id"], "id") for e in first["data"]]
    assert ids == sorted(ids, reverse=True)
    rest = feed.list_events(cust.id, livemode=True, starting_after=first["data"][-1]["event_id"])
    assert rest["has_more"] is False and len(rest["data"]) == 2
    assert all(feed.parse_event_id(e["event_id"], "id") < ids[-1] for e in rest["data"])

    only = feed.list_events(cust.id, livemode=True, events_filter="scan.completed", scan_id=scans[1].id)
    [entry] = only["data"]
    assert (entry["event"], entry["body"].value()["scan_id"]) == ("scan.completed", scans[1].id)
    thin = feed.list_events(cust.id, livemode=True, scan_id=scans[1].id, payload="thin")["data"]
    assert all("target" not in e["body"].value() for e in thin) and len(thin) == 2
    for bad in ({"events_filter": "scan.exploded"}, {"payload": "medium"}, {"starting_after": "dlv_1"}):
        with pytest.raises(InvalidRequest):
            feed.list_events(cust.id, livemode=True, **bad)


def test_erasure_leaves_the_thin_body_and_retention_removes_old_events(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)
    erasure.erase_scan(customer_id=cust.id, scan_id=scan.id, livemode=True)
    for event in Event.select():  # the scan's and any the erasure itself tells of
        assert "jane" not in event.body and "result" not in json.loads(event.body)
    scans_events = [json.loads(event.body) for event in Event.select().where(Event.scan_id == scan.id)]
    assert [body["scan_id"] for body in scans_events] == [scan.id, scan.id]
    stored = Event.select().count()
    with freeze_time(utcnow() + timedelta(days=31)):
        assert feed.remove_past_retention() == stored
    assert Event.select().count() == 0


def test_a_customers_event_ids_increase_in_commit_order(conn):
    """An event written while another of the customer's is uncommitted waits for that commit, so a
    stream that passed an id never meets a smaller one later."""
    import threading
    import time

    from app.extensions import db
    from app.plumbing.db import transaction

    cust, key = new_customer()
    first, second = new_scan(cust, key), new_scan(cust, key, "joe@example.com")
    written = {}

    def running(scan):
        return feed.NewEvent(cust.id, True, "scan.running", '{"event":"scan.running"}', scan_id=scan.id)

    def slow_writer():
        with db.connection_context(), transaction():
            written["slow"] = feed.record([running(first)])[0]
            time.sleep(0.8)
            written["slow_committed"] = time.monotonic()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    while "slow" not in written:
        time.sleep(0.01)
    with transaction():
        written["fast"] = feed.record([running(second)])[0]
    fast_done = time.monotonic()
    writer.join()
    assert written["fast"] > written["slow"]
    assert fast_done >= written["slow_committed"]  # it waited for the earlier id's commit


def test_a_watch_scans_events_are_filed_under_its_watch(conn):
    from app.scans.models import Scan

    cust, key = new_customer()
    watched, other = new_scan(cust, key), new_scan(cust, key, "joe@example.com")
    Scan.update(watch_id="wch_1").where(Scan.id == watched.id).execute()
    states.complete(watched.id, RESULT)
    states.complete(other.id, RESULT)
    listed = feed.list_events(cust.id, livemode=True, watch_id="wch_1")["data"]
    assert [e["event"] for e in listed] == ["scan.completed", "scan.running"]
    assert {e["body"].value()["scan_id"] for e in listed} == {watched.id}


def test_events_stored_last_hold_no_lock_of_their_customer_until_the_block_ends(conn):
    """A transaction that records its events inside ``stored_last`` (a look's: its finals and
    running events) lets another transaction of the same customer record and commit its own
    meanwhile; the held events are stored at the block's end, after those, so ids still increase
    in commit order."""
    import threading

    from app.extensions import db
    from app.plumbing.db import transaction

    cust, key = new_customer()
    first, second = new_scan(cust, key), new_scan(cust, key, "joe@example.com")
    other_committed = threading.Event()
    seen = {}

    def look():
        with db.connection_context(), transaction(), feed.stored_last():
            states.running_events([first])
            seen["recorded"] = True
            seen["other_went_first"] = other_committed.wait(timeout=10)

    looker = threading.Thread(target=look)
    looker.start()
    while "recorded" not in seen:
        other_committed.wait(0.01)
    with transaction():  # waited for the looker's commit before the change, 10 s
        states.running_events([second])
    other_committed.set()
    looker.join()
    assert seen["other_went_first"]
    ids = {e.scan_id: e.id for e in Event.select()}
    assert ids[first.id] > ids[second.id]  # the later commit has the larger id


def test_an_event_and_an_admission_take_a_customers_locks_in_one_order(conn, database_url):
    """A callback stores an event while an admission holds the customer's row, and the admission
    then stores its own event. Before, the event's foreign key check waited for that row while
    holding the event lock, which the admission then waited for: a deadlock (one of them
    refused). Now the row's key share comes first and no admission's lock stands in its way."""
    import threading

    import psycopg2

    from app.accounts.statements.customers import LOCK_CUSTOMER
    from app.extensions import db
    from app.plumbing.db import transaction
    cust, key = new_customer()
    scan = new_scan(cust, key)
    outcome = {}

    def callback():
        try:
            with db.connection_context(), transaction():
                outcome["id"] = feed.record([feed.NewEvent(cust.id, True, "scan.running", '{"event":"scan.running"}',
                                                           scan_id=scan.id)])[0]
        except Exception as exc:
            outcome["error"] = exc

    admission = psycopg2.connect(database_url)
    try:
        cursor = admission.cursor()
        cursor.execute(LOCK_CUSTOMER.replace("?", "%s"), (cust.id,))
        writer = threading.Thread(target=callback)
        writer.start()
        writer.join(timeout=10)  # returns at once now; before, the callback was still waiting here
        assert not writer.is_alive(), "the event waited for the admission's row lock"
        cursor.execute("SELECT pg_advisory_xact_lock(27, hashtext(%s))", (cust.id,))  # the admission's event
        admission.commit()
    finally:
        admission.close()
        writer.join()
    assert "error" not in outcome and outcome["id"] > 0


def test_a_stream_sends_nothing_it_read_once_its_key_is_refused(conn, app):
    from app.events import waits
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.complete(scan.id, RESULT)  # two events stored before the stream starts after number 0
    allowed = [True]
    held = waits.hold(key.id, 30)
    text = feed.stream(cust.id, True, feed.check_filters()[0], thin=False, start=feed.StreamFrom(0), held=held,
                       allowed=lambda: allowed[0])
    assert next(text).startswith("retry:")
    assert next(text).startswith("id: evt_")  # read and allowed: sent
    next(text)
    allowed[0] = False
    other = new_scan(cust, key, target="joe@example.com")
    states.complete(other.id, RESULT)
    rest = list(text)  # it reads the new events, asks, and ends without them
    assert rest == [feed.KEY_REFUSED]
