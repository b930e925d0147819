"""Feedback on findings (D23): validated, kept as history and in the stored result, per owner and mode."""
import json

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.models import FindingFeedback, Scan, new_id, utcnow
from app.services import findings
from app.services.errors import Forbidden, InvalidRequest, NotFound
from app.services.results import normalize_result
from tests import factories

RAW = {"risk": {"score": 12, "reasons": [{"code": "breaches", "points": 12, "paths": ["breaches[0]"]}]},
       "breaches": [{"name": "ShopHub", "date": "2019-03"}], "contacts": {"emails": ["a@example.com"]},
       "sources": [{"id": "breach_index", "status": "found"}, {"id": "gravatar", "status": "found"}],
       "evidence": [{"path": "breaches[0]", "source_ids": ["breach_index"]},
                    {"path": "contacts.emails[0]", "source_ids": ["gravatar", "breach_index"]}]}


@pytest.fixture
def scan(app):
    with db.connection_context():
        account = factories.customer()
        scan_id = new_id("scn")
        result = normalize_result(RAW, "email", scan_id=scan_id)
        Scan.create(id=scan_id, customer=account.id, api_key=account.key.id, kind="email", target="a@example.com",
                    status="completed", created_at=utcnow(), completed_at=utcnow(),
                    result_json=json.dumps(result, separators=(",", ":")))
        yield account, Scan.get_by_id(scan_id), result


def test_feedback_is_written_into_the_stored_result_and_kept_as_history(scan):
    account, row, result = scan
    email = result["findings"][0]
    with freeze_time("2026-11-21 12:00:00"):
        given = findings.give_feedback(account.id, row.id, email["id"], verdict="false_positive", note="  other  ")
    assert given["finding"] == {**email, "feedback": {"verdict": "false_positive", "note": "other",
                                                      "at": "2026-11-21T12:00:00Z", "scan_id": row.id}}
    stored = json.loads(Scan.get_by_id(row.id).result_json)
    assert stored["findings"][0] == given["finding"] and stored["findings"][1] == result["findings"][1]
    assert {k: v for k, v in stored.items() if k != "findings"} == {k: v for k, v in result.items() if k != "findings"}
    findings.give_feedback(account.id, row.id, email["id"], verdict="confirmed")
    history = findings.history(account.id, row.id)
    assert [(h["verdict"], h["source_ids"]) for h in history] == [("false_positive", ["gravatar", "breach_index"]),
                                                                  ("confirmed", ["gravatar", "breach_index"])]
    assert json.loads(Scan.get_by_id(row.id).result_json)["findings"][0]["feedback"]["verdict"] == "confirmed"


@pytest.mark.parametrize("verdict,note,fields", [("maybe", None, {"verdict"}), (None, "x", {"verdict"}),
                                                 ("confirmed", 7, {"note"}), ("confirmed", "x" * 1001, {"note"}),
                                                 ("wrong", "a\x00b", {"verdict", "note"})])
def test_a_bad_verdict_or_note_is_refused_with_details(scan, verdict, note, fields):
    account, row, result = scan
    with pytest.raises(InvalidRequest) as refused:
        findings.give_feedback(account.id, row.id, result["findings"][0]["id"], verdict=verdict, note=note)
    assert set(refused.value.details) == fields
    assert FindingFeedback.select().count() == 0


def test_unknown_findings_other_customers_and_other_modes(scan):
    account, row, result = scan
    finding_id = result["findings"][0]["id"]
    with pytest.raises(NotFound):
        findings.give_feedback(account.id, row.id, "fnd_nope", verdict="confirmed")
    with pytest.raises(NotFound):
        findings.give_feedback(account.id, "scn_nope", finding_id, verdict="confirmed")
    with pytest.raises(NotFound):  # a live scan read with a test key's mode
        findings.give_feedback(account.id, row.id, finding_id, verdict="confirmed", livemode=False)
    other = factories.customer()
    with pytest.raises(Forbidden):
        findings.give_feedback(other.id, row.id, finding_id, verdict="confirmed")
    assert FindingFeedback.select().count() == 0
    # The portal (either mode) may.
    assert findings.give_feedback(account.id, row.id, finding_id, verdict="confirmed", livemode=None)["ok"]


def test_a_scan_without_a_result_has_no_findings(scan):
    account, row, result = scan
    Scan.update(status="failed", result_json=None).where(Scan.id == row.id).execute()
    with pytest.raises(NotFound):
        findings.give_feedback(account.id, row.id, result["findings"][0]["id"], verdict="confirmed")


def test_the_metrics_count_per_source_and_never_carry_other_text(scan):
    from app.metrics import FINDING_FEEDBACK, count_feedback

    def value(source, verdict="false_positive"):
        return FINDING_FEEDBACK.labels(source=source, verdict=verdict)._value.get()

    account, row, result = scan
    before = {s: value(s) for s in ("gravatar", "breach_index", "none", "other")}
    findings.give_feedback(account.id, row.id, result["findings"][0]["id"], verdict="false_positive")
    count_feedback([], "false_positive")
    count_feedback(["Jane Doe <a@example.com>"], "false_positive")
    assert {s: value(s) - before[s] for s in before} == {"gravatar": 1, "breach_index": 1, "none": 1, "other": 1}


def test_an_erased_scan_loses_its_feedback_and_takes_no_more(scan):
    from app.services import erasure
    account, row, result = scan
    finding_id = result["findings"][0]["id"]
    findings.give_feedback(account.id, row.id, finding_id, verdict="false_positive", note="not her")
    erasure.erase_scan(customer_id=account.id, scan_id=row.id, livemode=True)
    assert FindingFeedback.select().count() == 0
    with pytest.raises(NotFound):
        findings.give_feedback(account.id, row.id, finding_id, verdict="confirmed")
