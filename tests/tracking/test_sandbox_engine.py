"""The sandbox engine of test mode (decisions D15): the engine client's answers, with no
network, stateless and deterministic, following E3's target conventions, with
the simulator's own results. Time is moved with freezegun; nothing sleeps."""
from datetime import datetime

import pytest
from freezegun import freeze_time

from app.plumbing import runtime
from app.plumbing.config import ConfigError, load_settings
from app.plumbing.engine import EngineError
from app.scans.results import normalize_result
from app.tracking import sandbox_engine as sandbox
from app.tracking.simulated.results import messiness_of
from simulator.app import create_sim_app

START = "2025-03-01 12:00:00"
STATUS_KEYS = {"id", "status", "recipes_total", "recipes_done", "result", "error"}


@pytest.fixture(autouse=True)
def scan_seconds(monkeypatch):
    """SANDBOX_SCAN_SECONDS at its default, whatever app another test bound."""
    monkeypatch.setitem(runtime.config, "SANDBOX_SCAN_SECONDS", 5.0)


def look_after(seconds, target, kind="email"):
    """Submit at START, move the clock ``seconds`` on, look once."""
    with freeze_time(START) as frozen:
        submission = sandbox.submit(target, kind, "scn_test")
        frozen.tick(seconds)
        return submission, sandbox.status(submission["id"])


def timeline(target, kind="email", *, until, step=0.25):
    """(elapsed, status document) every ``step`` seconds from submission to ``until``."""
    with freeze_time(START) as frozen:
        engine_id = sandbox.submit(target, kind, "scn_test")["id"]
        looks, elapsed = [], 0.0
        while elapsed <= until:
            looks.append((elapsed, sandbox.status(engine_id)))
            frozen.tick(step)
            elapsed += step
        return looks


def final_result(target, kind="email"):
    _, state = look_after(sandbox.SLOW_SECONDS + 1, target, kind)
    assert state["status"] == "done", state
    return state["result"]


# --- submission ---------------------------------------------------------------------------

def test_submit_answers_like_the_engine_client_with_a_sandbox_id():
    submission = sandbox.submit("alice@example.com", "email", "scn_1")
    assert set(submission) == {"id", "recipes", "eta_seconds"}
    assert submission["id"].startswith("sbx_") and sandbox.is_sandbox_id(submission["id"])
    assert 4 <= submission["recipes"] <= 12
    assert submission["eta_seconds"] == 5


def test_two_submissions_of_one_target_get_distinct_ids_and_the_same_plan():
    first, second = (sandbox.submit("alice@example.com", "email", "scn_1") for _ in range(2))
    assert first["id"] != second["id"]
    assert (first["recipes"], first["eta_seconds"]) == (second["recipes"], second["eta_seconds"])


def test_live_engine_ids_are_not_sandbox_ids():
    assert not sandbox.is_sandbox_id("inv_eyJrIjoiZW1haWwifQ")
    assert not sandbox.is_sandbox_id(None)


@pytest.mark.parametrize("kind,target", [("fax", "alice@example.com"), ("email", ""), ("email", "  "),
                                         ("email", None)])
def test_a_bad_submission_is_an_engine_error(kind, target):
    with pytest.raises(EngineError):
        sandbox.submit(target, kind, "scn_1")


@pytest.mark.parametrize("engine_id", ["sbx_", "sbx_!!!", "sbx_bm90IGpzb24", "sbx_WzFd", "inv_abc",
                                       "sbx_eyJrIjoiZmF4IiwidCI6IngiLCJjIjoxfQ"])
def test_an_id_the_sandbox_did_not_issue_is_an_engine_error(engine_id):
    with pytest.raises(EngineError):
        sandbox.status(engine_id)


def test_batch_answers_in_request_order_and_each_item_runs_its_own_convention():
    items = [{"target": t, "kind": "phone", "reference": t} for t in ("+14155559999", "+14155550000", "+14155552671")]
    with freeze_time(START) as frozen:
        submissions = sandbox.submit_batch(items)
        frozen.tick(5)
        states = [sandbox.status(s["id"])["status"] for s in submissions]
    assert [s["eta_seconds"] for s in submissions] == [60, 5, 5]
    assert states == ["running", "error", "done"]


def test_a_batch_with_one_bad_item_submits_nothing():
    with pytest.raises(EngineError):
        sandbox.submit_batch([{"target": "a@example.com", "kind": "email"}, {"target": "x", "kind": "fax"}])


# --- progress over time -------------------------------------------------------------------

def test_a_scan_goes_pending_then_running_with_growing_recipes_then_done_at_sandbox_scan_seconds():
    looks = timeline("alice@example.com", until=6)
    statuses = [state["status"] for _, state in looks]
    assert statuses[0] == "pending"
    assert "running" in statuses
    assert {state["status"] for elapsed, state in looks if elapsed < 5} <= {"pending", "running"}
    assert all(state["status"] == "done" for elapsed, state in looks if elapsed >= 5)
    # Statuses never go back, recipes never decrease, and grow through the run.
    order = {"pending": 0, "running": 1, "done": 2}
    assert [order[s] for s in statuses] == sorted(order[s] for s in statuses)
    done_counts = [state["recipes_done"] for _, state in looks]
    assert done_counts == sorted(done_counts)
    total = looks[0][1]["recipes_total"]
    assert len({state["recipes_done"] for _, state in looks if state["status"] == "running"}) >= 3
    for _, state in looks:
        assert set(state) == STATUS_KEYS and state["recipes_total"] == total
        assert (state["result"] is not None) == (state["status"] == "done")
        assert state["error"] is None
    assert looks[-1][1]["recipes_done"] == total


def test_a_look_is_answered_by_any_process_from_the_id_alone():
    """No state: the status depends only on the id and the clock (a fresh import would agree)."""
    with freeze_time(START) as frozen:
        engine_id = sandbox.submit("bob@example.com", "email", "scn_1")["id"]
        frozen.tick(2)
        assert sandbox.status(engine_id) == sandbox.status(engine_id)
        assert sandbox.status(engine_id)["id"] == engine_id


def test_the_scan_row_gives_the_same_answer_as_the_engine_id():
    with freeze_time(START) as frozen:
        engine_id = sandbox.submit("bob@example.com", "email", "scn_1")["id"]
        submitted = datetime(2025, 3, 1, 12, 0, 0)  # naive UTC, as the models store it
        for _ in range(8):
            by_id, by_row = sandbox.status(engine_id), sandbox.status_of("email", "bob@example.com", submitted)
            assert {**by_row, "id": engine_id} == by_id
            frozen.tick(1)
        assert by_id["status"] == "done"


def test_sandbox_scan_seconds_sets_the_duration_and_the_timeout(monkeypatch):
    monkeypatch.setitem(runtime.config, "SANDBOX_SCAN_SECONDS", 2.0)
    submission, state = look_after(1.9, "carol@example.com")
    assert submission["eta_seconds"] == 2 and state["status"] == "running"
    assert look_after(2.0, "carol@example.com")[1]["status"] == "done"
    assert sandbox.timeout_seconds("email", "carol@example.com") == 6.0


# --- target conventions -------------------------------------------------------------------

@pytest.mark.parametrize("target,kind", [("fail.me@example.com", "email"), ("FAIL@example.com", "email"),
                                         ("failbot", "username"), ("@failbot", "username"),
                                         ("+14155550000", "phone")])
def test_fail_targets_run_their_course_then_end_in_engine_failed(target, kind):
    _, before = look_after(4.9, target, kind)
    _, after = look_after(5, target, kind)
    assert before["status"] == "running" and before["error"] is None
    assert after["status"] == "error" and after["result"] is None
    assert after["error"]["code"] == "engine_failed" and after["error"]["message"]
    assert after["recipes_done"] == after["recipes_total"] - 1


def test_fail_in_the_domain_of_an_email_is_not_a_convention():
    assert look_after(5, "alice@fail.example.com")[1]["status"] == "done"


@pytest.mark.parametrize("target,kind", [("slow.one@example.com", "email"), ("slowpoke", "username"),
                                         ("+447700909999", "phone")])
def test_slow_targets_take_sixty_seconds(target, kind):
    submission, at_scan_seconds = look_after(5, target, kind)
    assert submission["eta_seconds"] == 60
    assert at_scan_seconds["status"] == "running"
    assert look_after(59.9, target, kind)[1]["status"] == "running"
    assert look_after(60, target, kind)[1]["status"] == "done"
    # A slow scan gets room to finish: three times its own duration.
    assert sandbox.timeout_seconds(kind, target) == 180


@pytest.mark.parametrize("target,kind", [("hang@example.com", "email"), ("hangman", "username"),
                                         ("+14155558888", "phone")])
def test_hang_targets_stay_running_for_ever_and_time_out_at_three_times_sandbox_scan_seconds(target, kind):
    _, state = look_after(5 * 100, target, kind)
    assert state["status"] == "running" and state["result"] is None and state["error"] is None
    assert state["recipes_done"] < state["recipes_total"]
    assert sandbox.timeout_seconds(kind, target) == 15


def test_ordinary_targets_time_out_at_three_times_sandbox_scan_seconds():
    assert sandbox.timeout_seconds("email", "alice@example.com") == 15


def test_the_simulators_junk_convention_is_not_part_of_test_mode():
    _, state = look_after(5, "junk@example.com")
    assert state["status"] == "done" and isinstance(state["result"], dict)


# --- results ------------------------------------------------------------------------------

def _but_times(result):
    """The result without the sources' ``checked_at`` (when the look found it finished)."""
    return {**result, "sources": [{**s, "checked_at": None} for s in result["sources"]]}


def test_the_same_target_gives_the_same_result_in_every_submission():
    assert look_after(5, "dave@example.com")[1]["result"] == look_after(6, "dave@example.com")[1]["result"]
    looked = normalize_result(look_after(5, "dave@example.com")[1]["result"], "email", scan_id="scn_1")
    assert sandbox.result("email", "dave@example.com", scan_id="scn_1") == _but_times(looked)
    assert {s["checked_at"] for s in looked["sources"]} == {"2025-03-01T12:00:05Z"}  # when it finished


def test_different_targets_give_varied_results():
    results = [sandbox.result("email", f"person{i}@example.com") for i in range(30)]
    assert len({r["risk"]["score"] for r in results}) >= 10
    assert len({len(r["breaches"]) for r in results}) >= 3
    assert len({r["risk"]["band"] for r in results}) >= 3


def test_phone_targets_get_a_phone_profile_and_others_none():
    profile = final_result("+33612345678", "phone")["phone_profile"]
    assert profile == {"e164": "+33612345678", "country_code": 33, "region": "FR", "carrier": "SFR",
                       "line_type": "mobile", "valid": True, "timezones": ["Europe/Paris"]}
    assert final_result("+447700900123", "phone")["phone_profile"]["region"] == "GB"
    assert final_result("erin@example.com")["phone_profile"] is None
    assert final_result("erin_h", "username")["phone_profile"] is None


@pytest.mark.parametrize("kind,make", [("email", "person{}@example.com"), ("phone", "+4420794601{:02d}"),
                                       ("username", "handle_{}")])
def test_results_are_clean_and_their_reasons_add_up(kind, make):
    """What the normaliser does to a sandbox result is only E6's reshaping: no repair, and the
    reasons are never dropped (they add up to the score and name real items)."""
    targets = [make.format(i) for i in range(40)]
    # Including targets whose simulator result is deliberately messy.
    assert any(messiness_of(kind, t) for t in targets)
    for target in targets:
        raw = sandbox.engine_result(kind, target)
        result = normalize_result(raw, kind)
        assert {k: result[k] for k in ("counts", "profiles", "contacts", "breaches", "ai_summary")} == \
            {k: raw[k] for k in ("counts", "profiles", "contacts", "breaches", "ai_summary")}
        assert result["risk"]["score"] == raw["risk"]["score"]
        assert len(result["risk"]["reasons"]) == len(raw["risk"]["reasons"]) >= (1 if raw["risk"]["score"] else 0)
        assert sum(r["points"] for r in result["risk"]["reasons"]) == result["risk"]["score"]
        assert all(f["source_ids"] for f in result["findings"])  # every item has a source behind it
        assert result["partial"] is False


def test_artifacts_are_absolute_https_urls_on_a_reserved_fake_host():
    artifacts = final_result("frank@example.com")["artifacts"]
    assert artifacts["pdf"].startswith("https://sandbox.invalid/artifacts/") and artifacts["pdf"].endswith(".pdf")
    assert artifacts["person_card"].endswith(".card.json")
    assert "frank" not in artifacts["pdf"]
    assert artifacts != sandbox.result("email", "grace@example.com")["artifacts"]


def _simulated(target, kind):
    """The bundled simulator's final result for a target, over its HTTP API."""
    client = create_sim_app({"ENGINE_TOKEN": "", "SIM_TIME_SCALE": 0.01}).test_client()
    with freeze_time(START) as frozen:
        submission = client.post("/v1/investigations", json={"target": target, "kind": kind, "reference": "s"})
        frozen.tick(submission.get_json()["eta_seconds"] + 1)
        state = client.get(f"/v1/investigations/{submission.get_json()['id']}").get_json()
    assert state["status"] == "done"
    return state["result"]


def _but_artifacts(result):
    return {k: v for k, v in result.items() if k != "artifacts"}


def test_the_simulator_and_the_sandbox_give_identical_results_for_a_target():
    target = next(f"twin{i}@example.com" for i in range(50) if messiness_of("email", f"twin{i}@example.com") is None)
    simulated, sandboxed = _simulated(target, "email"), final_result(target)
    assert _but_times(_but_artifacts(simulated)) == _but_times(_but_artifacts(sandboxed))
    assert simulated["breaches"] or simulated["profiles"]["verified"]  # a result with substance


def test_the_sandbox_result_is_the_simulators_once_the_service_has_normalised_it():
    """For a phone, and for a target whose simulated result is messy (but repairable)."""
    messy = next(f"messy{i}@example.com" for i in range(200)
                 if messiness_of("email", f"messy{i}@example.com") in ("full_date", "no_band", "extra_field"))
    for target, kind in (("+14155552671", "phone"), (messy, "email")):
        simulated = normalize_result(_simulated(target, kind), kind)
        sandboxed = normalize_result(final_result(target, kind), kind)
        assert _but_times(_but_artifacts(simulated)) == _but_times(_but_artifacts(sandboxed))


@pytest.mark.parametrize("target,kind", [("partial.kim@example.com", "email"), ("+447700907777", "phone"),
                                         ("partial_lee", "username")])
def test_partial_targets_end_done_with_some_sources_failed(target, kind):
    result = normalize_result(final_result(target, kind), kind)
    failed = [s for s in result["sources"] if s["status"] in ("rate_limited", "timeout")]
    assert 2 <= len(failed) <= 3
    assert result["partial"] is True and result["coverage"]["failed"] == len(failed)
    assert 10 <= len(result["sources"]) <= 20
    assert not {s["id"] for s in failed} & {i for f in result["findings"] for i in f["source_ids"]}


def test_a_rerun_of_the_failed_sources_runs_those_only_and_none_fails():
    first = normalize_result(final_result("partial.kim@example.com"), "email")
    failed = [s["id"] for s in first["sources"] if s["status"] in ("rate_limited", "timeout")]
    with freeze_time(START) as frozen:
        engine_id = sandbox.submit("partial.kim@example.com", "email", "scn_test", sources=failed)["id"]
        frozen.tick(sandbox.SLOW_SECONDS)
        rerun = normalize_result(sandbox.status(engine_id)["result"], "email")
    assert [s["id"] for s in rerun["sources"]] == failed
    assert rerun["partial"] is False and rerun["coverage"]["checked"] == len(failed)


# --- setting ------------------------------------------------------------------------------

def test_sandbox_scan_seconds_defaults_to_five_and_reads_the_environment():
    assert load_settings({})["SANDBOX_SCAN_SECONDS"] == 5.0
    assert load_settings({"SANDBOX_SCAN_SECONDS": "0.5"})["SANDBOX_SCAN_SECONDS"] == 0.5


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "nan", "inf"])
def test_a_bad_sandbox_scan_seconds_is_refused_in_one_line(raw):
    with pytest.raises(ConfigError, match="SANDBOX_SCAN_SECONDS") as exc:
        load_settings({"SANDBOX_SCAN_SECONDS": raw})
    assert "\n" not in str(exc.value)



def test_a_target_with_a_deliberately_high_simulated_score_keeps_its_true_score_in_the_sandbox():
    """The simulator adds 100 to some scores for the service to clamp; the sandbox never does."""
    target = next(f"high{i}@example.com" for i in range(400)
                  if messiness_of("email", f"high{i}@example.com") == "high_score")
    simulated, sandboxed = _simulated(target, "email"), final_result(target)
    assert simulated["risk"]["score"] > 100
    assert sandboxed["risk"]["score"] == simulated["risk"]["score"] - 100
