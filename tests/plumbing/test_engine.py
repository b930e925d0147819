"""engine: the investigation engine's HTTP client (E1), against the simulator over real HTTP.
Any failure (down, wrong token, unreachable, refused input, unknown id) is an EngineError."""
import pytest

from app.plumbing import engine, runtime
from app.plumbing.engine import EngineError
from tests.api.helpers import engine_mode, engine_stats


def test_submit_answers_an_id_recipes_and_an_eta(app, simulator):
    answer = engine.submit("jane@example.com", "email", "scn_ref")
    assert set(answer) == {"id", "recipes", "eta_seconds", "callbacks"}
    assert answer["callbacks"] is False  # no ENGINE_CALLBACK_URL: no callback asked for (E7)
    assert isinstance(answer["id"], str) and answer["id"]
    assert answer["recipes"] > 0 and answer["eta_seconds"] >= 0
    assert engine_stats(simulator)["submit"] == 1


def test_status_answers_for_the_id_the_engine_gave(app):
    answer = engine.submit("+14155552671", "phone", "scn_ref")
    state = engine.status(answer["id"])
    assert state["id"] == answer["id"]
    assert state["status"] in {"pending", "running", "done"}
    assert state["recipes_total"] == answer["recipes"]


def test_a_batch_is_answered_in_request_order(app, simulator):
    items = [{"target": "a@example.com", "kind": "email", "reference": "scn_1"},
             {"target": "jane_doe", "kind": "username", "reference": "scn_2"}]
    answers = engine.submit_batch(items)
    assert len(answers) == 2 and answers[0]["id"] != answers[1]["id"]
    assert [engine.status(a["id"])["recipes_total"] for a in answers] == [a["recipes"] for a in answers]
    assert engine_stats(simulator)["batch"] == 1


@pytest.mark.parametrize("mode", ["down", "flaky"])
def test_an_engine_that_fails_is_an_engine_error(app, simulator, mode):
    engine_mode(simulator, mode, **({"every": 1} if mode == "flaky" else {}))
    with pytest.raises(EngineError, match="HTTP 50"):
        engine.submit("jane@example.com", "email", "scn_ref")
    with pytest.raises(EngineError):
        engine.submit_batch([{"target": "jane@example.com", "kind": "email", "reference": "scn_ref"}])


def test_a_wrong_token_is_an_engine_error(app, monkeypatch):
    monkeypatch.setitem(runtime.config, "ENGINE_TOKEN", "not-the-token")
    with pytest.raises(EngineError, match="HTTP 401"):
        engine.submit("jane@example.com", "email", "scn_ref")


def test_an_engine_that_cannot_be_reached_is_an_engine_error(app, monkeypatch):
    monkeypatch.setitem(runtime.config, "ENGINE_URL", "http://127.0.0.1:1")  # nothing listens there
    with pytest.raises(EngineError, match="ConnectionError"):
        engine.status("inv_anything")


def test_input_the_engine_refuses_is_an_engine_error(app):
    with pytest.raises(EngineError, match="HTTP 400"):
        engine.submit("jane@example.com", "fax", "scn_ref")


@pytest.mark.parametrize("engine_id", ["inv_unknown", "../../_sim/engine/reset", "a/b"])
def test_an_id_the_engine_does_not_know_is_an_engine_error_and_stays_in_its_path(app, simulator, engine_id):
    engine_mode(simulator, "up")
    with pytest.raises(EngineError, match="HTTP 404"):
        engine.status(engine_id)


def test_a_failed_look_names_no_engine_id(app, simulator):
    """An engine id may encode its target (the simulator's do): errors, which are logged, name the call."""
    answer = engine.submit("jane@example.com", "email", "scn_ref")
    engine_mode(simulator, "down")
    with pytest.raises(EngineError) as failed:
        engine.status(answer["id"])
    assert answer["id"] not in str(failed.value) and "/v1/investigations/<id>" in str(failed.value)


def test_the_batch_look_answers_each_id_in_order_or_says_it_is_not_offered(app, simulator):
    first, second = (engine.submit(t, "email", "scn_ref")["id"] for t in ("a@example.com", "b@example.com"))
    items = engine.status_batch([second, "inv_unknown", first])
    assert [i["id"] for i in items] == [second, "inv_unknown", first]
    assert items[1]["status"] == "error" and items[1]["error"]["code"] == "not_found"
    engine_mode(simulator, "up", batch_look=False)
    with pytest.raises(engine.BatchLookUnsupported):
        engine.status_batch([first])
