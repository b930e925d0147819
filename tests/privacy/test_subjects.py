"""subjects: a data subject's access request (who looked them up, what is held), the erasure of every
customer's scans of them, and each customer told of an opt-out or an erasure, without the target."""
import json
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.activity import entries
from app.events import feed
from app.plumbing.errors import ServiceError
from app.plumbing.rawjson import parsed
from app.privacy import subjects, suppressions
from app.scans.models import Scan
from app.tracking import states
from app.webhooks import endpoints
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan

T0 = datetime(2031, 5, 4, 10, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}, "ai_summary": "x"}
HOOK = "https://receiver.example/subjects"


def completed(cust, key, target, kind=None):
    scan = new_scan(cust, key, target, kind)
    states.complete(scan.id, RESULT)
    return scan.id


def feed_bodies(cust, livemode=True):
    return [parsed(e["body"]) for e in feed.list_events(cust.id, livemode=livemode)["data"]]


@pytest.fixture
def two_customers(conn):
    with freeze_time(T0):
        a, a_key = new_customer(credits=50)
        b, b_key = new_customer(credits=50)
        endpoints.create(a_key, url=HOOK, events=["subject.opted_out", "subject.erased"])
        scans = {"a_jane": completed(a, a_key, "Jane.Doe+news@Example.com"),
                 "a_other": completed(a, a_key, "someone.else@example.com"),
                 "b_jane": completed(b, b_key, "jane.doe@example.com"),
                 "b_flight": new_scan(b, b_key, "JANE.DOE@example.com").id}
        entries.record(customer_id=a.id, livemode=True, action="scan.create", status=202, key_id=a_key.id,
                        subject=entries.Subject(scans["a_jane"], entries.hashes_of([("email", "jane.doe@example.com")]),
                                                 "kyc_aml", "CASE-1"))
    return a, a_key, b, b_key, scans


def test_export_says_who_looked_the_person_up_why_and_what_is_held_in_any_spelling(two_customers):
    a, a_key, b, _, scans = two_customers
    answer = subjects.export(" JANE.DOE@example.COM ")
    assert [(e["customer_id"], e["resource_id"], e["purpose"], e["case_ref"], e["key_id"]) for e in answer["lookups"]] \
        == [(a.id, scans["a_jane"], "kyc_aml", "CASE-1", a_key.id)]
    assert answer["lookups"][0]["created_at"] == "2031-05-04T10:00:00Z"
    held = {s["scan_id"]: s for s in answer["held"]["scans"]}
    assert set(held) == {scans["a_jane"], scans["b_jane"], scans["b_flight"]}  # + tag and case: the same person
    assert held[scans["a_jane"]]["holds_result"] is True and held[scans["b_flight"]]["holds_result"] is False
    assert answer["customers"] == sorted([a.id, b.id]) and answer["opted_out"] is False
    assert "jane" not in json.dumps(answer).lower()  # the answer names nobody: the request says whom it is about
    assert subjects.export("nobody@example.com")["held"]["scans"] == []
    with pytest.raises(ServiceError):
        subjects.export("not an address@")


def test_erase_erases_every_customers_final_scans_of_the_person_and_tells_each(two_customers):
    a, _, b, _, scans = two_customers
    with freeze_time(T0):
        answer = subjects.erase("jane.doe@example.com")
    assert answer == {"erased": 2, "in_flight": [scans["b_flight"]]}
    for name in ("a_jane", "b_jane"):
        row = Scan.get_by_id(scans[name])
        assert row.target is None and row.result_json is None and row.erased_at == T0
    assert Scan.get_by_id(scans["a_other"]).target == "someone.else@example.com"
    told = {"event": "subject.erased", "scan_ids": [scans["a_jane"]], "at": "2031-05-04T10:00:00Z"}
    assert told in feed_bodies(a)
    assert {"event": "subject.erased", "scan_ids": [scans["b_jane"]], "at": "2031-05-04T10:00:00Z"} in feed_bodies(b)
    [delivery] = WebhookDelivery.select().where(WebhookDelivery.event == "subject.erased")  # a's endpoint lists it
    assert json.loads(delivery.body) == told
    # the activity log keeps the lookup (accountability); the held scans are gone
    assert [s["scan_id"] for s in subjects.export("jane.doe@example.com")["held"]["scans"]] == [scans["b_flight"]]
    assert len(subjects.export("jane.doe@example.com")["lookups"]) == 1


def test_an_opt_out_tells_each_customer_holding_a_scan_of_the_person_once(two_customers):
    a, _, b, _, scans = two_customers
    with freeze_time(T0):
        assert suppressions.add("email", "JANE.doe@example.com")["added"] is True
        suppressions.add("email", "jane.doe@example.com")  # recorded already: nobody told again
    opted = [body for body in feed_bodies(a) if body["event"] == "subject.opted_out"]
    assert opted == [{"event": "subject.opted_out", "scan_ids": [scans["a_jane"]], "at": "2031-05-04T10:00:00Z"}]
    [b_told] = [body for body in feed_bodies(b) if body["event"] == "subject.opted_out"]
    assert b_told["scan_ids"] == sorted([scans["b_jane"], scans["b_flight"]])
    deliveries = list(WebhookDelivery.select().where(WebhookDelivery.event == "subject.opted_out"))
    assert len(deliveries) == 1 and "jane" not in deliveries[0].body.lower()  # only a's endpoint lists it
    assert subjects.export("jane.doe@example.com")["opted_out"] is True


def test_a_test_mode_scan_is_told_in_test_mode(conn):
    with freeze_time(T0):
        cust, key = new_customer(credits=5, livemode=False)
        scan_id = completed(cust, key, "+44 7700 900123", "phone")
        suppressions.add("phone", "+447700900123")
    assert {"event": "subject.opted_out", "scan_ids": [scan_id], "at": "2031-05-04T10:00:00Z"} \
        in feed_bodies(cust, livemode=False)
    assert feed_bodies(cust, livemode=True) == []
