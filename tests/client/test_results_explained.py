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
