"""The operator hook: what a scenario needs done on the operator's side of the service.

Accounts and keys go through the operator CLI (D10), run as a command line so
that the runner talks to whatever database that CLI is configured for:

    <operator> customers create --name N --tier T --credits C --json
    <operator> customers limits CUSTOMER_ID [--inflight N] [--hour N] [--day N] --json
    <operator> keys issue CUSTOMER_ID --name N [--webhook-url URL --webhook-secret S] [--test] --json
    <operator> customers list --json                       (balances)

``<operator>`` defaults to ``<this python> -m flask --app wsgi``, run in the project root
with the runner's environment. The CLI has no command for the webhook delivery attempt
log (it lives in tables ``webhook_delivery`` / ``delivery_attempt`` and is shown on the
portal), so that is read by ``<query> attempts KEY_ID``, ``<query>`` defaulting to
``<this python> -m simulator.scenarios.operator_query`` (same environment).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def default_operator_command() -> list[str]:
    return [sys.executable, "-m", "flask", "--app", "wsgi"]


def default_query_command() -> list[str]:
    return [sys.executable, "-m", "simulator.scenarios.operator_query"]


class OperatorError(RuntimeError):
    """An operator command failed; the message holds the command and its output."""


def _as_argv(command: str | list[str] | None, default: list[str]) -> list[str]:
    if command is None:
        return list(default)
    return shlex.split(command) if isinstance(command, str) else list(command)


class Operator:
    """Runs operator commands; every method returns the command's JSON answer."""

    def __init__(self, command: str | list[str] | None = None, query_command: str | list[str] | None = None,
                 env: dict | None = None, cwd: str | Path | None = None, timeout: float = 120):
        self.command = _as_argv(command, default_operator_command())
        self.query_command = _as_argv(query_command, default_query_command())
        self.env = dict(os.environ if env is None else env)
        self.cwd = str(cwd or PROJECT_ROOT)
        self.timeout = timeout

    def _run(self, argv: list[str]) -> dict:
        shown = shlex.join(argv)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.cwd,
                                  timeout=self.timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OperatorError(f"{shown}: {exc}") from None
        answer = _last_json_object(done.stdout)
        if done.returncode != 0 or answer is None:
            detail = (answer or {}).get("error") or _tail(done.stderr) or _tail(done.stdout) or "no output"
            raise OperatorError(f"{shown} exited {done.returncode}: {detail}")
        return answer

    def attempt_cli(self, args: list[str]) -> tuple[int, dict | None, str]:
        """Run ``<operator> ARGS --json`` and report rather than raise: (exit status, its JSON
        answer or None, the last lines of its output). ``--json`` is added when missing."""
        argv = [*self.command, *args, *([] if "--json" in args else ["--json"])]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.cwd,
                                  timeout=self.timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OperatorError(f"{shlex.join(argv)}: {exc}") from None
        return done.returncode, _last_json_object(done.stdout), _tail(done.stderr) or _tail(done.stdout)

    def cli(self, *args: str) -> dict:
        return self._run([*self.command, *args, "--json"])

    def query(self, *args: str) -> dict:
        return self._run([*self.query_command, *args])

    # --- accounts ---------------------------------------------------------------------

    def create_customer(self, name: str, tier: str, credits: int) -> dict:
        return self.cli("customers", "create", "--name", name, "--tier", tier, "--credits", str(credits))

    def set_limits(self, customer_id: str, inflight: int | None = None, hour: int | None = None,
                   day: int | None = None) -> dict:
        args = ["customers", "limits", customer_id]
        for flag, value in (("--inflight", inflight), ("--hour", hour), ("--day", day)):
            if value is not None:
                args += [flag, str(value)]
        return self.cli(*args)

    def issue_key(self, customer_id: str, name: str, webhook_url: str | None = None,
                  webhook_secret: str | None = None, test: bool = False) -> dict:
        args = ["keys", "issue", customer_id, "--name", name, *(["--test"] if test else [])]
        if webhook_url:
            args += ["--webhook-url", webhook_url]
        if webhook_secret:
            args += ["--webhook-secret", webhook_secret]
        answer = self.cli(*args)
        if not answer.get("api_key") or not answer.get("key_id"):
            raise OperatorError(f"keys issue answered without key_id/api_key: {sorted(answer)}")
        return answer

    def customer(self, customer_id: str) -> dict:
        """The customer as ``customers list`` shows it (``balance``, ``tier``, ``limits``...)."""
        for row in self.cli("customers", "list").get("customers", []):
            if row.get("customer_id") == customer_id:
                return row
        raise OperatorError(f"customers list does not show {customer_id}")

    def balance(self, customer_id: str) -> int:
        return self.customer(customer_id)["balance"]

    # --- webhook delivery log -----------------------------------------------------------

    def attempts(self, key_id: str) -> dict:
        """The key's deliveries with their attempts (see ``operator_query``)."""
        return self.query("attempts", key_id)


def _last_json_object(text: str) -> dict | None:
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join((text or "").strip().splitlines()[-lines:])
