"""Erasure over HTTP (D20): DELETE a scan or a batch, 1 credit each (a scan in flight: 409, free);
reads, list and aggregate entries of an erased scan show ``erased_at`` and no target or result;
the retention setting from the operator CLI."""
import json

from app.extensions import db
from app.tracking import states
from tests.api.helpers import assert_books_balance, balance

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
RESULT = {"risk": {"score": 10, "band": "low"}}


def complete(scan_id):
    with db.connection_context():
        states.complete(scan_id, RESULT)


def test_erasing_a_scan_costs_a_credit_and_its_reads_keep_only_what_billing_needs(client, account):
    scan_id = client.post(SCAN, json={"target": "jane.doe@example.com", "purpose": "kyc_aml", "case_ref": "C-1"},
                          headers=account.headers).json["scan_id"]
    in_flight = client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
    assert (in_flight.status_code, in_flight.json["error"]) == (409, "scan_in_flight")
    assert in_flight.headers["X-Credits-Remaining"] == "99"  # free
    complete(scan_id)
    erased = client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
    assert erased.status_code == 200, erased.json
    assert set(erased.json) == {"ok", "scan_id", "erased_at"} and erased.json["scan_id"] == scan_id
    assert erased.headers["X-Credits-Remaining"] == "98" == str(balance(account))
    read = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json
    assert read["erased_at"] == erased.json["erased_at"]
    assert "target" not in read and "result" not in read
    assert (read["status"], read["purpose"], read["case_ref"]) == ("completed", "kyc_aml", "C-1")
    listed = client.get("/api/v1/scans", headers=account.headers).json["data"][0]
    assert "target" not in listed and "result" not in listed and listed["erased_at"] == erased.json["erased_at"]
    again = client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
    assert again.json == erased.json
    assert_books_balance(account)


def test_another_customers_scan_cannot_be_erased(client, account, make_customer):
    other = make_customer()
    scan_id = client.post(SCAN, json={"target": "jane.doe@example.com"}, headers=account.headers).json["scan_id"]
    complete(scan_id)
    refused = client.delete(f"{SCAN}/{scan_id}", headers=other.headers)
    assert refused.status_code == 403
    assert client.delete(f"{SCAN}/scn_nope", headers=other.headers).status_code == 404
    assert client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["target"] == "jane.doe@example.com"


def test_erasing_a_batch_counts_what_it_erased_and_what_is_in_flight(client, make_customer):
    acct = make_customer(tier="enterprise", credits=100)
    created = client.post(BULK, json={"targets": [{"target": "a.person@example.com"},
                                                  {"target": "b.person@example.com"}]}, headers=acct.headers).json
    complete(created["scans"][0]["scan_id"])
    erased = client.delete(f"{BULK}/{created['bulk_id']}", headers=acct.headers)
    assert erased.status_code == 200
    assert erased.json == {"ok": True, "bulk_id": created["bulk_id"], "erased": 1, "in_flight": 1}
    entries = client.get(f"{BULK}/{created['bulk_id']}", headers=acct.headers).json["scans"]
    assert ["target" in e for e in entries] == [False, True] and "erased_at" in entries[0]
    assert erased.headers["X-Credits-Remaining"] == "97"  # 2 scans, then the erasure
    assert balance(acct) == 96  # and the read of the batch
    assert_books_balance(acct)


def test_the_operator_sets_a_customers_retention(app, account):
    runner = app.test_cli_runner()
    shown = json.loads(runner.invoke(args=["customers", "settings", account.id, "--json"]).output)
    assert shown["settings"]["result_retention_days"] == 90
    changed = runner.invoke(args=["customers", "settings", account.id, "--result-retention-days", "30", "--json"])
    assert json.loads(changed.output)["settings"]["result_retention_days"] == 30
    refused = runner.invoke(args=["customers", "settings", account.id, "--result-retention-days", "0"])
    assert refused.exit_code != 0 and "from 1 to 3650" in refused.output
    assert "30 days" in runner.invoke(args=["customers", "settings", account.id]).output


def test_the_operator_erases_a_scan_and_everything_past_retention(app, client, account):
    from datetime import timedelta

    from app.plumbing.models import utcnow
    from app.scans.models import Scan
    runner = app.test_cli_runner()
    ids = [client.post(SCAN, json={"target": f"person{i}@example.com"}, headers=account.headers).json["scan_id"]
           for i in range(3)]
    for scan_id in ids:
        complete(scan_id)
    erased = json.loads(runner.invoke(args=["scans", "erase", ids[0], "--json"]).output)
    assert erased["ok"] is True and erased["scan_id"] == ids[0]
    with db.connection_context():  # the second ended two days ago, under a one-day retention
        Scan.update(completed_at=utcnow() - timedelta(days=2)).where(Scan.id == ids[1]).execute()
    runner.invoke(args=["customers", "settings", account.id, "--result-retention-days", "1"])
    shown = runner.invoke(args=["scans", "erase-expired"])
    assert shown.exit_code == 0 and "1 scan(s) erased" in shown.output
    assert json.loads(runner.invoke(args=["scans", "erase-expired", "--json"]).output)["erased"] == 0
    reads = [client.get(f"{SCAN}/{scan_id}", headers=account.headers).json for scan_id in ids]
    assert ["erased_at" in read for read in reads] == [True, True, False]
    missing = runner.invoke(args=["scans", "erase", "scn_nope"])
    assert missing.exit_code != 0 and "no scan with this id" in missing.output


def test_nothing_of_an_erased_batch_is_left_anywhere_not_even_in_a_replayed_creation(client, make_customer):
    """A hostile look after erasure: every table's text, and the stored answer an Idempotency-Key
    replays, searched for the targets."""
    from app.tables import ALL_MODELS
    acct = make_customer(tier="enterprise", credits=100)
    headers = {**acct.headers, "Idempotency-Key": "erase-me-1"}
    body = {"targets": [{"target": "hidden.one@example.com"}, {"target": "hidden.two@example.com"}]}
    created = client.post(BULK, json=body, headers=headers).json
    for entry in created["scans"]:
        complete(entry["scan_id"])
    assert client.delete(f"{BULK}/{created['bulk_id']}", headers=acct.headers).json["erased"] == 2
    with db.connection_context():
        stored = "\n".join(repr(row) for model in ALL_MODELS for row in model.select().tuples())
    assert "hidden." not in stored
    replay = client.post(BULK, json=body, headers=headers)
    assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json["bulk_id"] == created["bulk_id"] and "hidden." not in replay.get_data(as_text=True)
    assert [entry.get("target") for entry in replay.json["scans"]] == [None, None]
