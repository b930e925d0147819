"""The QA scenarios end to end: API (gunicorn), worker and simulator as real processes.

The stack starts once for this module (``running_stack``). Every scenario file in
``simulator/scenarios`` is its own parametrized test. To keep the suite short, the
scenarios selected in this session are run together on first use, through the
runner's Python API with the runner's own scheduling (those that change the engine's
mode alone, the others a few at a time; each has its own customers); each test then
asserts on its own scenario's result and shows its missed rows.

The other tests check that a scenario expecting something false fails and names the
missed expectations (through the Python API and the ``python -m simulator scenario``
command line), and the format's pure parts (matchers, variables, OpenAPI ``nullable``).
"""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from simulator.scenarios import SCENARIO_DIR
from simulator.scenarios import model, runner
from simulator.scenarios.operator import PROJECT_ROOT
from simulator.scenarios.stack import running_stack

SCENARIO_FILES = model.scenario_files(SCENARIO_DIR)
PARALLEL = 4


@pytest.fixture(scope="module")
def stack(request):
    failed_before = request.session.testsfailed
    with running_stack(quiet=True) as running:
        yield running
        if request.session.testsfailed > failed_before:
            running.mark_failed()  # keep the processes' logs in artifacts/scenarios/


class ScenarioBatch:
    """Runs the session's selected scenarios together once, on first use."""

    def __init__(self, stack, names: list[str]):
        self.stack, self.names = stack, names
        self.results: dict[str, runner.ScenarioResult] | None = None
        self._lock = threading.Lock()

    def result(self, name: str) -> runner.ScenarioResult:
        with self._lock:
            if self.results is None:
                paths = [SCENARIO_DIR / f"{n}.yaml" for n in self.names]
                done = runner.run_scenarios(paths, self.stack.run_config(), parallel=PARALLEL)
                self.results = {r.name: r for r in done}
        if name not in self.results:  # not selected up front: run it on its own
            self.results[name] = runner.run_scenario(SCENARIO_DIR / f"{name}.yaml", self.stack.run_config())
        return self.results[name]


@pytest.fixture(scope="module")
def batch(stack, request):
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.originalname == "test_scenario" and hasattr(item, "callspec")]
    return ScenarioBatch(stack, selected or [p.stem for p in SCENARIO_FILES])


@pytest.mark.processes
@pytest.mark.parametrize("name", [p.stem for p in SCENARIO_FILES])
def test_scenario(batch, name):
    result = batch.result(name)
    assert result.rows, f"{name} produced no rows"
    assert result.ok, (f"scenario {name}: {len(result.missed)} of {len(result.rows)} expectations missed "
                       f"(accounts: {result.accounts})\n{result.missed_text()}")


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
    table = result.missed_text()
    assert "MISSED" in table and "HTTP status == 201" in table and "expects_false" in table


@pytest.mark.processes
def test_command_line_exits_1_and_prints_the_missed_rows(stack, wrong_scenario):
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "scenario", str(wrong_scenario), "--base-url", stack.base_url,
         "--sim-url", stack.sim_url, "--quiet"],
        cwd=PROJECT_ROOT, env=stack.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "HTTP status == 201" in line]
    assert lines and "MISSED" in lines[0] and "202" in lines[0]
    assert "MISSED" in done.stdout.splitlines()[-1] or "MISSED" in done.stdout


@pytest.mark.processes
def test_command_line_refuses_an_unknown_scenario(stack):
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "scenario", "no_such_scenario", "--base-url", stack.base_url,
         "--sim-url", stack.sim_url], cwd=PROJECT_ROOT, env=stack.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown scenario 'no_such_scenario'" in done.stderr


# --- the format's pure parts (no stack) ------------------------------------------------------


def test_every_scenario_file_loads():
    assert len(SCENARIO_FILES) >= 17
    for path in SCENARIO_FILES:
        scenario = model.load_scenario(path)
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


def test_table_and_exit_status():
    good = runner.ScenarioResult("good", "", [runner.Row("good", "1 create", "HTTP status == 202", True, "202")])
    bad = runner.ScenarioResult("bad", "", [runner.Row("bad", "1 create", "HTTP status == 202", False, "429")])
    assert runner.exit_status([good]) == 0
    assert runner.exit_status([good, bad]) == 1
    table = runner.format_table([good, bad])
    header, _, *rows = table.splitlines()
    assert [cell.strip() for cell in header.split("|")] == ["scenario", "step", "expectation", "result", "observed"]
    assert any("MISSED" in row and "429" in row for row in rows)
    assert "1 MISSED" in runner.summary([good, bad])
    assert runner.format_table([good, bad], missed_only=True).count("MISSED") == 1
