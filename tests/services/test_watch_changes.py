"""What a watch's completed scan changed (D28): findings compared by their stable ids (D26) and the
risk band; the events themselves are tested end to end in tests/api/test_watch_changes.py."""
from app.services.watch_changes import changes_between


def result(finding_ids, score, band):
    return {"risk": {"score": score, "band": band, "reasons": []},
            "findings": [{"id": fid, "path": f"breaches[{i}]"} for i, fid in enumerate(finding_ids)]}


def test_a_finding_added_or_removed_is_a_change():
    changes = changes_between(result(["fnd_a", "fnd_b"], 30, "medium"), result(["fnd_b", "fnd_c"], 30, "medium"))
    assert changes == {"added": ["fnd_c"], "removed": ["fnd_a"],
                       "risk": {"from": {"score": 30, "band": "medium"}, "to": {"score": 30, "band": "medium"}}}


def test_a_band_that_moved_is_a_change_and_a_score_within_it_is_not():
    assert changes_between(result(["fnd_a"], 30, "medium"), result(["fnd_a"], 40, "medium")) is None
    moved = changes_between(result(["fnd_a"], 40, "medium"), result(["fnd_a"], 60, "high"))
    assert moved is not None and (moved["added"], moved["removed"]) == ([], [])
    assert moved["risk"]["to"] == {"score": 60, "band": "high"}


def test_the_same_findings_in_another_order_are_no_change():
    assert changes_between(result(["fnd_a", "fnd_b"], 10, "low"), result(["fnd_b", "fnd_a"], 10, "low")) is None
