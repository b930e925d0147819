"""Tracking a scan in flight at the engine (D5, D6, D13, D24; E1 to E3): the batch looks.

Everything is real: the API (test client), the database, Redis with RQ's own
``SimpleWorker`` and the batch looks (``tests.jobrunner``), and the simulated engine over HTTP.
Time is freezegun's: ``jobs.run(frozen, until=...)`` moves the frozen clock to each due look or
scheduled job, and the simulator, in this process, runs on that same clock. No test sleeps.
"""
from __future__ import annotations

import json
import math
import re
from datetime import UTC, timedelta

import pytest
import requests
from freezegun import freeze_time

from app.extensions import db
from app.plumbing import runtime
from app.plumbing.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE, queue
from app.plumbing.models import utcnow
from app.scans.models import IN_FLIGHT, Scan
from app.scans.results import Owner, band_for, normalize_result
from app.tracking import looks, states
from app.tracking.statements import scan_states
from app.webhooks.models import WebhookDelivery
from simulator.investigations import decode_id, plan_for, progress_at
from simulator.results import EXTRA_FIELD, FULL_DATE, HIGH_SCORE, NO_BAND, messiness_of, phone_profile, result_for
from tests.conftest import ServerThread
from tests.jobrunner import enqueue_old_tracking_job

backoff = states.backoff
SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
YEAR_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
TOP_LEVEL = {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile", "ai_summary", "artifacts",
             "sources", "coverage", "partial", "findings", "match"}
SIM_SCALE = 0.01  # tests/conftest.py: the simulator's SIM_TIME_SCALE


# --- helpers ---------------------------------------------------------------------------

def create(client, account, target, kind=None) -> dict:
    body = {"target": target, **({"kind": kind} if kind else {})}
    response = client.post(SCAN, json=body, headers=account.headers)
    assert response.status_code == 202, response.json
    return response.json


def read(client, account, scan_id) -> dict:
    response = client.get(f"{SCAN}/{scan_id}", headers=account.headers)
    assert response.status_code == 200, response.json
    return response.json


def row(scan_id) -> Scan:
    with db.connection_context():
        return Scan.get_by_id(scan_id)


def statuses(scan_ids) -> list[str]:
    with db.connection_context():
        return [s.status for s in Scan.select(Scan.status).where(Scan.id.in_(list(scan_ids)))]


def all_final(scan_ids):
    return lambda: all(s in ("completed", "failed") for s in statuses(scan_ids))


def engine_mode(simulator, mode, **extra):
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": mode, **extra}, timeout=5).raise_for_status()


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def epoch(naive_utc) -> float:
    return naive_utc.replace(tzinfo=UTC).timestamp()


def no_tracking_left(scan_ids) -> bool:
    """No engine job, and no look due for these scans: nothing will look at them again."""
    engine = queue(ENGINE_QUEUE)
    with db.connection_context():  # the claim takes scans in flight only: a final scan is never looked at
        in_flight = Scan.select().where(Scan.id.in_(list(scan_ids)) & Scan.status.in_(IN_FLIGHT)).count()
    return engine.count == 0 and engine.scheduled_job_registry.count == 0 and in_flight == 0


def assert_d6_result(result: dict, kind: str) -> None:
    """Every §2.2 field, with the types of D6, and the explanation of E6 (reasons adding up)."""
    assert set(result) == TOP_LEVEL
    assert set(result["coverage"]) == {"checked", "found", "failed", "ratio"}
    assert result["partial"] is (result["coverage"]["failed"] > 0)
    finding_ids = {f["id"] for f in result["findings"]}
    assert all(set(r["finding_ids"]) <= finding_ids for r in result["risk"]["reasons"])
    if result["risk"]["reasons"]:
        assert sum(r["points"] for r in result["risk"]["reasons"]) == result["risk"]["score"]
    risk = result["risk"]
    assert set(risk) == {"score", "band", "reasons"}
    assert type(risk["score"]) is int and 0 <= risk["score"] <= 100
    assert risk["band"] == band_for(risk["score"])
    assert set(result["counts"]) == {"cases", "entities", "findings"}
    assert all(type(v) is int and v >= 0 for v in result["counts"].values())
    assert set(result["profiles"]) == {"verified", "weak"}
    for item in result["profiles"]["verified"] + result["profiles"]["weak"]:
        assert set(item) == {"platform", "url", "handle", "display_name", "confidence"}
        assert all(isinstance(item[k], str) for k in ("platform", "url", "handle", "display_name"))
        assert isinstance(item["confidence"], float) and 0 <= item["confidence"] <= 1
    assert set(result["contacts"]) == {"emails", "phones"}
    assert all(isinstance(e, str) and "@" in e for e in result["contacts"]["emails"])
    assert all(E164.match(p) for p in result["contacts"]["phones"])
    assert isinstance(result["breaches"], list)
    for breach in result["breaches"]:
        assert set(breach) == {"name", "date", "accounts", "classes"}
        assert isinstance(breach["name"], str) and breach["name"]
        assert YEAR_MONTH.match(breach["date"]), breach
        assert type(breach["accounts"]) is int and breach["accounts"] >= 0
        assert all(isinstance(c, str) for c in breach["classes"])
    assert isinstance(result["ai_summary"], str) and result["ai_summary"]
    assert set(result["artifacts"]) == {"pdf", "person_card"}
    assert all(re.match(r"^https?://[^/]+/", url) for url in result["artifacts"].values())
    if kind == "phone":
        profile = result["phone_profile"]
        assert set(profile) == {"e164", "country_code", "region", "carrier", "line_type", "valid", "timezones"}
        assert E164.match(profile["e164"])
        assert type(profile["country_code"]) is int
        assert re.match(r"^[A-Z]{2}$", profile["region"])
        assert isinstance(profile["carrier"], str) and isinstance(profile["line_type"], str)
        assert type(profile["valid"]) is bool
        assert profile["timezones"] and all(re.match(r"^[A-Za-z_]+/[A-Za-z_/]+$", z) for z in profile["timezones"])
    else:
        assert result["phone_profile"] is None


@pytest.fixture
def look_log(monkeypatch):
    """Every look a batch look made at a scan, as ``(scan_id, when, outcome, due)``: ``outcome``
    is a final's (``completed``, ``failed``, ``timeout``) or ``unfinished`` / ``engine_errors``,
    ``due`` the next look it set (None for a final)."""
    calls, real = [], looks._apply

    def recording(scan, state, now):
        outcome = real(scan, state, now)
        if isinstance(outcome, states.Final):
            calls.append((scan.id, now, outcome.outcome, None))
        else:
            calls.append((scan.id, now, outcome[0], outcome[1][2]))
        return outcome

    monkeypatch.setattr(looks, "_apply", recording)
    return calls


def expected_result(simulator, scan) -> dict:
    """What the simulator answered for this scan, normalised: the pipeline must store exactly that
    (its sources checked when the engine finished it)."""
    stored = json.loads(scan.result_json)
    checked_at = stored["sources"][0]["checked_at"] if stored["sources"] else None
    assert checked_at is None or ISO.match(checked_at)
    raw = result_for(scan.kind, scan.target, f"{simulator.url}/_sim/artifacts/{scan.engine_id}",
                     checked_at=checked_at)
    return normalize_result(raw, scan.kind, scan_id=scan.id, owner=Owner(scan.customer_id, scan.kind, scan.target))


# --- 1. one scan of each kind, queued -> running -> completed ------------------------------

# Targets the simulator works on for more than 1.5 s (at SIM_TIME_SCALE 0.01, an eta of 2 s): the
# first look, half a second before the eta, finds them running.
KINDS = [("email", "sam.lee@example.com"), ("phone", "+4915123456703"), ("username", "torvalds")]


@pytest.mark.config(ENGINE_POLL_SECONDS=1)  # look often enough to watch the progress
@pytest.mark.parametrize("kind, target", KINDS, ids=[k for k, _ in KINDS])
def test_a_scan_goes_queued_running_completed_with_current_progress(client, make_customer, jobs, simulator,
                                                                    look_log, kind, target):
    account = make_customer(credits=1000)
    plan = plan_for(kind, target, SIM_SCALE)
    assert 1.5 < plan.duration_s < 1.9 and plan.behaviour == "normal"
    with freeze_time(START) as frozen:
        created = create(client, account, target, kind)
        scan_id, eta = created["scan_id"], created["eta_seconds"]
        t0 = epoch(row(scan_id).created_at)
        assert created["recipes_to_run"] == plan.recipes and eta == math.ceil(plan.duration_s)
        investigation = decode_id(row(scan_id).engine_id)
        reads = []

        def observe():
            body = read(client, account, scan_id)
            scan = row(scan_id)
            last_look = max((when for i, when, _, _ in look_log if i == scan_id), default=None)
            reads.append((utcnow(), body, scan, last_look))
            return body["status"] in ("completed", "failed")

        assert jobs.run(frozen, until=observe)

    order = {"queued": 0, "running": 1, "completed": 2}
    seen = [body["status"] for _, body, _, _ in reads]
    assert seen[0] == "queued" and seen[-1] == "completed"
    assert "running" in seen, seen
    assert [order[s] for s in seen] == sorted(order[s] for s in seen), seen  # never goes back
    in_flight = [(now, body, scan, last) for now, body, scan, last in reads if body["status"] in ("queued", "running")]
    for now, body, scan, last_look in in_flight:
        assert set(body) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref", "created_at",
        "eta_seconds", "progress"}
        assert type(body["eta_seconds"]) is int and body["eta_seconds"] >= 0
        assert scan.eta_at == scan.created_at + timedelta(seconds=eta)
        assert body["eta_seconds"] == max(0, math.ceil((scan.eta_at - now).total_seconds()))  # what remains
        assert body["progress"]["recipes_total"] == plan.recipes
        if last_look is None:
            assert body["progress"]["recipes_done"] == 0 and body["status"] == "queued"
        else:  # what the engine reported at the last look, not older
            engine_said = progress_at(plan, epoch(last_look) - investigation.created_ms / 1000)
            assert body["progress"]["recipes_done"] == engine_said.recipes_done
            assert body["status"] == ("running" if engine_said.status == "running" else "queued")
    done = [body["progress"]["recipes_done"] for _, body, _, _ in in_flight]
    assert done == sorted(done) and max(done) > 0

    _, final, scan, _ = reads[-1]
    assert set(final) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref", "created_at",
        "completed_at", "result"}
    assert final["target"] == target and final["kind"] == kind
    assert final["created_at"] == "2026-11-21T12:00:00Z" and ISO.match(final["completed_at"])
    assert epoch(scan.completed_at) - t0 >= plan.duration_s  # not before the engine was done
    assert scan.recipes_done == plan.recipes
    assert_d6_result(final["result"], kind)
    assert final["result"] == expected_result(simulator, scan)
    if kind == "phone":
        assert final["result"]["phone_profile"] == {
            "e164": "+4915123456703", "country_code": 49, "region": "DE", "carrier": "T-Mobile",
            "line_type": "mobile", "valid": True, "timezones": ["Europe/Berlin"]}
        assert phone_profile(target)["e164"] in final["result"]["contacts"]["phones"]
    assert no_tracking_left([scan_id])  # the tracking ended with the scan


def _messy_targets() -> dict:
    """One e-mail target per kind of repairable flaw the simulator introduces."""
    found = {}
    for i in range(2000):
        target = f"mess{i}@example.com"
        mess = messiness_of("email", target)
        if mess == FULL_DATE and not result_for("email", target, "http://x")["breaches"]:
            continue  # without a breach the simulator adds an extra field instead
        if mess and mess not in found:
            found[mess] = target
        if len(found) == 4:
            return found
    raise AssertionError(f"not every kind of mess found: {found}")


def test_messy_engine_results_are_repaired_before_they_are_stored(client, make_customer, jobs, simulator):
    account = make_customer(credits=1000)
    messy = _messy_targets()
    with freeze_time(START) as frozen:
        ids = {mess: create(client, account, target)["scan_id"] for mess, target in messy.items()}
        assert jobs.run(frozen, until=all_final(ids.values()))
        results = {mess: read(client, account, scan_id) for mess, scan_id in ids.items()}
    for body in results.values():
        assert body["status"] == "completed", body
        assert_d6_result(body["result"], "email")
    raw = {mess: result_for("email", messy[mess], "http://x") for mess in messy}
    # Its reasons added up to the score before the cap: dropped, the scan completed all the same.
    assert results[HIGH_SCORE]["result"]["risk"] == {"score": 100, "band": "critical", "reasons": []}
    assert raw[HIGH_SCORE]["risk"]["score"] > 100
    assert "band" not in raw[NO_BAND]["risk"]
    assert results[NO_BAND]["result"]["risk"]["band"] == band_for(raw[NO_BAND]["risk"]["score"])
    assert re.match(r"^\d{4}-\d{2}-\d{2}$", raw[FULL_DATE]["breaches"][0]["date"])
    assert results[FULL_DATE]["result"]["breaches"][0]["date"] == raw[FULL_DATE]["breaches"][0]["date"][:7]
    assert "engine_build" in raw[EXTRA_FIELD]
    assert set(results[EXTRA_FIELD]["result"]) == TOP_LEVEL


# --- 2. a bulk of 100 ----------------------------------------------------------------

def bulk_targets() -> list[dict]:
    targets = []
    for i in range(100):
        if i % 3 == 0:
            targets.append({"target": f"person{i}@example.com", "kind": "email"})
        elif i % 3 == 1:
            targets.append({"target": f"+4915123456{i:03d}", "kind": "phone"})
        else:
            targets.append({"target": f"handle_{i}", "kind": "username"})
    # Five that the engine fails (two of them with a result no validator accepts).
    targets[10] = {"target": "fail.ten@example.com", "kind": "email"}
    targets[20] = {"target": "+4915123450000", "kind": "phone"}
    targets[30] = {"target": "failing_thirty", "kind": "username"}
    targets[40] = {"target": "junk.forty@example.com", "kind": "email"}
    targets[50] = {"target": "+4915123456666", "kind": "phone"}
    return targets


FAILING = {10, 20, 30, 40, 50}


def test_a_bulk_of_100_completes_and_its_counts_add_up(client, make_customer, jobs, simulator):
    account = make_customer(tier="business", credits=1000, inflight=100)
    targets = bulk_targets()
    with freeze_time(START) as frozen:
        response = client.post(BULK, json={"targets": targets}, headers=account.headers)
        assert response.status_code == 202, response.json
        created = response.json
        assert created["queued"] == 100 and created["rejected"] == []
        bulk_id, ids = created["bulk_id"], [s["scan_id"] for s in created["scans"]]
        before = client.get(f"{BULK}/{bulk_id}", headers=account.headers).json
        assert before["all_done"] is False and before["queued"] == 100
        assert before["running"] == before["completed"] == before["failed"] == 0
        assert jobs.run(frozen, until=all_final(ids))
        after = client.get(f"{BULK}/{bulk_id}", headers=account.headers).json
    assert after["all_done"] is True
    assert after["total"] == 100 and len(after["scans"]) == 100
    assert after["queued"] == after["running"] == 0
    assert after["completed"] == 95 and after["failed"] == 5
    assert after["queued"] + after["running"] + after["completed"] + after["failed"] == after["total"]
    assert [s["target"] for s in after["scans"]] == [t["target"] for t in targets]  # request order
    assert [s["scan_id"] for s in after["scans"]] == ids
    for index, entry in enumerate(after["scans"]):
        if index in FAILING:
            assert entry["status"] == "failed" and entry["failure"]["code"] == "engine_failed"
            assert "result" not in entry
        else:
            assert entry["status"] == "completed" and "failure" not in entry
            assert_d6_result(entry["result"], entry["kind"])
    assert no_tracking_left(ids)


# --- 3. failures ---------------------------------------------------------------------

@pytest.mark.parametrize("kind, target", [
    ("email", "fail.alice@example.com"),
    ("phone", "+4915123450000"),
    ("username", "failbot"),
    ("email", "junk.bob@example.com"),     # done, but with a result that cannot be made valid
    ("phone", "+4915123456666"),
])
def test_an_engine_failure_fails_the_scan_with_engine_failed(client, make_customer, jobs, kind, target):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, target, kind)["scan_id"]
        assert jobs.run(frozen, until=all_final([scan_id]))
        body = read(client, account, scan_id)
    assert set(body) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref", "created_at",
        "failed_at", "failure"}
    assert body["status"] == "failed"
    assert body["failure"]["code"] == "engine_failed"
    assert isinstance(body["failure"]["message"], str) and body["failure"]["message"]
    assert ISO.match(body["failed_at"])
    assert row(scan_id).result_json is None
    assert no_tracking_left([scan_id])


@pytest.mark.config(SCAN_TIMEOUT_SECONDS=5, ENGINE_POLL_SECONDS=1)
@pytest.mark.parametrize("kind, target", [("email", "hang.carol@example.com"), ("phone", "+4915123458888")])
def test_a_hanging_scan_fails_with_engine_timeout_and_nothing_polls_after(client, make_customer, jobs, simulator,
                                                                          look_log, kind, target):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, target, kind)["scan_id"]
        assert jobs.run(frozen, until=all_final([scan_id]))
        body = read(client, account, scan_id)
        scan = row(scan_id)
        assert body["status"] == "failed" and body["failure"]["code"] == "engine_timeout"
        assert body["failure"]["message"]
        # Failed at the deadline, within RQ's one-second scheduling resolution.
        assert 5 <= (scan.failed_at - scan.created_at).total_seconds() < 6
        assert scan.started_at is not None  # it was running (the engine said so) until then
        # Nothing keeps polling: no job left, and a long while later the engine saw no more calls.
        assert no_tracking_left([scan_id])
        assert look_log[-1][2] == "timeout"
        assert [outcome for _, _, outcome, _ in look_log[:-1]] == ["unfinished"] * (len(look_log) - 1)
        calls, runs = engine_stats(simulator)["looks"], len(look_log)
        assert calls == runs  # one engine request per look; the look at the deadline asked, and failed it on the answer
        frozen.tick(3600)
        jobs.run(frozen)
        assert len(look_log) == runs
        assert engine_stats(simulator)["looks"] == calls
        assert read(client, account, scan_id)["failure"]["code"] == "engine_timeout"


@pytest.mark.config(SCAN_TIMEOUT_SECONDS=5, ENGINE_POLL_SECONDS=1)
def test_a_scan_the_engine_cannot_answer_for_is_not_failed_on_age_and_completes_once_it_answers(
        client, make_customer, jobs, simulator, look_log):
    """Amended D13: past the timeout, a scan is failed only on a look that finds it unfinished.
    While the engine cannot be reached it stays in flight, looked at with back-off; once the
    engine answers, the scan it finished in the meantime completes with its result."""
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "nobody@example.com")["scan_id"]  # ~1 s of engine time here
        engine_mode(simulator, "down")
        seen = []
        assert jobs.run(frozen, until=lambda: seen.append(row(scan_id)) or seen[-1].check_errors >= 10)
        scan = row(scan_id)
        assert (scan.created_at + timedelta(seconds=15)) < utcnow()  # three times the 5 s timeout
        assert {s.status for s in seen} == {"queued"} and scan.failed_at is None
        assert scan.next_look_at > utcnow()  # looked at again later
        errors = [when for _, when, outcome, _ in look_log if outcome == "engine_errors"]
        gaps = [(b - a).total_seconds() for a, b in zip(errors, errors[1:])]
        assert gaps and min(gaps) >= 1 and max(gaps) <= backoff(10) + 1  # backing off, never hammering, never giving up

        engine_mode(simulator, "up")
        assert jobs.run(frozen, until=all_final([scan_id]))
        scan = row(scan_id)
    assert scan.status == "completed" and scan.failure_code is None
    assert_d6_result(json.loads(scan.result_json), "email")
    assert no_tracking_left([scan_id])


# --- 4. an unreliable engine ---------------------------------------------------------------

@pytest.mark.config(ENGINE_POLL_SECONDS=0.2)
def test_a_flaky_engine_delays_scans_but_every_one_completes(client, make_customer, jobs, simulator):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        ids = [create(client, account, target, kind)["scan_id"] for kind, target in KINDS]
        engine_mode(simulator, "flaky", every=2)  # every 2nd engine call answers 500
        errors = []
        assert jobs.run(frozen, until=lambda: errors.extend(row(i).check_errors for i in ids) or all_final(ids)())
    assert statuses(ids) == ["completed"] * 3
    assert max(errors) >= 1  # the engine's 500s were met, and retried
    stats = engine_stats(simulator)
    assert stats["looks"] >= 2  # one batch look for the three, retried
    for scan_id in ids:
        assert_d6_result(json.loads(row(scan_id).result_json), row(scan_id).kind)


@pytest.mark.config(ENGINE_POLL_SECONDS=10)
def test_engine_errors_back_off_then_the_scan_completes_when_the_engine_is_back(client, make_customer, jobs,
                                                                                simulator, look_log):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")["scan_id"]
        engine_mode(simulator, "down")
        delays = {}

        def observe():
            scan = row(scan_id)
            if scan.check_errors and scan.check_errors not in delays:
                # Observed right after the look that counted this error: the next look it set.
                _, when, outcome, due = look_log[-1]
                assert outcome == "engine_errors" and due == scan.next_look_at
                delays[scan.check_errors] = (due - when).total_seconds()
            return scan.check_errors >= 7

        assert jobs.run(frozen, until=observe)
        assert row(scan_id).status == "queued"
        calls_while_down = engine_stats(simulator)["looks"]
        engine_mode(simulator, "up")
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert sorted(delays) == list(range(1, 8))
    ordered = [delays[n] for n in sorted(delays)]
    # Each retry waits longer than the one before, up to three poll intervals.
    assert ordered == pytest.approx([1, 2, 4, 8, 16, 30, 30], abs=0.01)
    assert ordered == pytest.approx([backoff(n) for n in range(1, 8)], abs=0.01)
    assert calls_while_down == 7  # one engine request per look, each one an error
    assert row(scan_id).status == "completed"


BATCH_LOOK = "/v1/investigations/status"


class GarbageEngine:
    """An engine that answers the first looks with nonsense, then like the simulator.

    Each canned answer is ``(status, content_type, body)``; later calls are forwarded. With
    ``batch`` the nonsense answers the batch looks; without, the engine does not offer the batch
    look (404) and the nonsense answers the single looks.
    """

    def __init__(self, upstream: str, answers: list = ()):
        self.upstream = upstream
        self.load(answers)

    def load(self, answers, *, batch: bool = False) -> None:
        self.answers, self.served, self.batch = list(answers), [], batch

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ["REQUEST_METHOD"] == "POST" and path == BATCH_LOOK and not self.batch:
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b'{"error": "not_found"}']
        look = (path == BATCH_LOOK) if self.batch else (environ["REQUEST_METHOD"] == "GET"
                                                         and path.startswith("/v1/investigations/"))
        if look and self.answers:
            status, content_type, body = self.answers.pop(0)
            self.served.append(status)
            headers = [("Content-Type", content_type)]
            if status.startswith("302"):
                headers.append(("Location", f"{self.upstream}{path}"))
            start_response(status, headers)
            return [body.encode()]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else None
        forwarded = requests.request(environ["REQUEST_METHOD"], f"{self.upstream}{path}", data=body,
                                     headers={"Authorization": environ.get("HTTP_AUTHORIZATION", ""),
                                              "Content-Type": environ.get("CONTENT_TYPE", "")}, timeout=5)
        start_response(f"{forwarded.status_code} X", [("Content-Type", "application/json")])
        return [forwarded.content]


@pytest.fixture(scope="module")
def garbage_server(simulator):
    server = ServerThread(GarbageEngine(simulator.url))
    yield server
    server.stop()


@pytest.fixture
def garbage_engine(garbage_server, app, monkeypatch):
    """The engine at ENGINE_URL, once ``switch()`` is called, answers the loaded nonsense first."""
    monkeypatch.setattr(looks, "_unsupported_until", 0.0)  # whether it offers the batch look is found anew
    engine = garbage_server.server.app
    engine.load([])
    engine.switch = lambda: monkeypatch.setitem(runtime.config, "ENGINE_URL", garbage_server.url)
    return engine


NONSENSE = [
    ("200 OK", "application/json", "{not json"),
    ("200 OK", "application/json", '{"id": "x", "status": "exploded", "recipes_total": 5}'),
    ("200 OK", "application/json", '{"id": "x", "status": null}'),
    ("200 OK", "application/json", "[1, 2, 3]"),
    ("200 OK", "text/html", "<html><body>Gateway</body></html>"),
    ("302 Found", "text/plain", ""),
    ("404 Not Found", "application/json", '{"error": "not_found"}'),
]


# What a batch look may answer that says nothing usable of the scans asked about.
BATCH_NONSENSE = [
    ("200 OK", "application/json", "{not json"),
    ("200 OK", "application/json", '{"items": "x"}'),
    ("200 OK", "application/json", '{"items": []}'),  # not one item per id asked
    ("200 OK", "application/json", '{"items": [{"id": "x", "status": "exploded"}]}'),
    ("200 OK", "application/json", '{"items": [7]}'),
    ("200 OK", "text/html", "<html><body>Gateway</body></html>"),
    ("302 Found", "text/plain", ""),
    ("500 Internal Server Error", "application/json", "{}"),
]


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
@pytest.mark.parametrize("batch, nonsense", [(False, NONSENSE), (True, BATCH_NONSENSE)], ids=["single", "batch"])
def test_malformed_engine_answers_are_retried_not_fatal(client, make_customer, jobs, garbage_engine, batch, nonsense):
    account = make_customer(credits=1000)
    garbage_engine.load(nonsense, batch=batch)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        garbage_engine.switch()  # from here on the engine at ENGINE_URL answers nonsense for a while
        errors = []
        assert jobs.run(frozen, until=lambda: errors.append(row(scan_id).check_errors) or all_final([scan_id])())
    assert garbage_engine.served == [status for status, _, _ in nonsense]  # every bad answer was met
    assert max(errors) == len(nonsense)  # each one counted as an engine error, none as a verdict
    scan = row(scan_id)
    assert scan.status == "completed"
    assert_d6_result(json.loads(scan.result_json), "email")


@pytest.mark.parametrize("error", [None, "boom", {"code": "x"}, {"code": "engine_failed", "message": 7}])
def test_an_engine_error_without_usable_details_fails_with_a_default_message(client, make_customer, jobs,
                                                                           garbage_engine, error):
    account = make_customer(credits=1000)
    answer = json.dumps({"id": "x", "status": "error", "recipes_total": 4, "recipes_done": 2, "result": None,
                         "error": error})
    garbage_engine.load([("200 OK", "application/json", answer)])
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        garbage_engine.switch()
        assert jobs.run(frozen, until=all_final([scan_id]))
    scan = row(scan_id)
    assert scan.status == "failed" and scan.failure_code == "engine_failed"
    assert scan.failure_message == "the engine could not complete the investigation"


# --- 5. duplicates and replays ---------------------------------------------------------

def old_job_outcomes(job_ids) -> list:
    """What each tracking job of before the upgrade returned once run."""
    from rq.job import Job
    return [Job.fetch(job_id, connection=runtime.redis()).return_value() for job_id in job_ids]


def test_replaying_looks_and_old_jobs_for_a_finished_scan_changes_nothing(client, make_customer, jobs, simulator,
                                                                          look_log):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        assert jobs.run(frozen, until=all_final([scan_id]))
        before = row(scan_id)
        calls = engine_stats(simulator)
        frozen.tick(30)
        # Tracking jobs of before the upgrade, for this scan, run now; and a look replayed with the
        # generation the last look held.
        enqueue_old_tracking_job(scan_id, f"trk-{scan_id}-0")
        enqueue_old_tracking_job(scan_id, f"trk-{scan_id}-5")
        jobs.run(frozen)
        assert old_job_outcomes([f"trk-{scan_id}-0", f"trk-{scan_id}-5"]) == ["nothing", "nothing"]
        with db.connection_context():
            assert looks.look_due()["claimed"] == 0  # a final scan is never claimed
            assert scan_states.record_looks([(scan_id, before.look_generation, utcnow(), 0, 9, 9, True)],
                                            statuses=IN_FLIGHT, queued="queued", running="running",
                                            now=utcnow()) == []
        # A second verdict is refused by the compare-and-set.
        assert states.complete(scan_id, {"risk": {"score": 1}}) is False
        assert states.fail(scan_id, "engine_failed", "late") is False
        after = row(scan_id)
    assert engine_stats(simulator) == calls  # no replay asked the engine anything
    assert after.status == "completed"
    assert after.completed_at == before.completed_at and after.failed_at is None
    assert after.result_json == before.result_json and after.failure_code is None
    assert (after.next_look_at, after.look_generation) == (before.next_look_at, before.look_generation)
    assert no_tracking_left([scan_id])


def test_an_old_tracking_job_of_a_scan_the_looks_track_does_nothing(client, make_customer, jobs, simulator):
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        scan = row(scan_id)
        assert scan.next_look_at is not None and scan.tracking_job_id is None
        calls = engine_stats(simulator)
        enqueue_old_tracking_job(scan_id, f"trk-{scan_id}-7")  # left in Redis from before the upgrade
        jobs.run()  # no freezer: runs what is due, does not move time
        assert old_job_outcomes([f"trk-{scan_id}-7"]) == ["nothing"]
        assert engine_stats(simulator) == calls  # the job did not even look
        after = row(scan_id)
        assert (after.next_look_at, after.look_generation, after.status) == (scan.next_look_at, 0, "queued")
        assert queue(ENGINE_QUEUE).count == 0 and queue(ENGINE_QUEUE).scheduled_job_registry.count == 0
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert row(scan_id).status == "completed"


@pytest.mark.config(ENGINE_POLL_SECONDS=0.2)
def test_a_replayed_look_writes_nothing_over_a_later_one(client, make_customer, jobs, simulator):
    """The fencing token: a look's record carries the ``look_generation`` it claimed; once a later
    look was recorded, the earlier one (a looker that lost its claim, a replay) writes nothing."""
    account = make_customer(credits=1000)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "torvalds", "username")["scan_id"]  # still running at its first look
        assert jobs.run(frozen, until=lambda: row(scan_id).status == "running")
        first = row(scan_id)
        assert first.look_generation >= 1 and first.next_look_at > utcnow()
        # A second look while the engine still works on it (made due now, as a callback does): the
        # next due one is at the eta, when the scan may be done and a final takes no generation.
        with db.connection_context():
            Scan.update(next_look_at=utcnow()).where(Scan.id == scan_id).execute()
            assert looks.look_due()["unfinished"] == 1
        later = row(scan_id)
        assert later.look_generation == first.look_generation + 1
        replay = (scan_id, first.look_generation, utcnow() + timedelta(hours=1), 5, 99, 0, False)
        with db.connection_context():
            assert scan_states.record_looks([replay], statuses=IN_FLIGHT, queued="queued", running="running",
                                            now=utcnow()) == []
        kept = row(scan_id)
        assert (kept.next_look_at, kept.check_errors, kept.recipes_done, kept.look_generation) == \
            (later.next_look_at, later.check_errors, later.recipes_done, later.look_generation)
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert row(scan_id).status == "completed"


def test_two_jobs_racing_to_finish_a_scan_finish_it_once(client, make_customer, jobs):
    """Both saw the engine done: one verdict, one completed_at, one webhook event."""
    account = make_customer(credits=1000, webhook_url="http://127.0.0.1:9/hook",
                            webhook_secret="whsec_ZW5naW5lIGpvYnMgczNjcmV0IHZhbHVl")
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        result = normalize_result({"risk": {"score": 30}}, "email")
        assert states.complete(scan_id, result) is True
        first = row(scan_id)
        frozen.tick(5)
        assert states.complete(scan_id, normalize_result({"risk": {"score": 90}}, "email")) is False
        assert states.fail(scan_id, "engine_timeout", "too late") is False
    after = row(scan_id)
    assert after.status == "completed" and after.completed_at == first.completed_at
    assert json.loads(after.result_json)["risk"] == {"score": 30, "band": "medium", "reasons": []}
    with db.connection_context():
        deliveries = list(WebhookDelivery.select().where(WebhookDelivery.scan_id == scan_id))
    assert [d.event for d in deliveries] == ["scan.completed"]
    assert queue(WEBHOOK_QUEUE).count == 1


def test_progress_is_not_recorded_on_a_finished_scan(client, make_customer):
    """A look that saw the scan unfinished records nothing once another one finished it."""
    account = make_customer(credits=1000)
    with freeze_time(START):
        scan_id = create(client, account, "jane.doe@example.com")["scan_id"]
        with db.connection_context():
            claimed = row(scan_id).look_generation
            assert states.fail(scan_id, "engine_failed", "x") is True
            assert scan_states.record_looks([(scan_id, claimed, utcnow(), 0, 99, 50, True)], statuses=IN_FLIGHT,
                                            queued="queued", running="running", now=utcnow()) == []
    scan = row(scan_id)
    assert scan.status == "failed" and scan.recipes_done == 0 and scan.recipes_total != 99
    assert scan.started_at is None
    assert scan.failed_at.isoformat() == "2026-11-21T12:00:00"
