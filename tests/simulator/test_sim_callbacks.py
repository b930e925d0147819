"""The simulated engine's callbacks (E7), over real HTTP to one of the simulator's receivers (or to
``Receiver``, one that can hold a callback unanswered), their signatures checked with the
standardwebhooks library."""
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from standardwebhooks.webhooks import Webhook
from werkzeug.serving import make_server

from app.tracking.simulated.conventions import FAIL, HANG, NORMAL, Plan, Progress
from simulator import callbacks
from simulator.app import create_sim_app
from simulator.callbacks import CallbackSender, changes
from simulator.investigations import plan_for

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FIELDS = {"id", "reference", "status", "recipes_done", "recipes_total"}


def serve(app):
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_port}"


@pytest.fixture
def sim_with(monkeypatch):
    """``sim_with(senders)``: a simulator (time scale 0.01) with that many callback senders."""
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    servers = []

    def start(senders: int = callbacks.DEFAULT_SENDERS) -> str:
        httpd, url = serve(create_sim_app({"SIM_TIME_SCALE": 0.01, "ENGINE_CALLBACK_SECRET": SECRET,
                                           "SIM_CALLBACK_SENDERS": senders}))
        servers.append(httpd)
        return url

    yield start
    for httpd in servers:
        httpd.shutdown()


@pytest.fixture
def sim(sim_with):
    return sim_with()


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
        "drop": False, "scheduled": 0, "sent": 0, "failed": 0, "dropped": 0, "retried": 0, "superseded": 0}
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


def test_a_callback_answered_503_is_sent_again_with_the_newest_state_then_counted_sent(sim):
    url, received = receiver(sim, "busy-callbacks", responses=(503, 200))  # the first answer asks for a retry
    answer = requests.post(f"{sim}/v1/investigations", timeout=5,
                           json={"target": "d@example.com", "kind": "email", "callback_url": url}).json()
    wait_for(lambda: callback_state(sim)["scheduled"] == 0)
    state = callback_state(sim)
    bodies = [progress(Webhook(SECRET).verify(d["body"], d["headers"])) for d in received()]
    assert state["retried"] == 1 and state["failed"] == 0 and len(bodies) == state["sent"] + 1
    # Sent again 1 s later (no Retry-After), when this 0.99 s investigation is done: its newest state,
    # the changes in between superseded, and nothing after the final.
    assert bodies[0] == ("running", 0) and bodies[1:] == [("done", answer["recipes"])]
    assert state["sent"] + state["superseded"] == len(changes(plan_of("d@example.com"))) == answer["recipes"] + 1


def callback_state(sim) -> dict:
    return requests.get(f"{sim}/_sim/engine/callbacks", timeout=5).json()


def progress(body: dict) -> tuple[str, int]:
    return body["status"], body["recipes_done"]


def plan_of(target: str) -> Plan:
    return plan_for("email", target, 0.01)


def every_change(target: str) -> list[tuple[str, int]]:
    return [(p.status, p.recipes_done) for _, p in changes(plan_of(target))]


class Receiver:
    """A receiver on its own HTTP/1.1 server (connections kept alive), recording each callback
    (verified), its path and the client port it came from. A callback to a path under ``/hold``
    is held unanswered until ``release()``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict, int]] = []
        self.arrived = threading.Condition()
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = Webhook(SECRET).verify(raw, dict(self.headers.items()))  # raises on a bad signature
                with owner.arrived:
                    owner.calls.append((self.path, body, self.client_address[1]))
                    owner.arrived.notify_all()
                if self.path.startswith("/hold"):
                    owner.released.wait(30)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"

    def progress(self, path: str) -> list[tuple[str, int]]:
        with self.arrived:
            return [progress(body) for p, body, _ in self.calls if p == path]

    def wait(self, check, seconds: float = 15.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(check, timeout=seconds), "timed out"

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()


@pytest.fixture
def hooks():
    receiver = Receiver()
    yield receiver
    receiver.close()


def submit(sim, target: str, url: str) -> dict:
    return requests.post(f"{sim}/v1/investigations", timeout=5,
                         json={"target": target, "kind": "email", "callback_url": url}).json()


def wait_done(sim, engine_id: str) -> None:
    wait_for(lambda: requests.get(f"{sim}/v1/investigations/{engine_id}", timeout=5).json()["status"] == "done")


def test_a_receiver_that_does_not_answer_holds_up_only_the_sender_sending_to_it(sim_with, hooks, monkeypatch):
    monkeypatch.setattr(callbacks, "SEND_TIMEOUT_SECONDS", 30.0)  # held for the whole test, not retried
    sim = sim_with(2)
    submit(sim, "c@example.com", hooks.url("/hold"))
    hooks.wait(lambda: len(hooks.progress("/hold")) == 1)  # one sender now waits for an answer
    submit(sim, "jane@example.com", hooks.url("/ok"))
    hooks.wait(lambda: ("done", 9) in hooks.progress("/ok"))
    assert hooks.progress("/ok") == every_change("jane@example.com")  # on time: every change, in order
    assert hooks.progress("/hold") == [("running", 0)]  # still held
    hooks.release()
    # The held sender is far behind that investigation: it sends its newest state, the final.
    hooks.wait(lambda: ("done", 9) in hooks.progress("/hold"))
    assert hooks.progress("/hold") == [("running", 0), ("done", 9)]
    wait_for(lambda: callback_state(sim)["scheduled"] == 0)
    state = callback_state(sim)
    assert state["superseded"] == len(every_change("c@example.com")) - 2 and state["failed"] == 0


def test_a_sender_behind_sends_each_investigation_s_newest_state_only(sim_with, hooks, monkeypatch):
    monkeypatch.setattr(callbacks, "SEND_TIMEOUT_SECONDS", 30.0)
    sim = sim_with(1)
    held = submit(sim, "c@example.com", hooks.url("/hold"))
    hooks.wait(lambda: len(hooks.progress("/hold")) == 1)  # the only sender is held
    behind = submit(sim, "a@example.com", hooks.url("/ok"))
    for engine_id in (held["id"], behind["id"]):
        wait_done(sim, engine_id)  # all their changes are due while the sender is held
    assert hooks.progress("/ok") == [] and callback_state(sim)["scheduled"] == 2
    hooks.release()
    wait_for(lambda: callback_state(sim)["scheduled"] == 0)
    # The final, never preceded by stale progress; the held one's next is its final too.
    assert hooks.progress("/ok") == [("done", behind["recipes"])]
    assert hooks.progress("/hold") == [("running", 0), ("done", 9)]
    state = callback_state(sim)
    assert state["sent"] == 3 and state["superseded"] == (len(every_change("c@example.com")) - 2) + (
        len(every_change("a@example.com")) - 1)


def test_several_senders_send_each_investigation_in_order_ending_with_its_final(sim_with, hooks):
    sim = sim_with(3)
    targets = [f"b{n}@example.com" for n in range(8)] + ["fail@example.com", "fail.x@example.com"]
    ids = {submit(sim, target, hooks.url(f"/{target}"))["id"]: target for target in targets}
    wait_for(lambda: callback_state(sim)["scheduled"] == 0)
    state = callback_state(sim)
    for target in ids.values():
        received, expected = hooks.progress(f"/{target}"), every_change(target)
        # Each one a change of that investigation, oldest first, the final last and once.
        assert received == [change for change in expected if change in received], target
        assert received[-1] == expected[-1] and received[-1][0] in ("done", "error"), target
    assert {body["id"] for _, body, _ in hooks.calls} == set(ids)
    assert state["sent"] + state["superseded"] == sum(len(every_change(t)) for t in targets)
    assert state["failed"] == state["retried"] == 0


def test_a_sender_sends_on_one_kept_alive_connection(sim_with, hooks):
    sim = sim_with(1)
    submit(sim, "a@example.com", hooks.url("/ok"))
    submit(sim, "b1@example.com", hooks.url("/ok"))
    wait_for(lambda: callback_state(sim)["scheduled"] == 0)
    assert len(hooks.calls) >= 10 and len({port for _, _, port in hooks.calls}) == 1


def test_the_schedule_holds_two_entries_per_investigation_not_one_per_change():
    sender = CallbackSender(SECRET, lambda engine_id: False, senders=1)
    plan = Plan(duration_s=100, recipes=8, behaviour=NORMAL)
    later = time.time() + 3600  # none due while counted
    for n in range(10_000):
        sender.schedule(f"inv_{n}", None, "http://127.0.0.1:9/", plan, later)
    assert len(changes(plan)) == 9
    # Two entries each at most (its next progress and its final), not one per change (9).
    assert sender.state()["scheduled"] == len(sender._due) == len(sender._finals) == 10_000
    sender.reset()
    assert sender.state()["scheduled"] == 0


def test_a_due_final_is_sent_before_progress_due_earlier():
    """A sender behind takes a due final first: the service waits for finals, and behind a backlog
    of progress a final went out seconds to minutes late."""
    sender = CallbackSender(SECRET, lambda engine_id: False, senders=1)
    plan = Plan(duration_s=100, recipes=8, behaviour=NORMAL)
    now = time.time()
    progress_due = callbacks._Investigation("inv_progress", None, "http://127.0.0.1:9/", plan, now - 50, 0)
    final_due = callbacks._Investigation("inv_final", None, "http://127.0.0.1:9/", plan, now - 100, 0)
    final_due.next = len(changes(plan)) - 1  # all but its final sent
    with sender._wake:
        sender._push(now - 40, progress_due)  # due 40 s ago
        sender._push(now - 1, final_due)  # due a second ago
    assert [sender._next_due().engine_id for _ in range(2)] == ["inv_final", "inv_progress"]
    assert len(sender._in_hand) == 2  # in senders' hands, not yet done with


def test_the_number_of_senders_is_a_setting(monkeypatch):
    monkeypatch.setenv("SIM_CALLBACK_SENDERS", "3")
    assert create_sim_app().extensions["sim_engine"].callbacks.senders == 3
    assert create_sim_app({"SIM_CALLBACK_SENDERS": 1}).extensions["sim_engine"].callbacks.senders == 1
    monkeypatch.delenv("SIM_CALLBACK_SENDERS")
    assert create_sim_app().extensions["sim_engine"].callbacks.senders == callbacks.DEFAULT_SENDERS
    with pytest.raises(ValueError):
        create_sim_app({"SIM_CALLBACK_SENDERS": 0})
