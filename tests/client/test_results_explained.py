"""The client's typed view of a result's explanation (sources, coverage, findings, reasons), feedback
and re-runs, against the real API (``served_app``) with the simulator as the engine."""
import pytest
from freezegun import freeze_time
from scan_api_client import Coverage, Finding, FindingNotFound, NotFound, NothingToRerun, Reason, Source
from scan_api_client.models import Breach, Profile, Result

from tests.client.test_client import START, Recorder, make_client


def test_a_partial_result_is_typed_and_rerun_to_completion(served_app, account, jobs):
    with freeze_time(START) as frozen:
        api = make_client(served_app, account, sleep=Recorder(frozen, jobs))
        first = api.wait(api.create("partial.jane@example.com").scan_id)
        result = first.result
        assert isinstance(result.coverage, Coverage) and result.partial is True
        assert all(isinstance(s, Source) for s in result.sources)
        assert result.failed_sources and all(s.failed for s in result.failed_sources)
        assert result.coverage.failed == len(result.failed_sources)
        assert all(isinstance(r, Reason) for r in result.risk.reasons)
        assert sum(r.points for r in result.risk.reasons) == result.risk.score
        for reason in result.risk.reasons:
            assert all(result.finding(i) is not None for i in reason.finding_ids)
        assert all(isinstance(f, Finding) and f.source_ids for f in result.findings)
        assert isinstance(result.item(next(f for f in result.findings if f.path.startswith("breaches"))), Breach) \
            or not result.breaches
        rerun = api.rerun(first)
        assert rerun.rerun_of == first.scan_id and rerun.target == first.target and rerun.status == "queued"
        second = api.wait(rerun)
    assert second.rerun_of == first.scan_id and second.result.partial is False
    # The whole picture: every source (the failed ones answered now), every finding with its id.
    assert [s.id for s in second.result.sources] == [s.id for s in result.sources]
    assert second.result.failed_sources == [] and [f.id for f in second.result.findings] == [
        f.id for f in result.findings]


def test_feedback_comes_back_typed_and_on_later_reads(served_app, account, jobs):
    with freeze_time(START) as frozen:
        api = make_client(served_app, account, sleep=Recorder(frozen, jobs))
        scan = api.wait(api.create("jane@example.com").scan_id)
        finding = scan.result.findings[0]
        given = api.feedback(scan.scan_id, finding.id, "false_positive", note="another Jane")
        assert given.id == finding.id and given.feedback.verdict == "false_positive"
        assert given.feedback.scan_id == scan.scan_id
        assert api.get(scan.scan_id).result.finding(finding.id).feedback.note == "another Jane"
        with pytest.raises(ValueError):
            api.feedback(scan.scan_id, finding.id, "maybe")
        with pytest.raises(NothingToRerun) as refused:
            api.rerun(scan.scan_id)
    assert refused.value.status == 409 and refused.value.code == "nothing_to_rerun"


def test_a_result_without_an_explanation_reads_as_nothing_checked():
    result = Result.from_dict({"risk": {"score": 10, "band": "low"}, "profiles": {"verified": [
        {"platform": "github"}], "weak": []}})
    assert result.sources == [] and result.findings == [] and result.partial is False
    assert result.coverage == Coverage(checked=0, found=0, failed=0, ratio=1.0) and result.risk.reasons == []
    assert isinstance(result.item(Finding(path="profiles.verified[0]")), Profile)


def test_feedback_on_an_unknown_finding_says_which(served_app, account, jobs):
    with freeze_time(START) as frozen:
        api = make_client(served_app, account, sleep=Recorder(frozen, jobs))
        scan = api.wait(api.create("jane.doe@example.com").scan_id)
        with pytest.raises(FindingNotFound) as caught:
            api.feedback(scan.scan_id, "fnd_unknown_one", "confirmed")
    error = caught.value
    assert isinstance(error, NotFound) and (error.status, error.code) == (404, "not_found")
    assert (error.finding_id, error.scan_id) == ("fnd_unknown_one", scan.scan_id)
    assert "fnd_unknown_one" in str(error) and scan.scan_id in error.message and error.request_id


# --- confidence, min_confidence and required -----------------------------------------------

def test_findings_have_a_confidence_and_a_minimum_and_a_rule_go_with_creations_and_reads(served_app, account, jobs):
    from scan_api_client.models import Filtered
    with freeze_time(START) as frozen:
        api = make_client(served_app, account, sleep=Recorder(frozen, jobs))
        scan = api.wait(api.create("jane@example.com", min_confidence=0.5, required="breaches OR profiles").scan_id)
        every = api.get(scan.scan_id, min_confidence=0)
        missed = api.wait(api.create("john@example.com", required="phone_profile").scan_id)
        batch = api.bulk(["ann@example.com"], min_confidence=0.9, required="breaches")
        with pytest.raises(ValueError):
            api.get(scan.scan_id, min_confidence=2)
    assert (scan.min_confidence, scan.required) == (0.5, "breaches OR profiles")
    assert isinstance(scan.result.filtered, Filtered) and scan.result.filtered.min_confidence == 0.5
    assert all(f.confidence >= 0.5 and f.matched_on for f in scan.result.findings) and scan.result.match is True
    assert every.result.filtered.findings_left_out == 0 and len(every.result.findings) > len(scan.result.findings)
    assert missed.result.match is False and missed.result.findings == [] and missed.result.sources
    read = api.get_bulk(batch.bulk_id, min_confidence=0.95)
    assert read.scans[0].min_confidence == 0.9 and read.scans[0].required == "breaches"


def test_a_bad_rule_is_a_validation_error_naming_the_position(served_app, account):
    from scan_api_client import ValidationError
    api = make_client(served_app, account)
    with pytest.raises(ValidationError) as refused:
        api.create("jane@example.com", required="breaches AND")
    assert refused.value.code == "invalid_required" and "at position 13" in refused.value.message
