"""The simulated engine's callbacks (E7), over real HTTP to one of the simulator's receivers, their
signatures checked with the standardwebhooks library."""
import threading
import time

import pytest
import requests
from standardwebhooks.webhooks import Webhook
from werkzeug.serving import make_server

from app.simulated.conventions import FAIL, HANG, NORMAL, Plan, Progress
from simulator.app import create_sim_app
from simulator.callbacks import changes

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FIELDS = {"id", "reference", "status", "recipes_done", "recipes_total"}


def serve(app):
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_port}"


@pytest.fixture
def sim(monkeypatch):
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    httpd, url = serve(create_sim_app({"SIM_TIME_SCALE": 0.01, "ENGINE_CALLBACK_SECRET": SECRET}))
    yield url
    httpd.shutdown()


def receiver(sim, name, responses=(200,)):
    requests.post(f"{sim}/_sim/receivers/{name}", json={"secret": SECRET, "responses": list(responses)},
                  timeout=5).raise_for_status()
    return f"{sim}/_sim/hooks/{name}", lambda: requests.get(f"{sim}/_sim/receivers/{name}/deliveries",
                                                             timeout=5).json()["deliveries"]


def wait_for(check, seconds=15.0):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)  # polling the receiver: the simulator's clock runs in another thread


def test_the_changes_of_a_plan_are_each_status_and_recipe_once():
    normal = changes(Plan(duration_s=100, recipes=4, behaviour=NORMAL))
    assert [p for _, p in normal] == [Progress("running", 0), Progress("running", 1), Progress("running", 2),
                                      Progress("running", 3), Progress("done", 4)]
    assert [round(t, 2) for t, _ in normal] == [5.0, 28.75, 52.5, 76.25, 100]
    assert [p for _, p in changes(Plan(100, 4, FAIL))][-1] == Progress("error", 3)
    assert [p for _, p in changes(Plan(100, 4, HANG))][-1] == Progress("running", 3)  # then never again


def test_a_submission_with_a_callback_url_is_called_back_at_each_change_signed(sim):
    url, received = receiver(sim, "engine-callbacks")
    answer = requests.post(f"{sim}/v1/investigations", timeout=5, json={
        "target": "jane@example.com", "kind": "email", "reference": "scn_1", "callback_url": url}).json()
    assert answer["callbacks"] is True
    wait_for(lambda: any(d["body"].find('"done"') > 0 for d in received()))
    deliveries = received()
    verifier = Webhook(SECRET)
    bodies = [verifier.verify(d["body"], d["headers"]) for d in deliveries]  # raises on a bad signature
    assert all(set(body) == FIELDS for body in bodies)  # never the result
    assert {(b["id"], b["reference"], b["recipes_total"]) for b in bodies} == {(answer["id"], "scn_1",
                                                                                answer["recipes"])}
    assert [(b["status"], b["recipes_done"]) for b in bodies] == \
        [("running", n) for n in range(answer["recipes"])] + [("done", answer["recipes"])]
    assert len({d["headers"]["Webhook-Id"] for d in deliveries}) == len(deliveries)
    final = requests.get(f"{sim}/v1/investigations/{answer['id']}", timeout=5).json()
    assert (final["status"], final["recipes_done"]) == (bodies[-1]["status"], bodies[-1]["recipes_done"])


def test_batch_items_are_called_back_each_and_items_without_a_url_are_not(sim):
    url, received = receiver(sim, "batch-callbacks")
    items = requests.post(f"{sim}/v1/investigations/batch", timeout=5, json={"items": [
        {"target": "a@example.com", "kind": "email", "reference": "scn_a", "callback_url": url},
        {"target": "b@example.com", "kind": "email", "reference": "scn_b"}]}).json()["items"]
    assert [item.get("callbacks") for item in items] == [True, None]
    wait_for(lambda: requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()["scheduled"] == 0)
    assert {Webhook(SECRET).verify(d["body"], d["headers"])["reference"] for d in received()} == {"scn_a"}


def test_dropped_callbacks_are_never_sent_and_a_reset_sends_again(sim):
    url, received = receiver(sim, "lost-callbacks")
    assert requests.post(f"{sim}/_sim/engine/callbacks", json={"drop": True}, timeout=5).json()["drop"] is True
    requests.post(f"{sim}/v1/investigations", timeout=5,
                  json={"target": "c@example.com", "kind": "email", "callback_url": url})
    wait_for(lambda: requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()["scheduled"] == 0)
    state = requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()
    assert received() == [] and state["dropped"] > 0 and state["sent"] == 0
    requests.post(f"{sim}/_sim/engine/reset", timeout=5)
    assert requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json() == {
        "drop": False, "scheduled": 0, "sent": 0, "failed": 0, "dropped": 0, "retried": 0}
    assert requests.post(f"{sim}/_sim/engine/callbacks", json={"drop": "yes"}, timeout=5).status_code == 400


def test_a_deleted_investigation_calls_back_no_more_and_no_secret_means_no_promise(sim, monkeypatch):
    url, received = receiver(sim, "deleted-callbacks")
    answer = requests.post(f"{sim}/v1/investigations", timeout=5, json={
        "target": "slow.d@example.com", "kind": "email", "callback_url": url}).json()
    assert requests.delete(f"{sim}/v1/investigations/{answer['id']}", timeout=5).status_code == 204
    wait_for(lambda: requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()["scheduled"] == 0)
    # The first change comes 0.09 s after submission: on a busy machine it may beat the deletion.
    statuses = [Webhook(SECRET).verify(d["body"], d["headers"])["status"] for d in received()]
    assert len(statuses) < answer["recipes"] and "done" not in statuses
    monkeypatch.delenv("ENGINE_CALLBACK_SECRET", raising=False)
    httpd, plain = serve(create_sim_app({"SIM_TIME_SCALE": 0.01}))
    try:
        answer = requests.post(f"{plain}/v1/investigations", timeout=5, json={
            "target": "e@example.com", "kind": "email", "callback_url": url}).json()
        assert "callbacks" not in answer
        bad = requests.post(f"{plain}/v1/investigations", timeout=5, json={
            "target": "e@example.com", "kind": "email", "callback_url": "ftp://x"})
        assert bad.status_code == 400
    finally:
        httpd.shutdown()


def test_a_callback_answered_503_with_retry_after_is_sent_again_then_counted_sent(sim):
    url, received = receiver(sim, "busy-callbacks", responses=(503, 200))  # the first answer asks for a retry
    requests.post(f"{sim}/v1/investigations", timeout=5,
                  json={"target": "d@example.com", "kind": "email", "callback_url": url})
    wait_for(lambda: requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()["scheduled"] == 0)
    state = requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()
    bodies = [Webhook(SECRET).verify(d["body"], d["headers"]) for d in received()]
    assert state["retried"] == 1 and state["failed"] == 0
    assert bodies.count(bodies[0]) == 2 and len(bodies) == state["sent"] + 1  # the first one again (in any order)
