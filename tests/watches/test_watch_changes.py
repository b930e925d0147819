"""What a watch's completed scan changed (D28): findings compared by their stable ids (D26) and the
risk band; the events themselves are tested end to end in tests/watches/routes/test_watch_changes.py."""
from app.watches.watch_changes import changes_between


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


def test_since_previous_says_what_a_watch_scan_changed_or_why_nothing_is_compared(client, account):
    import json

    from app.extensions import db
    from app.scans.models import Scan
    from app.tracking import states
    from app.watches.watch_changes import since_previous

    watch = client.post("/api/v1/watches", headers=account.headers,
                        json={"target": "jane.doe@example.com", "interval": "weekly"}).json
    baseline = watch["last_scan_id"]
    again = client.post(f"/api/v1/watches/{watch['watch_id']}/run", headers=account.headers).json["scan_id"]
    plain = client.post("/api/v1/scan", headers=account.headers, json={"target": "x@example.com"}).json["scan_id"]
    with db.connection_context():
        assert since_previous(account.id, plain) is None  # not a watch scan
        assert since_previous("cus_other", baseline) is None  # another customer's: nothing said
        assert since_previous(account.id, again)["state"] == "pending"
        first = result(["fnd_a", "fnd_b"], 30, "medium")
        assert states.complete(baseline, first)
        assert since_previous(account.id, baseline)["state"] == "baseline"
        assert states.complete(again, result(["fnd_b", "fnd_c"], 60, "high"))
        found = since_previous(account.id, again)
        assert (found["state"], found["watch_id"], found["previous_scan_id"]) == ("changed", watch["watch_id"],
                                                                                   baseline)
        assert found["changes"]["added"] == ["fnd_c"] and found["changes"]["removed"] == ["fnd_a"]
        assert found["previous_result"] == json.loads(Scan.get_by_id(baseline).result_json)
        Scan.update(result_json=None).where(Scan.id == baseline).execute()
        assert since_previous(account.id, again)["state"] == "erased"


def test_a_watch_compares_its_scans_as_shown_at_their_own_minimum():
    """D29: a finding under the scan's min_confidence neither comes nor goes."""
    from app.scans.models import Scan
    from app.scans.results import normalize_result
    from app.watches import watch_changes

    raw = {"breaches": [{"name": "One", "date": "2019-03"}], "profiles": {"weak": [{"platform": "x", "handle": "a"}]},
           "sources": [{"id": "s1", "status": "found"}],
           "evidence": [{"path": "profiles.weak[0]", "source_ids": ["s1"], "confidence": 0.2},
                        {"path": "breaches[0]", "source_ids": ["s1"], "confidence": 0.97}]}
    before = normalize_result({**raw, "profiles": {"weak": []}, "evidence": raw["evidence"][1:]}, "email",
                              scan_id="scn_w")
    after = normalize_result(raw, "email", scan_id="scn_w")
    as_json = __import__("json").dumps
    previous = Scan(result_json=as_json(before), min_confidence=0.5)
    current = Scan(result_json=as_json(after), min_confidence=0.5)
    assert watch_changes.changes_between(watch_changes.shown(previous), watch_changes.shown(current)) is None
    current.min_confidence = None
    assert watch_changes.changes_between(watch_changes.shown(previous), watch_changes.shown(current))["added"]
