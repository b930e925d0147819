"""The scenario files as pytest items: the file validator (no stack), collection and
selection (pytester, no stack), and the output of a run against the session's stack."""
from __future__ import annotations

import textwrap

import pytest

from simulator.scenarios import SCENARIO_DIR, model
from simulator.scenarios.files import load_scenario
from simulator.scenarios.schema import TAGS, validate

pytest_plugins = ["pytester"]
PLUGIN = ["-p", "simulator.scenarios.plugin", "-p", "no:cacheprovider"]


def errors_of(text: str) -> list[str]:
    with pytest.raises(model.ScenarioError) as excinfo:
        validate(textwrap.dedent(text), "s.yaml")
    return str(excinfo.value).splitlines()


# --- the validator ---------------------------------------------------------------------------


def test_a_misspelled_key_is_named_with_its_line_and_a_suggestion():
    assert errors_of("""\
        description: d
        setup:
          tier: pro
          credit: 5
        steps:
          - credits:
        """) == ["s.yaml:4: setup: unknown key 'credit' (did you mean 'credits'?); "
                 "allowed: credits, engine, key_mode, limits, receiver, tier"]


def test_an_expectation_key_is_checked_against_its_action():
    lines = errors_of("""\
        description: d
        steps:
          - webhooks: {count: 1}
            expect: {count: 1}
          - create: {target: a@example.com}
            expect:
              status: 202
              stauts: 202
              count: 1
        """)
    assert lines[0].startswith("s.yaml:8: step 2.expect: unknown key 'stauts' (did you mean 'status'?); "
                               "allowed: body, error, headers, schema, status")
    assert lines[1].startswith("s.yaml:9: step 2.expect: unknown key 'count';")  # fine for webhooks, not here
    assert len(lines) == 2


def test_a_missing_required_key():
    assert errors_of("description: d\nsetup: {tier: pro}\n") == ["s.yaml:1: missing required key 'steps'"]


def test_a_wrong_type_says_what_was_wanted_and_what_came():
    assert errors_of("""\
        description: d
        setup: {credits: lots}
        steps:
          - wait: {scan: x, status: completed, all_done: "yes"}
        """) == ['s.yaml:2: setup.credits must be an integer, got "lots" (a string)',
                 's.yaml:4: step 1.wait.all_done must be true or false, got "yes" (a string)']


def test_a_key_mode_is_live_or_test():
    lines = errors_of("""\
        description: d
        setup: {key_mode: sandbox}
        customers:
          other: {key_mode: test}
        steps:
          - credits:
        """)
    assert len(lines) == 1 and lines[0].startswith("s.yaml:2: setup.key_mode") and "sandbox" in lines[0]
    assert "live" in lines[0] and "test" in lines[0]


def test_every_problem_is_listed_in_line_order_and_never_cut():
    long_name = "a_very_long_misspelled_key_" * 8
    lines = errors_of(f"""\
        description: d
        tags: [webhook]
        setup:
          tier: gold
        steps:
          - creat: {{target: x}}
          - read: x
            credits:
          - engine: dwn
            {long_name}: 1
        """)
    assert lines == [
        "s.yaml:2: tags[0] must be one of " + ", ".join(sorted(TAGS)) + ", got 'webhook' (did you mean 'webhooks'?)",
        "s.yaml:4: setup.tier must be one of pro, business, enterprise, got 'gold'",
        "s.yaml:6: step 1: unknown key 'creat' (did you mean 'create'?); allowed: attempts, bulk, create, credits, "
        "customer, engine, expect, name, operator, read, read_bulk, receiver, repeat, request, save, source, wait, webhooks",
        "s.yaml:7: step 2: a step needs exactly one action of create, bulk, read, read_bulk, request, wait, engine, "
        "webhooks, attempts, credits, receiver, operator, source; got read, credits",
        "s.yaml:9: step 3.engine must be one of up, down, flaky, got 'dwn' (did you mean 'down'?)",
        f"s.yaml:10: step 3: unknown key '{long_name}'; allowed: attempts, bulk, create, credits, customer, engine, "
        "expect, name, operator, read, read_bulk, receiver, repeat, request, save, source, wait, webhooks",
    ]


def test_yaml_errors_and_duplicate_keys_have_lines():
    assert errors_of("description: d\nsteps: [\n") == [
        "s.yaml:3: not valid YAML: while parsing a flow node: expected the node content, but found '<stream end>'"]
    assert errors_of("description: d\nsteps:\n  - credits:\ndescription: e\n") == [
        "s.yaml:4: key 'description' appears twice (first on line 1); the last one would win"]


def test_every_shipped_scenario_is_valid_and_tagged():
    for path in model.scenario_files(SCENARIO_DIR):
        scenario = load_scenario(path)
        assert scenario.tags and set(scenario.tags) <= set(TAGS), path


# --- collection and selection (no stack) -----------------------------------------------------


def test_an_invalid_file_fails_the_collection_before_anything_runs(pytester):
    good = pytester.makefile(".yaml", good="description: d\nsteps:\n  - credits:\n")
    bad = pytester.makefile(".yaml", bad="description: d\nsetup:\n  credit: 5\nsteps:\n  - credits:\n")
    result = pytester.runpytest_inprocess(*PLUGIN, str(good), str(bad))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)  # nothing ran, so no stack was started
    result.stdout.fnmatch_lines([f"{bad}:3: setup: unknown key 'credit' (did you mean 'credits'?)*",
                                 "*Interrupted: 1 error during collection*"])
    assert "Traceback" not in result.stdout.str()


def test_tags_are_markers_and_names_select(pytester):
    expected = sorted(p.stem for p in model.scenario_files(SCENARIO_DIR) if "webhooks" in load_scenario(p).tags)
    result = pytester.runpytest_inprocess(*PLUGIN, str(SCENARIO_DIR), "--collect-only", "-q", "--strict-markers",
                                          "-m", "webhooks")
    assert result.ret == pytest.ExitCode.OK
    collected = sorted(line.rsplit("::", 1)[1] for line in result.stdout.lines if "::" in line)
    assert collected == expected and "bulk_mixed" in collected and "email_poll" not in collected
    result = pytester.runpytest_inprocess(*PLUGIN, str(SCENARIO_DIR), "--collect-only", "-q", "-k", "bulk")
    assert [line.rsplit("::", 1)[1] for line in result.stdout.lines if "::" in line] == ["bulk_mixed"]


# --- a run's output (the session's stack) ------------------------------------------------------

PASSING = """\
description: One scan and the balance it leaves.
tags: [credits]
setup: {credits: 5}
steps:
  - create: {target: plugin.ok@example.com, kind: email}
    expect: {status: 202, headers: {X-Credits-Remaining: 4}}
  - credits:
    expect: {balance: 4}
"""
FAILING = """\
description: Expects a status the service does not answer.
setup: {credits: 5}
steps:
  - create: {target: plugin.missed@example.com, kind: email}
    expect: {status: 201, body: {kind: email}}
"""


@pytest.fixture
def against_stack(scenario_stack, monkeypatch):
    # The operator commands of the inner run need the stack's database and secret key.
    for key, value in scenario_stack.env.items():
        monkeypatch.setenv(key, value)
    return [*PLUGIN, f"--scenario-base-url={scenario_stack.base_url}",
            f"--scenario-sim-url={scenario_stack.sim_url}"]


def test_one_line_per_scenario_and_the_missed_ones_in_full(pytester, against_stack):
    passing = pytester.makefile(".yaml", passing=PASSING)
    failing = pytester.makefile(".yaml", failing=FAILING)
    result = pytester.runpytest_inprocess(*against_stack, str(passing), str(failing))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines([r"passing\.yaml  4/4 met \(\d+\.\ds\) +\[ 50%\]$",
                                  r"failing\.yaml  1 MISSED, 2/3 met \(\d+\.\ds\) +\[100%\]$"])
    result.stdout.fnmatch_lines([f"scenario failing ({failing}): 1 of 3 expectations MISSED, 2 met, in *s",
                                 "accounts: main: cus_* key key_*", "",
                                 "  step      1 create plugin.missed@example.com",
                                 "  expected  HTTP status == 201",
                                 "  observed  202"])
    assert "scenario expectations" not in result.stdout.str()  # the table is for -v


def test_verbose_adds_the_table_of_every_expectation(pytester, against_stack):
    passing = pytester.makefile(".yaml", passing=PASSING)
    result = pytester.runpytest_inprocess(*against_stack, str(passing), "-v")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*passing.yaml::passing PASSED 4/4 met (*s)*",
                                 "*= scenario expectations =*",
                                 "scenario*| step*| expectation*| result | observed",
                                 "*",
                                 "passing*| setup*| customers, keys and receivers are set up*| met*| main: cus_*",
                                 "*| 1 create plugin.ok@example.com*| HTTP status == 202*| met*| 202",
                                 "*| 1 create plugin.ok@example.com*| header X-Credits-Remaining == 4*| met*| 4",
                                 "*| 2 credits*| balance (operator) == 4*| met*| 4"])
