"""The watches' scheduler (D28): due times in the database, claimed in batches; each due scan
admitted as a creation; a scan that cannot be made tried again with its reason kept, and after
three intervals without one the watch paused with ``watch.paused``."""
from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.billing import charges
from app.extensions import db
from app.scans.models import Scan
from app.watches import statements as watch_store
from app.watches import watch_times, watchlist
from app.watches.models import Watch
from app.webhooks.models import WebhookDelivery

START = datetime(2026, 11, 21, 12, 0, 0)
WATCHES = "/api/v1/watches"


def create(client, account, **body):
    with freeze_time(START):
        r = client.post(WATCHES, headers=account.headers,
                        json={"target": "jane.doe@example.com", "interval": "daily", **body})
    assert r.status_code == 201, r.json
    return r.json["watch_id"]


def watch(watch_id) -> Watch:
    with db.connection_context():
        return Watch.get_by_id(watch_id)


def scans_of(watch_id) -> list[Scan]:
    with db.connection_context():
        return list(Scan.select().where(Scan.watch_id == watch_id).order_by(Scan.created_at))


def run_at(moment: datetime) -> dict:
    with freeze_time(moment), db.connection_context():
        return watchlist.run_due(moment)


def test_a_new_watch_takes_the_lowest_free_slot_and_a_new_interval_another(client, account):
    ids = [create(client, account, target=f"user{n}@example.com") for n in range(3)]
    assert [watch(i).slot for i in ids] == [0, 1, 2]
    client.delete(f"{WATCHES}/{ids[1]}", headers=account.headers)
    again = create(client, account, target="user9@example.com")
    assert watch(again).slot == 1  # the ended watch's slot, free again
    with freeze_time(START):
        moved = client.patch(f"{WATCHES}/{ids[2]}", headers=account.headers, json={"interval": "weekly"})
    assert moved.status_code == 200 and watch(ids[2]).slot == 0  # the first weekly watch
    assert watch(ids[2]).next_scan_at == watch_times.next_due(account.id, 0, "weekly", START, START)
    paused = client.patch(f"{WATCHES}/{ids[0]}", headers=account.headers, json={"status": "paused"})
    assert paused.status_code == 200 and watch(ids[0]).slot == 0  # a paused watch keeps its place
    assert watch(create(client, account, target="user10@example.com")).slot == 2


def test_a_scan_made_late_is_followed_by_the_next_one_at_least_half_an_interval_on(client, account):
    watch_id = create(client, account)
    due = watch(watch_id).next_scan_at
    assert run_at(due + timedelta(hours=13))["watch_scans"] == 1  # claimed 13 hours late (a backlog)
    assert watch(watch_id).next_scan_at == due + timedelta(days=2)


def test_one_customers_due_watches_run_alone_and_the_others_stay_due(client, account, make_customer):
    """The operator's QA runs (``--customer``) move no other customer's watches."""
    other = make_customer()
    mine, theirs = create(client, account), create(client, other)
    moment = max(watch(mine).next_scan_at, watch(theirs).next_scan_at)
    with freeze_time(moment), db.connection_context():
        assert watchlist.run_due(moment, customer_id=account.id)["watch_scans"] == 1
    assert (len(scans_of(mine)), len(scans_of(theirs))) == (2, 1)  # a baseline each, one more of mine
    assert watch(theirs).next_scan_at <= moment  # still due
    assert run_at(moment)["watch_scans"] == 1  # the periodic job's run takes the rest


def test_a_due_watch_is_scanned_once_charged_and_due_again_an_interval_later(client, account):
    watch_id = create(client, account)
    due = watch(watch_id).next_scan_at
    assert run_at(due - timedelta(seconds=1))["watch_scans"] == 0
    before = account.customer.balance - 1
    report = run_at(due)
    assert report["watch_scans"] == 1
    assert run_at(due)["watch_scans"] == 0  # claimed and moved: not made twice
    later = watch(watch_id)
    baseline, scheduled = scans_of(watch_id)
    assert later.last_scan_id == scheduled.id and scheduled.created_at == due
    assert later.next_scan_at == due + timedelta(days=1) and later.last_error is None
    with db.connection_context():
        assert charges.balance_of(account.id) == before - 1


def test_a_test_keys_watch_is_scanned_on_schedule_on_the_sandbox_free(client, account):
    from tests import factories
    with db.connection_context():
        test = factories.sandbox_key(account)
    watch_id = create(client, test)
    due = watch(watch_id).next_scan_at
    with db.connection_context():
        before = charges.balance_of(account.id)
    assert run_at(due)["watch_scans"] == 1
    baseline, scheduled = scans_of(watch_id)
    assert (scheduled.livemode, scheduled.engine_id.startswith("sbx_")) == (False, True)
    assert watch(watch_id).next_scan_at == due + timedelta(days=1)
    with db.connection_context():
        assert charges.balance_of(account.id) == before


def test_a_paused_watch_is_not_scanned(client, account):
    watch_id = create(client, account)
    due = watch(watch_id).next_scan_at
    client.patch(f"{WATCHES}/{watch_id}", headers=account.headers, json={"status": "paused"})
    assert run_at(due + timedelta(days=5))["watch_scans"] == 0 and len(scans_of(watch_id)) == 1


def test_a_scan_that_cannot_be_made_is_tried_again_then_the_watch_is_paused(client, make_customer):
    account = make_customer(credits=2)  # one for the endpoint's creation, one for the watch's
    endpoint = client.post("/api/v1/endpoints", headers=account.headers,
                           json={"url": "https://hooks.example.com/w", "events": ["watch.paused"]})
    assert endpoint.status_code == 201, endpoint.json
    watch_id = create(client, account)  # the balance is 0 after this
    due = watch(watch_id).next_scan_at
    report = run_at(due)
    assert report["watch_scans_missed"] == 1, report
    missed = watch(watch_id)
    assert missed.status == "active" and "balance" in missed.last_error and missed.missed_since == due
    assert missed.next_scan_at == due + timedelta(hours=3)
    assert run_at(due + timedelta(days=2))["watch_scans_missed"] == 1
    assert run_at(due + timedelta(days=3))["watches_paused"] == 1
    paused = watch(watch_id)
    assert (paused.status, paused.next_scan_at) == ("paused", None) and len(scans_of(watch_id)) == 1
    with db.connection_context():
        [delivery] = WebhookDelivery.select().where(WebhookDelivery.event == "watch.paused")
    body = json.loads(delivery.body)
    assert (body["watch_id"], body["reason"], body["target"]) == (watch_id, "no_scan_possible",
                                                                  "jane.doe@example.com")


def test_a_claim_skips_the_watches_another_claim_holds(client, account):
    first, second = create(client, account), create(client, account, target="john@example.com")
    now = START + timedelta(days=3)
    held, release = threading.Event(), threading.Event()
    claimed_by_other: list = []

    def other():
        with db.connection_context(), db.atomic():
            claimed_by_other.extend(w.id for w in watch_store.claim_due(now, now + timedelta(minutes=10), 1))
            held.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert held.wait(10)
        with db.connection_context(), db.atomic():
            mine = [w.id for w in watch_store.claim_due(now, now + timedelta(minutes=10), 10)]
    finally:
        release.set()
        thread.join()
    assert sorted(claimed_by_other + mine) == sorted([first, second]) and not set(claimed_by_other) & set(mine)


def test_a_revoked_keys_watch_makes_no_scan_and_says_why(client, account):
    from app.accounts import admin
    watch_id = create(client, account)
    due = watch(watch_id).next_scan_at
    with db.connection_context():
        admin.revoke_key(account.key.id)
    assert run_at(due)["watch_scans_missed"] == 1
    missed = watch(watch_id)
    assert len(scans_of(watch_id)) == 1 and "revoked" in missed.last_error and missed.status == "active"


def test_a_watch_ended_after_its_claim_makes_no_scan(client, account):
    """The admission locks the watch's row and reads its status again: an end that committed after
    the claim wins, and nothing is charged."""
    watch_id = create(client, account)
    due = watch(watch_id).next_scan_at
    with freeze_time(due):
        with db.connection_context(), db.atomic():
            [claimed] = watch_store.claim_due(due, due + timedelta(minutes=10), 10)
        client.delete(f"{WATCHES}/{watch_id}", headers=account.headers)
        with db.connection_context():
            balance = charges.balance_of(account.id)
            assert watchlist._scan_due(claimed, due) == "watch_scans_skipped"
            assert charges.balance_of(account.id) == balance
    assert len(scans_of(watch_id)) == 1


def test_create_watches_says_per_entry_what_became_of_it_and_spreads_their_scans(make_customer):
    account = make_customer(inflight=50)
    targets = [{"target": f"user{n}@example.com"} for n in range(20)] + [{"target": "ab"}, {"nope": 1}]
    with freeze_time(START), db.connection_context():
        body, outcome = watchlist.create_watches(account.customer, account.key.id, targets, "daily",
                                               request_id="req_test", livemode=True, purpose=None, case_ref=None)
    assert (body["total"], body["created"], outcome.cost) == (22, 20, 20)
    assert [w["index"] for w in body["watches"]] == list(range(20))
    assert [(e["index"], e["error"]) for e in body["rejected"]] == [(20, "target_too_short"),
                                                                      (21, "invalid_request")]
    # Each watch's own place in the interval: made together, they do not fall due together.
    assert sorted(watch(w["watch_id"]).slot for w in body["watches"]) == list(range(20))
    due = sorted(watch(w["watch_id"]).next_scan_at for w in body["watches"])
    assert len(set(due)) == 20 and due[-1] - due[0] < timedelta(days=1)
    assert all(watch(w["watch_id"]).last_scan_id == w["last_scan_id"] for w in body["watches"])
    with db.connection_context():
        batch = {s.watch_id for s in Scan.select().where(Scan.bulk == body["bulk_id"])}
    assert batch == {w["watch_id"] for w in body["watches"]}


def test_the_portal_lists_both_modes_and_makes_watches_only_with_a_key_that_may(client, account):
    from app.accounts import admin
    from app.plumbing.errors import Forbidden, NotFound
    from tests import factories
    live = create(client, account)
    with db.connection_context():
        test = factories.sandbox_key(account)
    with freeze_time(START):
        r = client.post(WATCHES, headers=test.headers, json={"target": "+447700900123", "interval": "weekly"})
    assert r.status_code == 201
    with db.connection_context():
        both = watchlist.portal_watches(account.id)
        assert {w["watch_id"] for w in both.items} == {r.json["watch_id"], live} and both.total == 2
        assert [w["livemode"] for w in watchlist.portal_watches(account.id, livemode=False).items] == [False]
        assert watchlist.portal_watches(account.id, status="paused").total == 0
        narrow, _ = admin.issue_key(account.id, "narrow", scopes=["scans:read"])
        assert {k.id for k in watchlist.watch_keys(account.id)} == {account.key.id, test.key.id}
        with pytest.raises(Forbidden, match="lacks the scope watches"):
            watchlist.portal_create(account.customer, narrow.id, "a@b.example", None, "daily")
        with pytest.raises(NotFound):
            watchlist.portal_create(account.customer, "key_someone_elses", "a@b.example", None, "daily")
        # Paused and resumed in its own mode, from the portal.
        assert watchlist.portal_set_status(account.id, r.json["watch_id"], "paused")["status"] == "paused"
        assert watchlist.portal_end(account.id, live)["status"] == "ended"
        with pytest.raises(NotFound):
            watchlist.portal_end("cus_other", r.json["watch_id"])
