"""``required`` (D29): the match rule parsed by a small parser (never evaluated as code), decided on a
completed scan at its ``min_confidence``, and what a scan that does not match keeps of its result. Its
refund is billing's (``tests/billing/test_refunds.py``)."""
import pytest

from app.plumbing.errors import InvalidRequired
from app.scans import required
from app.scans.results import normalize_result


@pytest.mark.parametrize("text, tree", [
    ("breaches", ("word", "breaches")),
    ("  profiles.verified OR breaches ", ("or", [("word", "profiles.verified"), ("word", "breaches")])),
    ("emails AND phones OR breaches",  # AND binds tighter
     ("or", [("and", [("word", "emails"), ("word", "phones")]), ("word", "breaches")])),
    ("emails and (phones or phone_profile)",
     ("and", [("word", "emails"), ("or", [("word", "phones"), ("word", "phone_profile")])])),
    ("((profiles))", ("word", "profiles")),
])
def test_rules_parse_into_a_tree(text, tree):
    assert required.parse(text) == tree


@pytest.mark.parametrize("text, position, words", [
    ("profile", 1, "unknown word 'profile'"),
    ("breaches OR", 12, "a word or '(' is missing"),
    ("breaches AND AND emails", 14, "not 'AND'"),
    ("(breaches", 10, "')' is missing"),
    ("breaches)", 9, "')' was not expected"),
    ("breaches emails", 10, "'emails' was not expected"),
    ("__import__('os')", 1, "unknown word"),
    ("breaches; emails", 9, "unexpected character ';'"),
    ("   ", 1, "the rule is empty"),
    ("(" * 21 + "breaches" + ")" * 21, 21, "more than 20 parentheses"),
])
def test_a_rule_that_does_not_parse_names_the_position(text, position, words):
    with pytest.raises(InvalidRequired) as refused:
        required.parse(text)
    assert refused.value.code == "invalid_required"
    assert f"at position {position}" in refused.value.message and words in refused.value.message
    assert refused.value.details == {"required": [refused.value.message]}


def test_not_a_string_or_too_long_is_refused():
    with pytest.raises(InvalidRequired):
        required.parse(["breaches"])
    with pytest.raises(InvalidRequired, match="longer than 500"):
        required.parse("breaches OR " * 50)
    assert required.check(None) is None and required.check(" breaches ") == "breaches"


def _result(**evidence_confidence):
    raw = {"risk": {"score": 30, "reasons": [{"code": "breaches", "points": 20, "paths": ["breaches[0]"]},
                                             {"code": "weak", "points": 10, "paths": ["profiles.weak[0]"]}]},
           "profiles": {"weak": [{"platform": "x", "handle": "jd"}]},
           "breaches": [{"name": "ShopHub", "date": "2019-03"}],
           "sources": [{"id": "s1", "status": "found"}],
           "evidence": [{"path": path.replace("_", ".", 1).replace("0", "[0]"), "source_ids": ["s1"],
                         "confidence": value} for path, value in evidence_confidence.items()]}
    return normalize_result(raw, "email")


def test_a_rule_is_decided_at_the_scans_min_confidence():
    result = _result(profiles_weak0=0.3, breaches0=0.96)
    assert required.matches("breaches AND profiles", result, None)
    assert not required.matches("breaches AND profiles", result, 0.5)  # the weak profile is under it
    assert required.matches("breaches OR profiles.verified", result, 0.5)
    assert not required.matches("emails OR phones OR phone_profile", result, None)
    assert required.matches(None, result, 0.99)


def test_a_scan_that_does_not_match_keeps_only_sources_coverage_and_reason_codes():
    result = _result(profiles_weak0=0.3, breaches0=0.96)
    kept = required.unmatched(result)
    assert kept["match"] is False and kept["findings"] == [] and kept["breaches"] == []
    assert kept["profiles"] == {"verified": [], "weak": []} and kept["sources"] == result["sources"]
    assert kept["coverage"] == result["coverage"]
    assert [r["code"] for r in kept["risk"]["reasons"]] == ["breaches", "weak"]
    assert kept["risk"]["score"] == sum(r["points"] for r in kept["risk"]["reasons"]) == 0
    assert list(kept) == list(result)  # every field of a result, in its order
