"""A finding's confidence (D29): one rule (feedback, else the engine's estimate, else a base per kind
raised per further source), and what a ``min_confidence`` leaves out of a result when it is shown."""
import json

import pytest

from app.scans import confidence
from app.scans.results import merge_rerun, normalize_result


@pytest.mark.parametrize("name, engine, sources, feedback, expected", [
    ("profiles.verified", None, 1, None, 0.90),
    ("profiles.weak", None, 1, None, 0.40),
    ("contacts.emails", None, 0, None, 0.70),
    ("contacts.phones", None, 3, None, 0.80),   # two further sources
    ("breaches", None, 2, None, 0.99),          # 0.95 + 0.05, at most 0.99
    ("breaches", None, 9, None, 0.99),
    ("profiles.weak", 0.123, 5, None, 0.12),    # the engine's own wins over the base, two decimals
    ("profiles.verified", 0.97, 1, {"verdict": "false_positive"}, 0.0),  # the customer's word wins
    ("profiles.weak", 0.1, 1, {"verdict": "confirmed"}, 1.0),
])
def test_one_rule_makes_the_confidence(name, engine, sources, feedback, expected):
    assert confidence.confidence_of(name, engine=engine, sources=sources, feedback=feedback) == expected


RAW = {"risk": {"score": 40, "reasons": [
           {"code": "breaches", "points": 20, "paths": ["breaches[0]", "breaches[1]"]},
           {"code": "weak", "points": 12, "paths": ["profiles.weak[0]"]},
           {"code": "other", "points": 8, "paths": []}]},
       "profiles": {"weak": [{"platform": "x", "handle": "a"}, {"platform": "y", "handle": "b"}]},
       "contacts": {"emails": ["a@example.com"]},
       "breaches": [{"name": "One", "date": "2019-03"}, {"name": "Two", "date": "2020-01"}],
       "sources": [{"id": "s1", "status": "found"}, {"id": "s2", "status": "found"}],
       "evidence": [{"path": "profiles.weak[0]", "source_ids": ["s1"], "confidence": 0.2, "matched_on": ["name", "x"]},
                    {"path": "profiles.weak[1]", "source_ids": ["s1", "s2"], "matched_on": "name"},
                    {"path": "contacts.emails[0]", "source_ids": ["s2"], "confidence": True},
                    {"path": "breaches[0]", "source_ids": ["s1"], "confidence": 0.3},
                    {"path": "breaches[1]", "source_ids": ["s1", "s2"], "confidence": 1.7}]}


def test_findings_carry_the_engines_estimate_and_what_it_matched_on():
    result = normalize_result(RAW, "email")
    found = {f["path"]: (f["confidence"], f["matched_on"]) for f in result["findings"]}
    assert found == {"profiles.weak[0]": (0.2, ["name"]),     # an unknown word dropped
                     "profiles.weak[1]": (0.45, []),          # no estimate: 0.40 + one further source
                     "contacts.emails[0]": (0.7, []),         # a boolean is no estimate
                     "breaches[0]": (0.3, []),
                     "breaches[1]": (1.0, [])}                # clamped to 1
    assert list(result["findings"][0]) == ["id", "path", "source_ids", "confidence", "matched_on", "feedback"]


def test_a_minimum_leaves_out_findings_items_and_reasons_and_sums_the_score_again():
    result = normalize_result(RAW, "email")
    stored = json.dumps(result)
    shown = confidence.filtered(result, 0.5)
    assert json.dumps(result) == stored  # the stored result is never changed
    assert shown["filtered"] == {"min_confidence": 0.5, "findings_left_out": 3}
    # Left out: both weak profiles (0.2; 0.45 by the rule) and the first breach (0.3); the second
    # breach moves to the first place, and its finding's path with it.
    assert [f["path"] for f in shown["findings"]] == ["contacts.emails[0]", "breaches[0]"]
    assert shown["findings"][1]["id"] == result["findings"][4]["id"]
    assert shown["profiles"]["weak"] == [] and shown["breaches"] == [result["breaches"][1]]
    ids = {f["id"] for f in shown["findings"]}
    # "weak" rested only on a finding left out: dropped; "breaches" keeps the one kept; "other" names none.
    assert [(r["code"], r["points"]) for r in shown["risk"]["reasons"]] == [("breaches", 20), ("other", 8)]
    assert all(set(r["finding_ids"]) <= ids for r in shown["risk"]["reasons"])
    assert shown["risk"]["score"] == 28 and shown["risk"]["band"] == "medium"


def test_a_score_without_reasons_stands_and_no_minimum_leaves_all():
    raw = {**RAW, "risk": {"score": 60}}
    result = normalize_result(raw, "email")
    shown = confidence.filtered(result, 0.99)
    assert shown["risk"] == {"score": 60, "band": "high", "reasons": []}
    assert [f["id"] for f in shown["findings"]] == [f["id"] for f in result["findings"] if f["confidence"] >= 0.99]
    assert confidence.filtered(result, None) is result and "filtered" not in result
    assert confidence.filtered(result, 0)["filtered"] == {"min_confidence": 0, "findings_left_out": 0}


def test_feedback_on_a_finding_sets_its_confidence():
    finding = {"path": "breaches[0]", "confidence": 0.97, "feedback": {"verdict": "false_positive"}}
    assert confidence.with_feedback(finding)["confidence"] == 0.0
    finding["feedback"] = {"verdict": "confirmed"}
    assert confidence.with_feedback(finding)["confidence"] == 1.0


def test_a_stored_result_from_before_confidences_counts_by_the_rule():
    result = normalize_result(RAW, "email")
    for finding in result["findings"]:
        del finding["confidence"]
    # breaches[1]: two sources, no estimate now: 0.99; weak[0]: 0.40 with one source, weak[1] 0.45.
    assert confidence.below(result, 0.5) == {"profiles.weak[0]", "profiles.weak[1]"}


def test_a_rerun_keeps_the_higher_confidence_and_the_feedback():
    original = normalize_result(RAW, "email", scan_id="scn_1")
    original["findings"][0]["feedback"] = {"verdict": "confirmed", "note": "", "at": None, "scan_id": "scn_1"}
    original["findings"][0]["confidence"] = 1.0
    later = normalize_result({**RAW, "evidence": [{"path": "breaches[0]", "source_ids": ["s2"], "confidence": 0.8},
                                                  {"path": "profiles.weak[0]", "source_ids": ["s2"],
                                                   "confidence": 0.05}]}, "email", scan_id="scn_2")
    merged = merge_rerun(original, later, "scn_1")
    by_path = {f["path"]: f for f in merged["findings"]}
    assert by_path["breaches[0]"]["confidence"] == 0.99  # two sources now: the rule's 0.99 over 0.3 and 0.8
    assert by_path["profiles.weak[0]"]["confidence"] == 1.0  # the customer's word still wins


@pytest.mark.parametrize("value, expected", [(None, None), (0, 0.0), (1, 1.0), ("0.25", 0.25), (" 1 ", 1.0),
                                             ("1.984976690197388e-217", 1.984976690197388e-217)])
def test_a_minimum_as_given(value, expected):
    assert confidence.check_minimum(value) == expected


@pytest.mark.parametrize("value", [-0.1, 1.01, "", "abc", "nan", "inf", True, [0.5], "1e400"])
def test_a_minimum_that_is_not_one_is_refused_naming_it(value):
    with pytest.raises(ValueError, match="min_confidence must be a number from 0 to 1"):
        confidence.check_minimum(value)
