"""The simulated engine's HTTP API (E1, E3): submission, progress, conventions, controls."""
import base64
import json
import math

import pytest
from freezegun import freeze_time

from simulator.app import create_sim_app
from simulator.investigations import decode_id

START = "2025-03-01 12:00:00"




def submit(client, target, kind="email", reference="scan_1", **kwargs):
    return client.post("/v1/investigations", json={"target": target, "kind": kind, "reference": reference}, **kwargs)


def status_of(client, engine_id, **kwargs):
    response = client.get(f"/v1/investigations/{engine_id}", **kwargs)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def run_to_end(client, target, kind="email", after_eta=1.0):
    """Submit under a frozen clock, jump past the eta, return (submission, final status)."""
    with freeze_time(START) as frozen:
        submission = submit(client, target, kind).get_json()
        frozen.tick(submission["eta_seconds"] + after_eta)
        return submission, status_of(client, submission["id"])


# --- submission ----------------------------------------------------------------------------

def test_submit_answers_201_with_id_recipes_and_eta(client):
    response = submit(client, "alice@example.com")
    body = response.get_json()
    assert response.status_code == 201
    assert set(body) == {"id", "recipes", "eta_seconds"}
    assert body["id"].startswith("inv_")
    assert 4 <= body["recipes"] <= 12
    assert 60 <= body["eta_seconds"] <= 180


def test_two_submissions_of_one_target_get_distinct_ids_and_the_same_plan(client):
    first, second = (submit(client, "alice@example.com").get_json() for _ in range(2))
    assert first["id"] != second["id"]
    assert (first["recipes"], first["eta_seconds"]) == (second["recipes"], second["eta_seconds"])


def test_plans_vary_between_targets(client):
    plans = {tuple(submit(client, f"user{i}@example.com").get_json()[k] for k in ("recipes", "eta_seconds"))
             for i in range(30)}
    assert len(plans) > 10


@pytest.mark.parametrize("body", [
    {"target": "alice@example.com"},
    {"target": "alice@example.com", "kind": "fax"},
    {"target": "", "kind": "email"},
    {"target": 42, "kind": "email"},
    {"target": "alice@example.com", "kind": "email", "reference": 7},
    ["not", "an", "object"],
])
def test_bad_submission_bodies_answer_400_json(client, body):
    response = client.post("/v1/investigations", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "invalid_request"


def test_non_json_body_answers_400_json(client):
    response = client.post("/v1/investigations", data="target=x", content_type="text/plain")
    assert response.status_code == 400
    assert response.is_json


# --- batch ---------------------------------------------------------------------------------

def test_batch_answers_items_in_request_order(client):
    items = [
        {"target": "carol@example.com", "kind": "email", "reference": "a"},
        {"target": "+14155552671", "kind": "phone", "reference": "b"},
        {"target": "dave_99", "kind": "username", "reference": "c"},
    ]
    response = client.post("/v1/investigations/batch", json={"items": items})
    assert response.status_code == 201
    answered = response.get_json()["items"]
    assert [(decode_id(a["id"]).kind, decode_id(a["id"]).target) for a in answered] == \
        [(i["kind"], i["target"]) for i in items]
    singles = [submit(client, i["target"], i["kind"]).get_json() for i in items]
    assert [a["recipes"] for a in answered] == [s["recipes"] for s in singles]


def test_batch_outcomes_follow_the_request_order(client):
    items = [{"target": t, "kind": "phone", "reference": t} for t in ("+14155556666", "+14155550000", "+14155552671")]
    with freeze_time(START) as frozen:
        answered = client.post("/v1/investigations/batch", json={"items": items}).get_json()["items"]
        frozen.tick(max(a["eta_seconds"] for a in answered) + 1)
        statuses = [status_of(client, a["id"]) for a in answered]
    assert [s["status"] for s in statuses] == ["done", "error", "done"]
    assert statuses[0]["result"] == "not an object"
    assert statuses[2]["result"]["phone_profile"]["e164"] == "+14155552671"


@pytest.mark.parametrize("count", [0, 101])
def test_batch_size_outside_1_to_100_answers_400(client, count):
    items = [{"target": f"u{i}@example.com", "kind": "email", "reference": str(i)} for i in range(count)]
    response = client.post("/v1/investigations/batch", json={"items": items})
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "invalid_request"


def test_batch_of_100_is_accepted(client):
    items = [{"target": f"u{i}@example.com", "kind": "email", "reference": str(i)} for i in range(100)]
    response = client.post("/v1/investigations/batch", json={"items": items})
    assert response.status_code == 201
    assert len(response.get_json()["items"]) == 100


def test_batch_with_one_bad_item_is_refused_whole_naming_the_item(client):
    items = [{"target": "ok@example.com", "kind": "email", "reference": "a"}, {"target": "x", "kind": "fax"}]
    response = client.post("/v1/investigations/batch", json={"items": items})
    assert response.status_code == 400
    assert "items[1]" in response.get_json()["error"]["message"]


# --- progress ------------------------------------------------------------------------------

def test_status_goes_pending_then_running_then_done(client):
    with freeze_time(START) as frozen:
        submission = submit(client, "alice@example.com").get_json()
        eta, total = submission["eta_seconds"], submission["recipes"]
        frozen.tick(1)
        pending = status_of(client, submission["id"])
        frozen.tick(eta * 0.3)
        early = status_of(client, submission["id"])
        frozen.tick(eta * 0.4)
        later = status_of(client, submission["id"])
        frozen.tick(eta)
        done = status_of(client, submission["id"])

    assert pending == {"id": submission["id"], "status": "pending", "recipes_total": total,
                       "recipes_done": 0, "result": None, "error": None}
    assert early["status"] == later["status"] == "running"
    assert early["result"] is None and early["error"] is None
    assert 0 < early["recipes_done"] < later["recipes_done"] < total
    assert done["status"] == "done"
    assert done["recipes_done"] == done["recipes_total"] == total
    assert isinstance(done["result"], dict) and done["error"] is None


def test_status_answers_the_same_after_a_restart(monkeypatch):
    """Ids carry their own state: a fresh app (a restarted simulator) knows them."""
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    with freeze_time(START) as frozen:
        submission = submit(create_sim_app().test_client(), "bob@example.com").get_json()
        frozen.tick(submission["eta_seconds"] + 1)
        first = status_of(create_sim_app().test_client(), submission["id"])
        second = status_of(create_sim_app().test_client(), submission["id"])
    assert first["status"] == "done"
    assert first == second


def test_results_of_the_same_target_are_equal_but_for_artifacts(client):
    results = [run_to_end(client, "erin@example.com")[1]["result"] for _ in range(2)]
    artifacts = [r.pop("artifacts") for r in results]
    assert results[0] == results[1]
    assert artifacts[0]["pdf"] != artifacts[1]["pdf"]


@pytest.mark.parametrize("bad_id", [
    "nope",
    "inv_%%%",
    "inv_" + base64.urlsafe_b64encode(b"not json").decode().rstrip("="),
    "inv_" + base64.urlsafe_b64encode(json.dumps({"k": "fax", "t": "x", "c": 1}).encode()).decode().rstrip("="),
    "inv_" + base64.urlsafe_b64encode(json.dumps({"k": "email", "t": "x", "c": "soon"}).encode()).decode().rstrip("="),
])
def test_undecodable_ids_answer_404_json(client, bad_id):
    response = client.get(f"/v1/investigations/{bad_id}")
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


# --- target conventions --------------------------------------------------------------------

@pytest.mark.parametrize("target,kind", [
    ("fail.alice@example.com", "email"),
    ("FAILING", "username"),
    ("@failbot", "username"),
    ("+14155550000", "phone"),
])
def test_fail_targets_end_in_engine_failed_error(client, target, kind):
    with freeze_time(START) as frozen:
        submission = submit(client, target, kind).get_json()
        frozen.tick(submission["eta_seconds"] / 2)
        midway = status_of(client, submission["id"])
        frozen.tick(submission["eta_seconds"])
        final = status_of(client, submission["id"])
    assert midway["status"] == "running"
    assert final["status"] == "error"
    assert final["result"] is None
    assert final["error"]["code"] == "engine_failed" and final["error"]["message"]
    assert final["recipes_done"] < final["recipes_total"]


@pytest.mark.parametrize("target,kind", [
    ("slow.bob@example.com", "email"),
    ("slowpoke", "username"),
    ("@slowpoke", "username"),
    ("+447700909999", "phone"),
])
def test_slow_targets_take_the_longest_duration(client, target, kind):
    submission = submit(client, target, kind).get_json()
    assert submission["eta_seconds"] == 180
    with freeze_time(START) as frozen:
        submission = submit(client, target, kind).get_json()
        frozen.tick(179)
        assert status_of(client, submission["id"])["status"] == "running"
        frozen.tick(2)
        assert status_of(client, submission["id"])["status"] == "done"


def test_ordinary_targets_are_shorter_than_slow_ones_on_the_whole(client):
    etas = [submit(client, f"person{i}@example.com").get_json()["eta_seconds"] for i in range(20)]
    assert all(60 <= eta <= 180 for eta in etas)
    assert sum(etas) / len(etas) < 170


@pytest.mark.parametrize("target,kind", [("hang.carl@example.com", "email"), ("hangman", "username"),
                                         ("+14155558888", "phone")])
def test_hang_targets_stay_running_for_ever(client, target, kind):
    submission, final = run_to_end(client, target, kind, after_eta=10 * 180)
    assert final["status"] == "running"
    assert final["recipes_done"] == final["recipes_total"] - 1
    assert final["result"] is None and final["error"] is None


@pytest.mark.parametrize("target,kind", [("junk.dan@example.com", "email"), ("junkyard", "username"),
                                         ("+14155556666", "phone")])
def test_junk_targets_end_done_with_an_invalid_result(client, target, kind):
    _, final = run_to_end(client, target, kind)
    assert final["status"] == "done"
    assert final["result"] == "not an object"


def test_markers_elsewhere_in_the_target_do_not_count(client):
    # "fail" in the domain, "0000" in the middle of the number: ordinary targets.
    for target, kind in (("alice@fail.example", "email"), ("+14150000671", "phone"), ("notfail", "username")):
        _, final = run_to_end(client, target, kind)
        assert final["status"] == "done" and isinstance(final["result"], dict), target


# --- time scale ----------------------------------------------------------------------------

def test_time_scale_from_config_shortens_durations(monkeypatch):
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    scaled = create_sim_app({"SIM_TIME_SCALE": 0.01}).test_client()
    assert submit(scaled, "slow@example.com").get_json()["eta_seconds"] == math.ceil(180 * 0.01)
    with freeze_time(START) as frozen:
        submission = submit(scaled, "alice@example.com").get_json()
        frozen.tick(1.9)
        assert status_of(scaled, submission["id"])["status"] == "done"


def test_time_scale_from_environment(monkeypatch):
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    monkeypatch.setenv("SIM_TIME_SCALE", "0.5")
    assert submit(create_sim_app().test_client(), "slow@example.com").get_json()["eta_seconds"] == 90


def test_negative_time_scale_is_refused():
    with pytest.raises(ValueError):
        create_sim_app({"SIM_TIME_SCALE": -1})


# --- artifacts -----------------------------------------------------------------------------

def test_artifact_urls_are_absolute_and_served(client):
    _, final = run_to_end(client, "frank@example.com")
    artifacts = final["result"]["artifacts"]
    assert artifacts["pdf"] == f"http://localhost/_sim/artifacts/{final['id']}.pdf"
    pdf = client.get(artifacts["pdf"].removeprefix("http://localhost"))
    assert pdf.status_code == 200 and pdf.mimetype == "application/pdf"
    assert pdf.data.startswith(b"%PDF-1.4") and pdf.data.rstrip().endswith(b"%%EOF")
    card = client.get(artifacts["person_card"].removeprefix("http://localhost")).get_json()
    assert card["target"] == "frank@example.com" and card["risk"] == final["result"]["risk"]


def test_artifact_of_unknown_id_is_404_json(client):
    response = client.get("/_sim/artifacts/nope.pdf")
    assert response.status_code == 404 and response.is_json


# --- auth ----------------------------------------------------------------------------------

def test_token_is_required_when_configured(monkeypatch):
    monkeypatch.delenv("SIM_TIME_SCALE", raising=False)
    client = create_sim_app({"ENGINE_TOKEN": "s3cret"}).test_client()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"},
                    {"Authorization": "s3cret"}):
        response = submit(client, "alice@example.com", headers=headers)
        assert response.status_code == 401, headers
        assert response.get_json()["error"]["code"] == "unauthorized"
    good = {"Authorization": "Bearer s3cret"}
    submission = submit(client, "alice@example.com", headers=good)
    assert submission.status_code == 201
    engine_id = submission.get_json()["id"]
    assert client.get(f"/v1/investigations/{engine_id}").status_code == 401
    assert client.get(f"/v1/investigations/{engine_id}", headers=good).status_code == 200
    batch = {"items": [{"target": "a@example.com", "kind": "email", "reference": "r"}]}
    assert client.post("/v1/investigations/batch", json=batch).status_code == 401
    assert client.post("/v1/investigations/batch", json=batch, headers=good).status_code == 201
    # Controls stay open.
    assert client.get("/_sim/engine/stats").status_code == 200


def test_token_from_environment(monkeypatch):
    monkeypatch.setenv("ENGINE_TOKEN", "from-env")
    client = create_sim_app().test_client()
    assert submit(client, "alice@example.com").status_code == 401
    assert submit(client, "alice@example.com", headers={"Authorization": "Bearer from-env"}).status_code == 201


def test_no_token_configured_means_no_check(client):
    assert submit(client, "alice@example.com").status_code == 201
    assert submit(client, "alice@example.com", headers={"Authorization": "Bearer anything"}).status_code == 201


# --- modes and stats -----------------------------------------------------------------------

def set_mode(client, **body):
    response = client.post("/_sim/engine/mode", json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_down_mode_answers_503_to_every_engine_call(client):
    engine_id = submit(client, "alice@example.com").get_json()["id"]
    assert set_mode(client, mode="down") == {"mode": "down", "every": None, "batch_look": True, "deletion": True,
                                                           "sources_listing": True}
    batch = {"items": [{"target": "a@example.com", "kind": "email", "reference": "r"}]}
    for response in (submit(client, "bob@example.com"), client.get(f"/v1/investigations/{engine_id}"),
                     client.post("/v1/investigations/batch", json=batch)):
        assert response.status_code == 503
        assert response.get_json()["error"]["code"] == "engine_unavailable"
    assert client.get("/_sim/engine/mode").get_json() == {"mode": "down", "every": None, "batch_look": True, "deletion": True,
                                                           "sources_listing": True}
    set_mode(client, mode="up")
    assert submit(client, "bob@example.com").status_code == 201


def test_flaky_mode_fails_every_nth_call(client):
    assert set_mode(client, mode="flaky", every=3) == {"mode": "flaky", "every": 3, "batch_look": True, "deletion": True,
                                                           "sources_listing": True}
    codes = [submit(client, f"u{i}@example.com").status_code for i in range(7)]
    assert codes == [201, 201, 500, 201, 201, 500, 201]
    set_mode(client, mode="up")
    assert [submit(client, "x@example.com").status_code for _ in range(4)] == [201] * 4


def test_flaky_mode_error_is_json(client):
    set_mode(client, mode="flaky", every=1)
    response = submit(client, "alice@example.com")
    assert response.status_code == 500
    assert response.get_json()["error"]["code"] == "engine_flaky"


@pytest.mark.parametrize("body", [{"mode": "sideways"}, {"mode": "flaky"}, {"mode": "flaky", "every": 0},
                                  {"mode": "flaky", "every": "2"}, {}])
def test_bad_mode_requests_answer_400(client, body):
    response = client.post("/_sim/engine/mode", json=body)
    assert response.status_code == 400 and response.is_json
    assert client.get("/_sim/engine/mode").get_json()["mode"] == "up"


def test_stats_count_calls_by_endpoint_including_refused_ones(client):
    engine_id = submit(client, "alice@example.com").get_json()["id"]
    submit(client, "bob@example.com")
    client.get(f"/v1/investigations/{engine_id}")
    client.post("/v1/investigations/batch", json={"items": [{"target": "c@example.com", "kind": "email"}]})
    set_mode(client, mode="down")
    client.get(f"/v1/investigations/{engine_id}")
    assert client.get("/_sim/engine/stats").get_json() == {"submit": 2, "batch": 1, "status": 2, "looks": 0,
                                                               "deletes": 0, "total": 5}


def test_reset_restores_up_mode_and_zero_stats(client):
    submit(client, "alice@example.com")
    set_mode(client, mode="down")
    response = client.post("/_sim/engine/reset")
    assert response.status_code == 200
    assert client.get("/_sim/engine/mode").get_json() == {"mode": "up", "every": None, "batch_look": True, "deletion": True,
                                                           "sources_listing": True}
    assert client.get("/_sim/engine/stats").get_json() == {"submit": 0, "batch": 0, "status": 0, "looks": 0,
                                                               "deletes": 0, "total": 0}
    assert submit(client, "alice@example.com").status_code == 201


def test_each_app_has_its_own_mode(client):
    set_mode(client, mode="down")
    other = create_sim_app().test_client()
    assert submit(other, "alice@example.com").status_code == 201


def test_unknown_paths_and_methods_answer_json(client):
    missing = client.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "not_found"
    wrong_method = client.delete("/v1/investigations")
    assert wrong_method.status_code == 405 and wrong_method.is_json
    assert "POST" in wrong_method.headers["Allow"]


# --- E6: re-run submissions and the batch look ------------------------------------------------

def test_a_submission_with_sources_runs_those_only(client):
    with freeze_time(START) as frozen:
        answer = client.post("/v1/investigations", json={"target": "partial.ann@example.com", "kind": "email",
                                                         "reference": "r", "sources": ["github", "breach_index"]})
        assert answer.status_code == 201
        frozen.tick(answer.get_json()["eta_seconds"] + 1)
        result = status_of(client, answer.get_json()["id"])["result"]
    assert [s["id"] for s in result["sources"]] == ["breach_index", "github"]  # in the engine's order
    assert all(s["status"] not in ("rate_limited", "timeout") for s in result["sources"])
    assert all(s["checked_at"] and s["checked_at"].endswith("Z") for s in result["sources"])


@pytest.mark.parametrize("sources", [[], "github", [1], [""]])
def test_sources_that_are_not_a_list_of_ids_answer_400(client, sources):
    answer = client.post("/v1/investigations", json={"target": "ann@example.com", "kind": "email",
                                                     "reference": "r", "sources": sources})
    assert answer.status_code == 400


def test_the_batch_look_answers_each_id_as_the_single_look_in_order(client):
    with freeze_time(START) as frozen:
        ids = [submit(client, t, "email").get_json()["id"] for t in ("a@example.com", "fail.b@example.com")]
        frozen.tick(200)
        response = client.post("/v1/investigations/status", json={"ids": [ids[1], "inv_nope", ids[0]]})
        singles = [status_of(client, i) for i in ids]
    assert response.status_code == 200
    items = response.get_json()["items"]
    assert items[0] == singles[1] and items[2] == singles[0]
    assert items[1]["id"] == "inv_nope" and items[1]["status"] == "error"
    assert items[1]["error"]["code"] == "not_found"
    assert client.get("/_sim/engine/stats").get_json()["looks"] == 1


@pytest.mark.parametrize("ids", [[], ["x"] * 101, "inv_a", [1]])
def test_a_batch_look_outside_1_to_100_ids_answers_400(client, ids):
    assert client.post("/v1/investigations/status", json={"ids": ids}).status_code == 400


def test_volume_counts_submitted_investigations_and_ids_looked_at_in_batches(client):
    engine_id = submit(client, "alice@example.com").get_json()["id"]
    client.post("/v1/investigations/batch", json={"items": [{"target": f"{n}@example.com", "kind": "email"}
                                                            for n in "abc"]})
    client.post("/v1/investigations/status", json={"ids": [engine_id, "inv_nope"]})
    client.post("/v1/investigations/status", json={"ids": [engine_id]})
    client.get(f"/v1/investigations/{engine_id}")  # a single look is a call, not batch volume
    assert client.get("/_sim/engine/volume").get_json() == {"submitted": 4, "looked": 3}
    client.post("/_sim/engine/reset")
    assert client.get("/_sim/engine/volume").get_json() == {"submitted": 0, "looked": 0}


def test_an_id_looked_at_again_answers_its_progress_at_the_new_time(client):
    """The decoded ids the engine keeps must not freeze an investigation's answer."""
    with freeze_time(START) as frozen:
        engine_id = submit(client, "alice@example.com").get_json()
        frozen.tick(1)
        first = client.post("/v1/investigations/status", json={"ids": [engine_id["id"]]}).get_json()["items"][0]
        frozen.tick(engine_id["eta_seconds"] + 1)
        again = client.post("/v1/investigations/status", json={"ids": [engine_id["id"]]}).get_json()["items"][0]
        single = status_of(client, engine_id["id"])
    assert first["status"] in ("pending", "running") and first["result"] is None
    assert again == single and again["status"] == "done" and again["result"] is not None
