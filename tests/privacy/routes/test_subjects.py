"""A data subject's requests from the operator CLI: ``subjects export`` (JSON for an access request)
and ``subjects erase`` (every customer's scans of the person), the target in any spelling."""
import json

from app.extensions import db
from app.scans.models import Scan

SCAN = "/api/v1/scan"


def cli(app, *args):
    return app.test_cli_runner().invoke(args=list(args))


def test_export_then_erase_a_person_across_customers(app, client, account, make_customer):
    other = make_customer()
    mine = client.post(SCAN, json={"target": "jane.doe@example.com", "purpose": "kyc_aml", "case_ref": "C-1"},
                       headers=account.headers).get_json()["scan_id"]
    theirs = client.post(SCAN, json={"target": "Jane.Doe@EXAMPLE.com"}, headers=other.headers).get_json()["scan_id"]
    exported = cli(app, "subjects", "export", "JANE.DOE@example.com")
    assert exported.exit_code == 0, exported.output
    answer = json.loads(exported.output)
    assert answer["ok"] is True and sorted(answer["customers"]) == sorted([account.id, other.id])
    assert [(e["customer_id"], e["action"], e["resource_id"], e["purpose"], e["case_ref"])
            for e in answer["lookups"] if e["customer_id"] == account.id] == [
        (account.id, "scan.create", mine, "kyc_aml", "C-1")]
    assert {s["scan_id"] for s in answer["held"]["scans"]} == {mine, theirs}
    assert "jane" not in exported.output.lower()

    erased = json.loads(cli(app, "subjects", "erase", "jane.doe@example.com", "--json").output)
    # the simulator has not finished them: in flight, listed, nothing erased yet
    assert erased == {"ok": True, "erased": 0, "in_flight": sorted([mine, theirs])}
    with db.connection_context():
        assert Scan.get_by_id(mine).target == "jane.doe@example.com"


def test_a_target_that_is_not_one_is_one_line_and_exit_1(app):
    exported = cli(app, "subjects", "export", "jane@")  # JSON, as its answer: a JSON error and the line
    assert exported.exit_code == 1 and json.loads(exported.output.splitlines()[0])["ok"] is False
    erased = cli(app, "subjects", "erase", "jane@")
    assert erased.exit_code == 1 and len(erased.output.strip().splitlines()) == 1, erased.output
    for result in (exported, erased):
        assert "Traceback" not in result.output and "jane" not in result.output


def test_an_opt_out_reaches_the_customer_as_subject_opted_out_in_its_events_without_the_target(app, client,
                                                                                                account):
    scan_id = client.post(SCAN, json={"target": "jane.doe@example.com"}, headers=account.headers).get_json()["scan_id"]
    endpoint = client.post("/api/v1/endpoints", json={"url": "https://receiver.example/privacy",
                                                      "events": ["subject.opted_out"]}, headers=account.headers)
    assert endpoint.status_code == 201, endpoint.get_json()
    assert cli(app, "suppressions", "add", "email", "Jane.Doe+x@Example.com").exit_code == 0
    listed = client.get("/api/v1/events", query_string={"events": "subject.opted_out"}, headers=account.headers)
    [event] = listed.get_json()["data"]
    assert event["body"]["scan_ids"] == [scan_id] and set(event["body"]) == {"event", "scan_ids", "at"}
    deliveries = client.get("/api/v1/deliveries", query_string={"event": "subject.opted_out"},
                            headers=account.headers).get_json()["data"]
    assert [json.loads(d["body"])["scan_ids"] for d in deliveries] == [[scan_id]]  # the exact bytes sent
    assert "jane" not in listed.get_data(as_text=True).lower()
