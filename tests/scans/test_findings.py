"""Feedback on findings (D23): validated, kept as history and in the stored result, per owner and mode."""
import json

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.plumbing.errors import Forbidden, InvalidRequest, NotFound
from app.plumbing.models import new_id, utcnow
from app.scans import findings
from app.scans.models import FindingFeedback, Scan
from app.scans.results import normalize_result
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
    assert email["confidence"] == 0.75  # an e-mail address found by two sources (D29)
    assert given["finding"] == {**email, "confidence": 0.0,  # the customer's word wins
                                "feedback": {"verdict": "false_positive", "note": "other",
                                             "at": "2026-11-21T12:00:00Z", "scan_id": row.id}}
    stored = json.loads(Scan.get_by_id(row.id).result_json)
    assert stored["findings"][0] == given["finding"] and stored["findings"][1] == result["findings"][1]
    assert {k: v for k, v in stored.items() if k != "findings"} == {k: v for k, v in result.items() if k != "findings"}
    findings.give_feedback(account.id, row.id, email["id"], verdict="confirmed")
    history = findings.history(account.id, row.id)
    assert [(h["verdict"], h["source_ids"]) for h in history] == [("false_positive", ["gravatar", "breach_index"]),
                                                                  ("confirmed", ["gravatar", "breach_index"])]
    assert json.loads(Scan.get_by_id(row.id).result_json)["findings"][0]["feedback"]["verdict"] == "confirmed"
    assert json.loads(Scan.get_by_id(row.id).result_json)["findings"][0]["confidence"] == 1.0


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
    from app.plumbing.metrics import FINDING_FEEDBACK, count_feedback

    def value(source, verdict="false_positive"):
        return FINDING_FEEDBACK.labels(source=source, verdict=verdict)._value.get()

    account, row, result = scan
    before = {s: value(s) for s in ("gravatar", "breach_index", "none", "other")}
    findings.give_feedback(account.id, row.id, result["findings"][0]["id"], verdict="false_positive")
    count_feedback([], "false_positive")
    count_feedback(["Jane Doe <a@example.com>"], "false_positive")
    assert {s: value(s) - before[s] for s in before} == {"gravatar": 1, "breach_index": 1, "none": 1, "other": 1}


def test_an_erased_scan_loses_its_feedback_and_takes_no_more(scan):
    from app.privacy import erasure
    account, row, result = scan
    finding_id = result["findings"][0]["id"]
    findings.give_feedback(account.id, row.id, finding_id, verdict="false_positive", note="not her")
    erasure.erase_scan(customer_id=account.id, scan_id=row.id, livemode=True)
    assert FindingFeedback.select().count() == 0
    with pytest.raises(NotFound):
        findings.give_feedback(account.id, row.id, finding_id, verdict="confirmed")


# --- D26: feedback follows the finding to later scans of the target ---------------------------

def complete_scan(cust, key, target="a@example.com"):
    """A scan admitted through the service and completed with ``RAW``, as a look would complete it."""
    from app.scans.results import Owner
    from app.tracking import states
    from tests.domain_fixtures import new_scan
    scan = new_scan(cust, key, target=target)
    states.complete(scan.id, normalize_result(RAW, "email", scan_id=scan.id,
                                                owner=Owner(cust.id, "email", scan.target)))
    return Scan.get_by_id(scan.id)


def feedback_by_id(scan_id):
    return {f["id"]: f["feedback"] for f in json.loads(Scan.get_by_id(scan_id).result_json)["findings"]}


def test_feedback_shows_on_the_finding_in_later_scans_of_the_target_with_its_scan(app):
    from tests.domain_fixtures import new_customer
    with db.connection_context(), freeze_time("2026-11-21 12:00:00") as frozen:
        cust, key = new_customer(credits=100)
        first = complete_scan(cust, key)
        email_id = json.loads(first.result_json)["findings"][0]["id"]
        frozen.tick(60)
        between = complete_scan(cust, key, target="A@example.com")  # completed before the feedback
        frozen.tick(60)
        findings.give_feedback(cust.id, first.id, email_id, verdict="false_positive", note="not her")
        frozen.tick(60)
        later = complete_scan(cust, key)
        other_customer, other_key = new_customer(credits=100)
        others = complete_scan(other_customer, other_key)
        given = {"verdict": "false_positive", "note": "not her", "at": "2026-11-21T12:02:00Z", "scan_id": first.id}
        assert feedback_by_id(first.id)[email_id] == given
        assert feedback_by_id(between.id)[email_id] == given  # the same finding, the same id
        assert feedback_by_id(later.id)[email_id] == given
        assert [v for k, v in feedback_by_id(later.id).items() if k != email_id] == [None]  # the breach has none
        assert email_id not in feedback_by_id(others.id)  # another customer's ids differ
        assert all(v is None for v in feedback_by_id(others.id).values())
        # Newer feedback on the later scan wins there, and leaves the first scan's as it was.
        frozen.tick(60)
        findings.give_feedback(cust.id, later.id, email_id, verdict="confirmed")
        assert feedback_by_id(later.id)[email_id]["scan_id"] == later.id
        assert feedback_by_id(first.id)[email_id] == given
        frozen.tick(60)
        newest = complete_scan(cust, key)
        assert feedback_by_id(newest.id)[email_id] == {"verdict": "confirmed", "note": "", "at": "2026-11-21T12:04:00Z",
                                                       "scan_id": later.id}


def test_feedback_does_not_cross_modes(app):
    from app.accounts import admin
    from app.accounts.models import Customer
    from tests.domain_fixtures import new_customer
    with db.connection_context():
        cust, key = new_customer(credits=100)
        test_key, _ = admin.issue_key(cust.id, "t", livemode=False)
        first = complete_scan(cust, key)
        email_id = json.loads(first.result_json)["findings"][0]["id"]
        findings.give_feedback(cust.id, first.id, email_id, verdict="confirmed")
        sandboxed = complete_scan(Customer.get_by_id(cust.id), test_key)
        assert email_id in feedback_by_id(sandboxed.id)  # the same finding (ids follow customer and target)...
        assert feedback_by_id(sandboxed.id)[email_id] is None  # ...but feedback stays in its mode
