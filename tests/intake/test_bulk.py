"""bulk: a bulk call refused whole (no targets, too many, wrong tier) or split target by target (D7)."""
import pytest

from app.intake import bulk
from app.plumbing.errors import Forbidden, InvalidRequest


@pytest.mark.parametrize("tier, targets, error, code", [
    ("business", [], InvalidRequest, "no_targets"),
    ("business", [{"target": "a@example.com"}] * 101, InvalidRequest, "too_many_targets"),
    ("pro", [{"target": "a@example.com"}], Forbidden, "bulk_not_allowed"),
    ("pro", [], InvalidRequest, "no_targets"),  # the call's shape is checked before the tier
])
def test_a_bad_call_is_refused_whole(tier, targets, error, code):
    with pytest.raises(error) as refused:
        bulk.check_call(tier, targets)
    assert refused.value.code == code


@pytest.mark.parametrize("tier", ["business", "enterprise"])
def test_up_to_100_targets_pass_on_bulk_tiers(tier):
    bulk.check_call(tier, [{"target": "a@example.com"}] * 100)  # no exception


def test_targets_are_split_into_accepted_and_rejected_keeping_their_index():
    accepted, rejected = bulk.split_targets([
        {"target": " Jane@Example.COM "},
        "not an object",
        {"target": 42},
        {"target": "ab"},
        {"target": "+44 7700 900123", "kind": "phone"},
        {"target": "abcd", "kind": "fax"},
        {"target": "abcd", "kind": 3},
    ])
    assert accepted == [(0, ("email", "Jane@example.com")), (4, ("phone", "+447700900123"))]
    assert [(r["index"], r["error"]) for r in rejected] == [
        (1, "invalid_request"), (2, "invalid_request"), (3, "target_too_short"), (5, "invalid_kind"),
        (6, "invalid_request")]
    assert rejected[0]["target"] is None and rejected[0]["kind"] is None
    assert rejected[1]["target"] is None  # a non-string target is not echoed
    assert rejected[3] == {"index": 5, "target": "abcd", "kind": "fax", "error": "invalid_kind",
                           "message": rejected[3]["message"]}
    assert rejected[3]["message"]


def test_an_empty_list_splits_into_nothing():
    assert bulk.split_targets([]) == ([], [])
