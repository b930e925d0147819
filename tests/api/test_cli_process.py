"""The operator CLI as operators run it, ``flask --app wsgi GROUP COMMAND`` in a process of its own:
it builds only what a command needs (no API, portal or job queue: their imports and the OpenAPI
document were most of a command's 4 to 9 seconds), prints its table on stdout and its log lines on
stderr."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import is_operator_command
from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
FLASK = [sys.executable, "-X", "importtime", "-m", "flask", "--app", "wsgi"]
# What serving requests needs and no operator command does.
NOT_NEEDED = ("flask_smorest", "apispec", "app.api", "app.portal", "app.webhooks.outbox", "rq", "app.plumbing.jobs")


def flask(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FLASK, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` reports."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.fixture
def env(app, tmp_path):
    return service_env(app, "http://127.0.0.1:9", tmp_path / "instance", LOG_LEVEL="INFO")


def not_needed(modules: set[str]) -> list[str]:
    assert "app.cli" in modules  # the report is real
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NOT_NEEDED)]


def test_an_operator_command_imports_only_what_it_needs(env):
    result = flask(env, "customers", "create", "--name", "Acme", "--tier", "pro", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["name"] == "Acme"
    assert not_needed(imported(result.stderr)) == []


@pytest.mark.parametrize("command", [("suppressions", "list"), ("suppressions", "remove", "email", "a@example.com"),
                                     ("customers", "list"), ("keys", "show", "key_x")])
def test_operator_reads_and_removals_import_no_job_queue(env, command):
    """Only what sends events or jobs (an opt-out that ends watches, an erasure) needs them: the
    opt-out list took 2 to 4 s on a loaded machine importing webhooks and RQ for nothing."""
    assert not_needed(imported(flask(env, *command).stderr)) == []


def test_tables_go_to_stdout_and_log_lines_to_stderr(env):
    created = json.loads(flask(env, "customers", "create", "--name", "Acme", "--tier", "pro", "--json").stdout)
    key = json.loads(flask(env, "keys", "issue", created["customer_id"], "--json").stdout)
    result = flask(env, "keys", "set-access", key["key_id"], "--scopes", "webhooks")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0].split() == ["key", key["key_id"]]  # the table, and only it
    assert "access changed" not in result.stdout and "access changed by the operator" in result.stderr


@pytest.mark.parametrize("args, expected", [
    (["--app", "wsgi", "customers", "list"], True),
    (["-A", "wsgi", "keys", "show", "key_x"], True),
    (["--app=wsgi", "db", "upgrade"], True),
    (["--app", "wsgi", "run"], False),
    (["--app", "wsgi", "routes"], False),
    (["--app", "customers", "run"], False),  # an --app value is not a command
    (["--app", "wsgi"], False),
])
def test_which_command_lines_are_operator_commands(args, expected):
    assert is_operator_command(args) is expected


def test_users_create_without_a_terminal_says_to_use_password_stdin_without_getpass_warning(env):
    """Run from a script (no terminal: stdin a pipe, no controlling terminal), the prompt's getpass
    warned "GetPassWarning: Can not control echo on the terminal" and "Password input may be echoed"
    before failing; now one line says what to do."""
    created = json.loads(flask(env, "customers", "create", "--name", "Acme", "--tier", "pro", "--json").stdout)
    result = subprocess.run([sys.executable, "-m", "flask", "--app", "wsgi", "users", "create",
                             created["customer_id"], "ops@example.com"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL, start_new_session=True)
    assert result.returncode == 1
    assert "error: no password given: use --password-stdin" in result.stderr
    assert "GetPassWarning" not in result.stderr and "echoed" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    listed = json.loads(flask(env, "users", "list", created["customer_id"], "--json").stdout)
    assert listed["users"] == []  # nothing made
