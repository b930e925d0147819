"""Re-runs (D23/E6): a partial scan asked again on its failed sources, as a new scan charged and limited
as a creation, replayed under its idempotency key, free on the sandbox."""
import pytest
from freezegun import freeze_time

from app.extensions import db
from app.scans.models import Scan
from tests.api.helpers import complete, rerun, status_of

SCAN = "/api/v1/scan"
START = "2026-11-21 12:00:00"
FAILED = ("rate_limited", "timeout")


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_partial_scan_is_rerun_on_its_failed_sources_charged_as_a_creation(client, account, jobs):
    from tests.api.helpers import assert_books_balance, balance, ledger
    with freeze_time(START) as frozen:
        first_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        first = client.get(f"{SCAN}/{first_id}", headers=account.headers).json
        failed = [s["id"] for s in first["result"]["sources"] if s["status"] in FAILED]
        before = balance(account)
        answer = rerun(client, account, first_id)
        assert answer.status_code == 202, answer.json
        body = answer.json
        assert body["rerun_of"] == first_id and body["scan_id"] != first_id and body["kind"] == "email"
        assert body["poll_url"].endswith(f"/api/v1/scan/{body['scan_id']}")
        assert list(body) == ["ok", "scan_id", "livemode", "kind", "recipes_to_run", "eta_seconds", "rerun_of",
                              "poll_url"]
        assert "RateLimit" in answer.headers and int(answer.headers["X-Credits-Remaining"]) == before - 1
        assert ledger(account)[-1] == (-1, "scan")
        assert jobs.run(frozen, until=lambda: status_of(body["scan_id"]) == "completed")
        second = client.get(f"{SCAN}/{body['scan_id']}", headers=account.headers).json
    assert second["rerun_of"] == first_id and second["target"] == first["target"]
    # The whole picture: every source, the re-asked ones with their new answers, and every item.
    assert [s["id"] for s in second["result"]["sources"]] == [s["id"] for s in first["result"]["sources"]]
    reasked = {s["id"]: s["status"] for s in second["result"]["sources"] if s["id"] in failed}
    assert len(reasked) == len(failed) and not set(reasked.values()) & set(FAILED)
    assert second["result"]["partial"] is False
    assert second["result"]["coverage"] == {**first["result"]["coverage"], "failed": 0, "ratio": 1.0,
                                            "found": second["result"]["coverage"]["found"]}
    for name in ("profiles", "contacts", "breaches"):
        assert second["result"][name] == first["result"][name]
    # Each finding keeps its id and lists every source that found it, in either scan.
    assert [f["id"] for f in second["result"]["findings"]] == [f["id"] for f in first["result"]["findings"]]
    for before, after in zip(first["result"]["findings"], second["result"]["findings"], strict=True):
        assert after["source_ids"][:len(before["source_ids"])] == before["source_ids"]
    assert "rerun_of" not in first
    assert_books_balance(account)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_nothing_to_rerun_is_409_and_free(client, account, jobs):
    from tests.api.helpers import balance
    from tests.api.test_auth_and_errors import assert_error
    with freeze_time(START) as frozen:
        whole_id = complete(client, account, jobs, frozen, "jane@example.com")
        queued = client.post(SCAN, json={"target": "hang.x@example.com"}, headers=account.headers).json["scan_id"]
        before = balance(account)
        assert_error(rerun(client, account, whole_id), 409, "nothing_to_rerun")
        assert_error(rerun(client, account, queued), 409, "nothing_to_rerun")
        assert balance(account) == before
        assert_error(rerun(client, account, "scn_nope"), 404, "not_found")


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_rerun_is_limited_like_a_creation(client, make_customer, jobs):
    from tests.api.test_auth_and_errors import assert_error
    account = make_customer(inflight=1)
    with freeze_time(START) as frozen:
        first_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        client.post(SCAN, json={"target": "hang.x@example.com"}, headers=account.headers)
        answer = rerun(client, account, first_id)
        assert_error(answer, 429, "rate_limit_inflight")
        assert "Retry-After" in answer.headers


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_rerun_replays_under_its_idempotency_key(client, account, jobs):
    from tests.api.helpers import balance
    with freeze_time(START) as frozen:
        first_id = complete(client, account, jobs, frozen, "partial.jane@example.com")
        before = balance(account)
        once = rerun(client, account, first_id, **{"Idempotency-Key": "rerun-1"})
        again = rerun(client, account, first_id, **{"Idempotency-Key": "rerun-1"})
    assert once.status_code == again.status_code == 202
    assert again.headers.get("Idempotent-Replayed") == "true" and again.json == once.json
    assert balance(account) == before - 1
    with db.connection_context():
        assert Scan.select().where(Scan.rerun_of == first_id).count() == 1


@pytest.mark.config(SANDBOX_SCAN_SECONDS=0.5, ENGINE_POLL_SECONDS=1)
def test_a_test_key_reruns_on_the_sandbox_free(client, account, jobs):
    from tests import factories
    from tests.api.helpers import balance
    with db.connection_context():
        test = factories.sandbox_key(account)
    with freeze_time(START) as frozen:
        first_id = complete(client, test, jobs, frozen, "partial.jane@example.com")
        first = client.get(f"{SCAN}/{first_id}", headers=test.headers).json
        assert first["livemode"] is False and first["result"]["partial"] is True
        before = balance(account)
        answer = rerun(client, test, first_id)
        assert answer.status_code == 202 and answer.json["livemode"] is False
        assert jobs.run(frozen, until=lambda: status_of(answer.json["scan_id"]) == "completed")
        second = client.get(f"{SCAN}/{answer.json['scan_id']}", headers=test.headers).json
        assert balance(account) == before
        assert rerun(client, account, first_id).status_code == 404  # a live key does not see test scans
    assert second["result"]["partial"] is False and second["rerun_of"] == first_id
