"""Results a customer can check (D23/E6): the result's sources, coverage, partial flag, findings and
the score's reasons on every read (single, aggregate, list) and in the webhook body."""
import json
import re

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.webhooks.models import WebhookDelivery
from tests.api.helpers import complete, rerun, status_of

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"
FAILED = ("rate_limited", "timeout")
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def assert_explained(result, *, partial):
    assert result["partial"] is partial
    failed = [s for s in result["sources"] if s["status"] in FAILED]
    assert bool(failed) is partial and result["coverage"]["failed"] == len(failed)
    assert 10 <= result["coverage"]["checked"] <= 20
    finding_ids = {f["id"] for f in result["findings"]}
    assert finding_ids and all(f["source_ids"] for f in result["findings"])
    assert sum(r["points"] for r in result["risk"]["reasons"]) == result["risk"]["score"]
    assert all(set(r["finding_ids"]) <= finding_ids for r in result["risk"]["reasons"])


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_partial_result_reads_with_its_sources_coverage_findings_and_reasons(client, account, jobs):
    with freeze_time(START) as frozen:
        partial_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        whole_id = complete(client, account, jobs, frozen, "jane@example.com")
        partial = client.get(f"{SCAN}/{partial_id}", headers=account.headers).json["result"]
        again = client.get(f"{SCAN}/{partial_id}", headers=account.headers).json["result"]
        whole = client.get(f"{SCAN}/{whole_id}", headers=account.headers).json["result"]
        listed = {e["scan_id"]: e for e in client.get("/api/v1/scans", headers=account.headers).json["data"]}
    assert_explained(partial, partial=True)
    assert_explained(whole, partial=False)
    assert [f["id"] for f in again["findings"]] == [f["id"] for f in partial["findings"]]  # stable ids
    assert listed[partial_id]["result"] == partial


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_aggregate_entries_carry_the_explanation(client, account, jobs):
    with freeze_time(START) as frozen:
        bulk_id = client.post(BULK, json={"targets": [{"target": "partial.a@example.com"}, {"target": "+447700907777"},
                                                      {"target": "b@example.com"}]},
                              headers=account.headers).json["bulk_id"]
        assert jobs.run(frozen, until=lambda: client.get(f"{BULK}/{bulk_id}", headers=account.headers)
                        .json["all_done"])
        entries = client.get(f"{BULK}/{bulk_id}", headers=account.headers).json["scans"]
    assert [e["result"]["partial"] for e in entries] == [True, True, False]
    for entry, partial in zip(entries, (True, True, False), strict=True):
        assert_explained(entry["result"], partial=partial)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_the_webhook_body_carries_the_explanation(client, make_customer, jobs):
    account = make_customer(webhook_url="https://receiver.example.com/hook", webhook_secret="whsec_" + "A" * 32)
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "partial.jo@example.com")
        read = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]
    with db.connection_context():
        delivery = WebhookDelivery.get(WebhookDelivery.scan_id == scan_id)
    body = json.loads(delivery.body)
    assert body["result"] == read and "rerun_of" not in body
    assert body["result"]["partial"] is True and body["result"]["findings"]
    with freeze_time(START) as frozen:
        frozen.tick(600)
        rerun_id = rerun(client, account, scan_id).json["scan_id"]
        assert jobs.run(frozen, until=lambda: status_of(rerun_id) == "completed")
    with db.connection_context():
        again = json.loads(WebhookDelivery.get(WebhookDelivery.scan_id == rerun_id).body)
    assert list(again)[:3] == ["event", "scan_id", "rerun_of"] and again["rerun_of"] == scan_id
    assert again["result"]["partial"] is False


# --- a finding keeps its identity ----------------------------------------------------------------

def ids_by_item(result):
    """Each finding's id by its item's value (whatever its place)."""
    def item(path):
        name, index = path[:-1].split("[")
        group, _, member = name.partition(".")
        return (result[group][member] if member else result[group])[int(index)]
    return {json.dumps(item(f["path"]), sort_keys=True): f["id"] for f in result["findings"]}


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_the_same_item_has_the_same_id_in_every_scan_of_the_target_and_another_customers_differs(
        client, account, make_customer, jobs):
    other = make_customer()
    with freeze_time(START) as frozen:
        first = complete(client, account, jobs, frozen, "+447700900123")
        second = complete(client, account, jobs, frozen, "+44 7700 900123")  # another spelling, the same target
        others = complete(client, other, jobs, frozen, "+447700900123")
        results = [client.get(f"{SCAN}/{scan_id}", headers=who.headers).json["result"]
                   for scan_id, who in ((first, account), (second, account), (others, other))]
    mine, again, theirs = (ids_by_item(result) for result in results)
    assert len(mine) >= 2 and mine == again
    assert set(mine) == set(theirs) and not set(mine.values()) & set(theirs.values())


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_feedback_shows_on_the_finding_in_later_scans_of_the_target(client, account, make_customer, jobs):
    other = make_customer()
    with freeze_time(START) as frozen:
        first_id = complete(client, account, jobs, frozen, "jane@example.com")
        finding = next(f for f in client.get(f"{SCAN}/{first_id}", headers=account.headers).json["result"]["findings"]
                       if f["path"] == "contacts.emails[0]")  # the target's own address
        frozen.tick(60)
        given = feedback(client, account, first_id, finding["id"], verdict="false_positive", note="not her")
        assert given.status_code == 200, given.json
        frozen.tick(60)
        later_id = complete(client, account, jobs, frozen, "Jane@example.com")  # the engine's answer differs
        others_id = complete(client, other, jobs, frozen, "jane@example.com")
        later = client.get(f"{SCAN}/{later_id}", headers=account.headers).json["result"]
        others = client.get(f"{SCAN}/{others_id}", headers=other.headers).json["result"]
    carried = next(f for f in later["findings"] if f["id"] == finding["id"])
    assert carried["feedback"] == {"verdict": "false_positive", "note": "not her",
                                   "at": given.json["finding"]["feedback"]["at"], "scan_id": first_id}
    assert all(f["feedback"] is None for f in later["findings"] if f["id"] != finding["id"])
    assert all(f["feedback"] is None for f in others["findings"])


# --- feedback on a finding --------------------------------------------------------------------

def feedback(client, account, scan_id, finding_id, **body):
    return client.post(f"{SCAN}/{scan_id}/findings/{finding_id}/feedback", json=body, headers=account.headers)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_feedback_shows_on_later_reads_costs_a_credit_and_is_counted_per_source(client, account, jobs):
    from tests.api.helpers import assert_books_balance, balance
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "jane@example.com")
        finding = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]["findings"][0]
        before, counted = balance(account), _feedback_count(finding["source_ids"][0], "false_positive")
        frozen.tick(60)
        answer = feedback(client, account, scan_id, finding["id"], verdict="false_positive", note=" not her ")
        assert answer.status_code == 200, answer.json
        given = answer.json["finding"]["feedback"]
        assert answer.json == {"ok": True, "scan_id": scan_id, "finding": {
            **finding, "confidence": 0.0,  # D29: the customer's word wins
            "feedback": {"verdict": "false_positive", "note": "not her", "at": given["at"], "scan_id": scan_id}}}
        assert ISO.match(given["at"]) and given["at"] > "2026-11-21T12:01:00Z"
        assert balance(account) == before - 1
        read = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]
        assert read["findings"][0]["feedback"]["verdict"] == "false_positive"
        assert read["findings"][1:] == client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"][
            "findings"][1:]
        # Given again: replaced.
        assert feedback(client, account, scan_id, finding["id"], verdict="confirmed").status_code == 200
        read = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]
        assert read["findings"][0]["feedback"]["verdict"] == "confirmed" and read["findings"][0]["feedback"]["note"] == ""
    assert _feedback_count(finding["source_ids"][0], "false_positive") == counted + 1
    assert_books_balance(account)


def _feedback_count(source, verdict):
    from app.plumbing.metrics import FINDING_FEEDBACK
    return FINDING_FEEDBACK.labels(source=source, verdict=verdict)._value.get()


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_feedback_on_an_unknown_finding_or_scan_is_404_and_a_bad_verdict_400(client, account, make_customer, jobs):
    from tests.api.test_auth_and_errors import assert_error
    with freeze_time(START) as frozen:
        scan_id = complete(client, account, jobs, frozen, "jane@example.com")
        finding_id = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json["result"]["findings"][0]["id"]
        assert_error(feedback(client, account, scan_id, "fnd_nope", verdict="confirmed"), 404, "not_found")
        assert_error(feedback(client, account, "scn_nope", finding_id, verdict="confirmed"), 404, "not_found")
        bad = feedback(client, account, scan_id, finding_id, verdict="maybe", note=5)
        assert_error(bad, 400, "invalid_request")
        assert set(bad.json["details"]) == {"verdict", "note"}
        assert_error(feedback(client, make_customer(), scan_id, finding_id, verdict="confirmed"), 403, "forbidden")
        queued = client.post(SCAN, json={"target": "hang.x@example.com"}, headers=account.headers).json["scan_id"]
        assert_error(feedback(client, account, queued, finding_id, verdict="confirmed"), 404, "not_found")


# --- re-run of the failed sources (the re-runs themselves: tests/intake/routes/test_rerun.py) ----

@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_feedback_and_reruns_are_activity_log_entries_naming_the_scan(client, account, jobs):
    from app.activity.models import ActivityEntry
    with freeze_time(START) as frozen:
        first_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        finding_id = client.get(f"{SCAN}/{first_id}", headers=account.headers).json["result"]["findings"][0]["id"]
        assert feedback(client, account, first_id, finding_id, verdict="confirmed").status_code == 200
        rerun_id = rerun(client, account, first_id).json["scan_id"]
    with db.connection_context():
        rows = {r.action: r for r in ActivityEntry.select().where(ActivityEntry.customer_id == account.id)}
    assert rows["finding.feedback"].resource_id == first_id and rows["finding.feedback"].credits == 1
    assert rows["scan.rerun"].resource_id == rerun_id and rows["scan.rerun"].credits == 1
    assert len(rows["scan.rerun"].target_hashes) == 1  # who looked the target up again, as a keyed hash
