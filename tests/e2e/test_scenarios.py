"""The QA scenario runner end to end, and the format's pure parts.

The scenario files themselves are pytest items (``simulator/scenarios/plugin.py``):
``pytest`` runs them from ``testpaths`` (``simulator/scenarios``), on the session's stack
(API, worker and simulator as real processes), which the tests here share through the
plugin's ``scenario_stack`` fixture. These tests check that a scenario expecting something
false fails and names the missed expectations (through the Python API and the
``python -m simulator scenario`` command line), and the format's pure parts (matchers,
variables, OpenAPI ``nullable``). The file validator and the plugin's collection, selection
and output are in ``test_scenario_plugin.py``.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from simulator.procutil import free_port, wait_until
from simulator.scenarios import SCENARIO_DIR, model, runner
from simulator.scenarios.files import load_scenario
from simulator.scenarios.operator import PROJECT_ROOT

SCENARIO_FILES = model.scenario_files(SCENARIO_DIR)


@pytest.fixture
def stack(scenario_stack):
    return scenario_stack


WRONG = """\
description: Expects things that are false; the runner must report each as missed.
setup:
  tier: business
  credits: 5
steps:
  - create: {target: wrong.expectations@example.com, kind: email}
    save: scan
    expect:
      status: 201
      headers: {X-Credits-Remaining: 5}
      body: {kind: phone, scan_id: {matches: '^scn_'}}
      schema: BulkState
  - read: "{{scan.scan_id}}"
    expect:
      error: not_found
  - credits:
    expect: {balance: 5}
"""


@pytest.fixture
def wrong_scenario(tmp_path):
    path = tmp_path / "expects_false.yaml"
    path.write_text(WRONG)
    return path


@pytest.mark.processes
def test_false_expectations_are_missed_and_named(stack, wrong_scenario):
    result = runner.run_scenario(wrong_scenario, stack.run_config())
    assert not result.ok
    missed = {r.expectation for r in result.missed}
    assert "HTTP status == 201" in missed
    assert "header X-Credits-Remaining == 5" in missed
    assert "body.kind == phone" in missed
    assert "body matches schema BulkState" in missed
    assert "body.error == not_found" in missed
    assert "balance (operator) == 5" in missed
    met = {r.expectation for r in result.rows if r.met}
    assert "body.scan_id matches ^scn_" in met
    observed = {r.expectation: r.observed for r in result.rows}
    assert observed["HTTP status == 201"] == "202"
    assert observed["header X-Credits-Remaining == 5"] == "4"
    assert observed["balance (operator) == 5"] == "3"  # 5 - create - read
    text = result.missed_text()
    assert text.startswith(f"scenario expects_false ({wrong_scenario}): 6 of ")
    assert "  expected  HTTP status == 201\n  observed  202" in text
    assert "expected  body.scan_id" not in text  # met rows are not repeated


@pytest.mark.processes
def test_command_line_exits_1_and_prints_the_missed_rows(stack, wrong_scenario, tmp_path):
    junit = tmp_path / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "scenario", str(wrong_scenario), "--base-url", stack.base_url,
         "--sim-url", stack.sim_url, f"--junitxml={junit}"],
        cwd=PROJECT_ROOT, env=stack.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "expects_false.yaml  6 MISSED, " in done.stdout
    assert "  expected  HTTP status == 201\n  observed  202" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    report = junit.read_text()
    assert 'name="expectations_total"' in report and "<failure" in report and "HTTP status == 201" in report


def test_the_command_line_knows_the_projects_markers():
    done = subprocess.run([sys.executable, "-m", "simulator", "scenario", "email_poll", "--collect-only", "-q"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "email_poll.yaml::email_poll" in done.stdout
    assert "PytestUnknownMarkWarning" not in done.stdout + done.stderr and "warning" not in done.stdout


MISSING_ONE = """\
description: Expects a status the service does not answer.
setup: {credits: 5}
steps:
  - create: {target: runner.missed@example.com, kind: email}
    expect: {status: 201}
"""


@pytest.mark.processes
def test_a_failed_run_prints_its_result_and_where_the_logs_are_on_lines_of_their_own(tmp_path):
    scenario = tmp_path / "missing_one.yaml"
    scenario.write_text(MISSING_ONE)
    # One pipe for both streams, as on a terminal; a stack of its own, whose logs are kept.
    done = subprocess.run([sys.executable, "-m", "simulator", "scenario", str(scenario)], cwd=PROJECT_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=280)
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    [result] = [line for line in lines if "missing_one.yaml " in line]
    assert re.fullmatch(r"\S*missing_one\.yaml  1 MISSED, 1/2 met \(\d+\.\ds\) +\[100%\]", result), result
    [notice] = [line for line in lines if "process logs kept in" in line]
    assert notice.startswith("stack: something failed; process logs kept in "), notice
    kept = Path(notice.removeprefix("stack: something failed; process logs kept in ").rstrip(":"))
    assert (kept / "api.log").is_file()
    shutil.rmtree(kept)
    assert "PytestUnknownMarkWarning" not in done.stdout


ON_PORTS = """\
description: Runs on the API port it was given (the poll URL is made of it).
setup: {credits: 5}
steps:
  - create: {target: ports.chosen@example.com, kind: email}
    expect:
      status: 202
      body: {poll_url: {matches: '^http://127[.]0[.]0[.]1:PORT/api/v1/scan/scn_'}}
"""


@pytest.mark.processes
def test_the_stack_runs_on_the_ports_chosen(tmp_path):
    """``make scenarios`` and ``python -m simulator scenario`` always took free ports; an option (and
    a setting) chooses them."""
    api_port, sim_port = free_port(), free_port()
    scenario = tmp_path / "on_ports.yaml"
    scenario.write_text(ON_PORTS.replace("PORT", str(api_port)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    run = subprocess.Popen([sys.executable, "-m", "simulator", "scenario", str(scenario), "--api-port", str(api_port)],
                           cwd=PROJECT_ROOT, env=dict(env, SCENARIO_SIM_PORT=str(sim_port)), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{sim_port}/_sim/engine/mode", timeout=2).ok, 120,
                   "the simulator on the port chosen")
        output, _ = run.communicate(timeout=280)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(30)
    assert run.returncode == 0, output
    assert re.search(r"on_ports\.yaml  3/3 met", output), output


def test_a_chosen_port_in_use_is_refused_before_anything_starts(tmp_path):
    scenario = tmp_path / "on_ports.yaml"
    scenario.write_text(ON_PORTS)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "simulator", "scenario", str(scenario)], cwd=PROJECT_ROOT,
                              env=dict(os.environ, SCENARIO_API_PORT=str(port)), capture_output=True, text=True,
                              timeout=120)
    assert done.returncode != 0
    assert f"the API's port {port} is not free" in done.stdout + done.stderr


def test_the_port_options_go_to_pytest():
    command = runner.pytest_args(["all", "--api-port", "9100", "--sim-port", "9700"])
    assert "--scenario-api-port=9100" in command and "--scenario-sim-port=9700" in command


@pytest.mark.parametrize("argv, message", [
    (["no_such_scenario"], "unknown scenario 'no_such_scenario'"),
    ([], "name the scenarios to run"),
    (["all", "--base-url", "http://127.0.0.1:9"], "--base-url and --sim-url go together"),
])
def test_command_line_refuses_bad_usage(argv, message):
    done = subprocess.run([sys.executable, "-m", "simulator", "scenario", *argv], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


# --- the format's pure parts (no stack) ------------------------------------------------------


def test_every_scenario_file_loads():
    assert len(SCENARIO_FILES) >= 17
    for path in SCENARIO_FILES:
        scenario = load_scenario(path)
        assert scenario.steps and scenario.description, path


def test_an_invalid_file_is_reported_as_a_missed_row(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("steps:\n  - create: {target: a@example.com}\n    expect: {stauts: 202}\n")
    result = runner.run_scenario(path, runner.RunConfig(base_url="http://127.0.0.1:9", sim_url="http://127.0.0.1:9"))
    assert not result.ok
    assert result.rows[0].expectation == "scenario file is valid"
    assert "stauts" in result.rows[0].observed


@pytest.mark.parametrize("text, error", [
    ("steps: []", "steps must be a non-empty list"),
    ("steps:\n  - create: {}\n    read: x", "exactly one action"),
    ("steps:\n  - wait: {scan: x}", "wait needs status, all_done or until"),
    ("setup: {tier: gold}\nsteps:\n  - credits:", "tier must be one of"),
    ("setup: {key_mode: sandbox}\nsteps:\n  - credits:", "key_mode must be one of live, test"),
    ("steps:\n  - read: x\n    customer: other", "unknown customer 'other'"),
    ("steps:\n  - read: x\n    expect: {body: {a: {matches: '('}}}", "bad regular expression"),
])
def test_format_errors_name_the_problem(text, error):
    with pytest.raises(model.ScenarioError, match=error):
        model.parse_scenario(__import__("yaml").safe_load(text), default_name="t")


def test_matchers_and_wildcards():
    body = {"a": {"b": [1, 2, 3]}, "s": "scn_x", "n": None, "t": True,
            "items": [{"k": "x"}, {"k": "x"}], "headers": {"X-Thing": "42"}}
    assert model.check_path(body, "a.b.1", 2).met
    assert model.check_path(body, "a.b.-1", 3).met
    assert model.check_path(body, "a.b", {"length": 3}).met
    assert model.check_path(body, "a.b.*", {"gte": 1, "lte": 3}).met
    assert not model.check_path(body, "a.b.*", {"lt": 3}).met
    assert model.check_path(body, "items.*.k", {"all_equal": True}).met
    assert not model.check_path(body, "items.*.k", {"all_distinct": True}).met  # "x" twice
    assert model.check_path(body, "a.b.*", {"all_distinct": True, "count": 3}).met
    assert model.check_path(body, "items.*.k", {"all_distinct": False}).met
    assert model.check_path(body, "s", {"matches": "^scn_"}).met
    assert model.check_path(body, "n", None).met
    assert model.check_path(body, "missing", {"present": False}).met
    assert not model.check_path(body, "missing", None).met
    assert not model.check_path(body, "t", 1).met  # a boolean is not a number
    assert model.check_path(body["headers"], "x-thing", 42, as_text=True).met
    assert model.check_path(body["headers"], "X-Thing", {"gt": 41}, as_text=True).met
    assert not model.check_path(body, "a.*.nothing", 1).met
    assert model.check_path(body, "$", {"type": "object"}).met


def test_variables_keep_types_and_interpolate():
    variables = {"scan": {"scan_id": "scn_1", "n": 3, "result": {"x": [1]}}, "_meta": {"scan": {"_status": 202}}}
    assert model.render("{{scan.n}}", variables) == 3
    assert model.render("{{ scan.result }}", variables) == {"x": [1]}
    assert model.render("/x/{{scan.scan_id}}/{{scan.n}}", variables) == "/x/scn_1/3"
    assert model.render("{{scan._status}}", variables) == 202
    with pytest.raises(model.VariableError, match="unknown variable 'nope'"):
        model.render("{{nope.x}}", variables)


def test_openapi_nullable_becomes_json_schema_null():
    converted = runner.openapi_to_jsonschema({
        "type": "object", "properties": {
            "nullable": {"type": "string"},
            "a": {"type": "string", "nullable": True, "enum": ["x"]},
            "b": {"allOf": [{"$ref": "#/components/schemas/B"}], "nullable": True},
            "c": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        }})
    props = converted["properties"]
    assert props["nullable"] == {"type": "string"}
    assert props["a"] == {"type": ["string", "null"], "enum": ["x", None]}
    assert props["b"] == {"anyOf": [{"allOf": [{"$ref": "#/components/schemas/B"}]}, {"type": "null"}]}
    assert props["c"] == {"type": "integer", "exclusiveMinimum": 0}


def test_table_and_missed_text():
    good = runner.ScenarioResult("good", "", [runner.Row("good", "1 create", "HTTP status == 202", True, "202")])
    long_body = "x" * 500
    bad = runner.ScenarioResult("bad", "bad.yaml", [
        runner.Row("bad", "1 create", "HTTP status == 202", False, "429"),
        runner.Row("bad", "2 read", "body.note == y", False, long_body)], duration=1.25)
    table = runner.format_table([good, bad])
    header, _, *rows = table.splitlines()
    assert [cell.strip() for cell in header.split("|")] == ["scenario", "step", "expectation", "result", "observed"]
    assert any("MISSED" in row and "429" in row for row in rows)
    assert runner.format_table([good, bad], missed_only=True).count("MISSED") == 2
    text = bad.missed_text()
    assert text.splitlines()[0] == "scenario bad (bad.yaml): 2 of 2 expectations MISSED, 0 met, in 1.2s"
    assert f"  observed  {long_body}" in text  # never cut


def test_a_further_receiver_is_named_by_its_steps_and_an_unknown_one_stops_the_scenario():
    scenario = model.parse_scenario({"steps": [
        {"receiver": {"name": "oncall"}, "save": "oncall"},
        {"webhooks": {"receiver": "oncall", "count": 1}},
        {"webhooks": {"receiver": "nobody"}}]}, default_name="t")
    assert [s.label for s in scenario.steps] == ["receiver oncall 200", "webhooks 1 at oncall", "webhooks at nobody"]
    run = runner.ScenarioRun(scenario, runner.RunConfig(base_url="http://127.0.0.1:9", sim_url="http://127.0.0.1:9"))
    account = {"receiver": "t-main-1", "receivers": {"oncall": {"receiver": "t-main-1-oncall", "secrets": ["s"]}}}
    assert run._receiver(account) == "t-main-1" and run._receiver(account, "oncall") == "t-main-1-oncall"
    run.accounts = {"main": account}
    with pytest.raises(runner.StepError, match=r"no receiver 'nobody' \(a receiver step with name: nobody creates it"):
        run._receiver(account, "nobody")
    from simulator.scenarios.schema import validate
    with pytest.raises(model.ScenarioError, match=r"receiver\.name must match"):  # a plain word: it names a URL path
        validate("description: d\nsteps:\n  - receiver: {name: 'a/b'}\n", "s.yaml")
