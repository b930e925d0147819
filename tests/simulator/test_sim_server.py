"""The simulator over real HTTP (threaded werkzeug server), and its command line."""
import hashlib
import hmac
import json
import sys
import threading
import time
import types

import pytest
import requests
from werkzeug.serving import make_server

import simulator.__main__ as cli
from simulator.app import create_sim_app


@pytest.fixture
def server(monkeypatch):
    monkeypatch.delenv("SIM_TIME_SCALE", raising=False)
    app = create_sim_app({"ENGINE_TOKEN": "tok", "SIM_TIME_SCALE": 0.001})
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        thread.join(timeout=5)


def test_engine_and_receiver_over_http(server):
    auth = {"Authorization": "Bearer tok"}
    submitted = requests.post(f"{server}/v1/investigations", headers=auth, timeout=5,
                              json={"target": "+14155552671", "kind": "phone", "reference": "scan_1"})
    assert submitted.status_code == 201
    engine_id = submitted.json()["id"]

    deadline = time.monotonic() + 5
    while True:
        status = requests.get(f"{server}/v1/investigations/{engine_id}", headers=auth, timeout=5).json()
        if status["status"] == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert status["status"] == "done"
    assert status["result"]["phone_profile"]["region"] == "US"
    pdf_url = status["result"]["artifacts"]["pdf"]
    assert pdf_url == f"{server}/_sim/artifacts/{engine_id}.pdf"
    assert requests.get(pdf_url, timeout=5).content.startswith(b"%PDF")

    assert requests.post(f"{server}/_sim/receivers/acme", timeout=5,
                         json={"secret": "s", "responses": [503, 200]}).status_code == 201
    raw = json.dumps({"event": "scan.completed", "scan_id": "scan_1"}).encode()
    signature = "sha256=" + hmac.new(b"s", raw, hashlib.sha256).hexdigest()
    codes = [requests.post(f"{server}/_sim/hooks/acme", data=raw, timeout=5,
                           headers={"X-Service-Signature": signature}).status_code for _ in range(2)]
    assert codes == [503, 200]
    recorded = requests.get(f"{server}/_sim/receivers/acme/deliveries", timeout=5).json()["deliveries"]
    assert [(d["body"], d["signature_valid"]) for d in recorded] == [(raw.decode(), True)] * 2


def test_concurrent_calls_are_all_counted(server):
    auth = {"Authorization": "Bearer tok"}
    requests.post(f"{server}/_sim/engine/mode", json={"mode": "flaky", "every": 4}, timeout=5)

    def submit(i, codes):
        codes[i] = requests.post(f"{server}/v1/investigations", headers=auth, timeout=5,
                                 json={"target": f"user{i}@example.com", "kind": "email"}).status_code

    codes = [None] * 20
    threads = [threading.Thread(target=submit, args=(i, codes)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [201] * 15 + [500] * 5
    assert requests.get(f"{server}/_sim/engine/stats", timeout=5).json() == \
        {"submit": 20, "batch": 0, "status": 0, "looks": 0, "deletes": 0, "total": 20}


# --- command line --------------------------------------------------------------------------

def test_serve_uses_a_threaded_server_with_the_given_options(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "run_simple", lambda host, port, app, **kw: calls.append((host, port, app, kw)))
    assert cli.main(["--host", "0.0.0.0", "--port", "9123", "--time-scale", "0.05"]) == 0
    (host, port, app, kwargs), = calls
    assert (host, port, kwargs) == ("0.0.0.0", 9123, {"threaded": True})
    assert app.config["SIM_TIME_SCALE"] == 0.05


def test_serve_defaults(monkeypatch):
    monkeypatch.delenv("SIM_TIME_SCALE", raising=False)
    calls = []
    monkeypatch.setattr(cli, "run_simple", lambda host, port, app, **kw: calls.append((host, port, app)))
    cli.main([])
    (host, port, app), = calls
    assert (host, port, app.config["SIM_TIME_SCALE"]) == ("127.0.0.1", 8700, 1.0)


def test_scenario_subcommand_hands_the_rest_to_the_runner(monkeypatch):
    received = []
    runner = types.ModuleType(cli.RUNNER_MODULE)
    runner.main = lambda argv: received.append(argv) or 1
    monkeypatch.setitem(sys.modules, cli.RUNNER_MODULE, runner)
    assert cli.main(["scenario", "all", "--base-url", "http://x"]) == 1
    assert received == [["all", "--base-url", "http://x"]]


def test_scenario_without_a_runner_says_so(monkeypatch, capsys):
    monkeypatch.setattr(cli, "RUNNER_MODULE", "simulator.no_such_package.runner")
    assert cli.main(["scenario", "all"]) == 2
    assert "scenario runner" in capsys.readouterr().err
