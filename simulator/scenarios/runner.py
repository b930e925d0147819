"""Runs one QA scenario against a running service: its steps, and the check of every expectation.

    python -m simulator scenario NAME|all [NAME...] [--base-url URL --sim-url URL] [pytest options]

The command line runs pytest on the scenario files (``plugin`` makes each file one test
item, with a stack of its own unless ``--base-url``/``--sim-url`` name a running service);
pytest's own options pass through: ``-k``, ``-m TAG``, ``-v``, ``-n auto``, ``--junitxml``.
Exit status: 0 when every expectation was met, 1 when any was missed, 2 for a usage error
(unknown scenario, invalid file, service unreachable).

Each scenario gets fresh customers and keys from the operator hook (``operator.Operator``),
drives the public API over HTTP, the engine simulator's controls and its webhook
receivers, and checks its expectations, one ``Row`` each.

Python API (used by the plugin and the e2e tests)::

    config = RunConfig(base_url=..., sim_url=..., operator=Operator(env=...))
    result = run_scenario("simulator/scenarios/email_poll.yaml", config)
    result.ok, result.missed, result.missed_text(), format_table([result])
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from simulator.receiver import standard_signed_by
from simulator.scenarios import SCENARIO_DIR
from simulator.scenarios.files import load_scenario
from simulator.scenarios.model import (
    DEFAULT_TIMEOUT,
    MAIN,
    MISSING,
    Check,
    Scenario,
    ScenarioError,
    check_path,
    describe,
    render,
    resolve_names,
    resolve_path,
    short,
)
from simulator.scenarios.operator import Operator

SIGNATURE_HEADER = "X-Service-Signature"
OPENAPI_PATH = "/api/v1/openapi.json"


# --- results -------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    step: str
    expectation: str
    met: bool
    observed: str


@dataclass
class ScenarioResult:
    name: str
    path: str
    rows: list[Row] = field(default_factory=list)
    duration: float = 0.0
    # Customers and keys the scenario used, for looking them up after a failure.
    accounts: dict = field(default_factory=dict)

    @property
    def missed(self) -> list[Row]:
        return [r for r in self.rows if not r.met]

    @property
    def ok(self) -> bool:
        return bool(self.rows) and not self.missed

    def missed_text(self) -> str:
        """Every missed expectation in full (nothing cut), for a failure report."""
        met = len(self.rows) - len(self.missed)
        out = [f"scenario {self.name} ({self.path}): {len(self.missed)} of {len(self.rows)} expectations MISSED, "
               f"{met} met, in {self.duration:.1f}s"]
        if self.accounts:
            out.append("accounts: " + "; ".join(
                f"{name}: {a.get('customer_id')} key {a.get('key_id')}" + (f" receiver {a['receiver']}"
                                                                            if a.get("receiver") else "")
                for name, a in self.accounts.items()))
        for row in self.missed:
            out += ["", f"  step      {row.step}", f"  expected  {row.expectation}", f"  observed  {row.observed}"]
        return "\n".join(out)


# --- OpenAPI component schemas ----------------------------------------------------------------

_MAP_KEYWORDS = {"properties", "patternProperties", "definitions", "$defs"}


def openapi_to_jsonschema(node):
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable: true`` becomes a ``null`` type
    (or an ``anyOf`` with ``{"type": "null"}`` when there is no ``type``), and 3.0's
    boolean ``exclusiveMinimum``/``exclusiveMaximum`` become numbers."""
    if isinstance(node, list):
        return [openapi_to_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "nullable":
            continue
        if key in _MAP_KEYWORDS and isinstance(value, dict):
            out[key] = {name: openapi_to_jsonschema(sub) for name, sub in value.items()}
        else:
            out[key] = openapi_to_jsonschema(value)
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), bool) and out.pop(bound) and limit in out:
            out[bound] = out.pop(limit)
    if node.get("nullable") is True:
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"] if "null" not in types else types
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


class OpenApiSchemas:
    """The component schemas of the service's own OpenAPI document, fetched once."""

    URI = "urn:scan-api:openapi"

    def __init__(self, base_url: str, timeout: float = 15):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._lock = threading.Lock()
        self._registry = None
        self._names: list[str] = []
        self._error: str | None = None
        self._validators: dict[str, Any] = {}

    def _load(self):
        with self._lock:
            if self._registry is not None or self._error is not None:
                return
            from referencing import Registry, Resource
            from referencing.jsonschema import DRAFT7
            try:
                response = requests.get(self.base_url + OPENAPI_PATH, timeout=self.timeout)
                response.raise_for_status()
                schemas = response.json()["components"]["schemas"]
            except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
                self._error = f"cannot load {OPENAPI_PATH}: {exc}"
                return
            document = {"components": {"schemas": {n: openapi_to_jsonschema(s) for n, s in schemas.items()}}}
            self._names = sorted(schemas)
            self._registry = Registry().with_resource(self.URI, Resource(contents=document, specification=DRAFT7))

    def check(self, instance, name: str) -> Check:
        expectation = f"matches schema {name}"
        self._load()
        if self._error:
            return Check(expectation, False, self._error)
        if name not in self._names:
            return Check(expectation, False, f"no component {name!r} (has: {', '.join(self._names)})")
        from jsonschema import Draft7Validator
        validator = self._validators.get(name)
        if validator is None:
            validator = Draft7Validator({"$ref": f"{self.URI}#/components/schemas/{name}"},
                                        registry=self._registry, format_checker=Draft7Validator.FORMAT_CHECKER)
            self._validators[name] = validator
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if not errors:
            return Check(expectation, True, "valid")
        first = errors[0]
        where = ".".join(str(p) for p in first.absolute_path) or "$"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return Check(expectation, False, f"at {where}: {short(first.message, 90)}{more}")


# --- configuration ---------------------------------------------------------------------------


@dataclass
class RunConfig:
    base_url: str
    sim_url: str
    operator: Operator = field(default_factory=Operator)
    # Where the service's workers reach the simulator's receivers (default: sim_url).
    hook_base_url: str | None = None
    timeout_scale: float = 1.0
    http_timeout: float = 15.0
    schemas: OpenApiSchemas | None = None

    def __post_init__(self):
        self.base_url = self.base_url.rstrip("/")
        self.sim_url = self.sim_url.rstrip("/")
        self.hook_base_url = (self.hook_base_url or self.sim_url).rstrip("/")
        if self.schemas is None:
            self.schemas = OpenApiSchemas(self.base_url, self.http_timeout)


@dataclass
class Observation:
    """What a step saw: an HTTP status (None when not HTTP), headers, and a body."""

    status: int | None
    headers: Any
    body: Any


class StepError(RuntimeError):
    """A step could not run (not an unmet expectation): the scenario stops."""


# --- one scenario --------------------------------------------------------------------------------


class ScenarioRun:
    def __init__(self, scenario: Scenario, config: RunConfig):
        self.scenario = scenario
        self.config = config
        self.run_id = secrets.token_hex(3)
        self.result = ScenarioResult(scenario.name, str(scenario.path or ""))
        self.accounts: dict[str, dict] = {}
        self.variables: dict[str, Any] = {"run": {"id": self.run_id}, "scenario": scenario.name, "_meta": {}}
        self.http = requests.Session()
        self.engine_changed = False
        self.sources_changed: set[str] = set()

    # rows

    def row(self, step: str, expectation: str, met: bool, observed: str) -> None:
        self.result.rows.append(Row(self.scenario.name, step, expectation, bool(met), observed))

    def add(self, step: str, check: Check) -> None:
        self.row(step, check.expectation, check.met, check.observed)

    def add_as(self, step: str, subject: str, check: Check, matcher) -> None:
        """A row whose expectation names ``subject`` instead of the path that was checked."""
        self.row(step, f"{subject} {describe(matcher)}", check.met, check.observed)

    # running

    def run(self) -> ScenarioResult:
        started = time.monotonic()
        try:
            self._run()
        finally:
            if self.engine_changed:
                self._restore_engine()
            for source_id in sorted(self.sources_changed):
                try:
                    self.http.post(f"{self.config.sim_url}/_sim/engine/sources/{source_id}", json={"mode": "ok"},
                                   timeout=self.config.http_timeout).raise_for_status()
                except requests.RequestException as exc:
                    self.row("teardown", f"source {source_id} restored to ok", False, _error_text(exc))
            self.http.close()
            self.result.duration = time.monotonic() - started
            self.result.accounts = {name: {k: v for k, v in account.items()
                                           if k not in ("api_key", "receiver_secrets", "receivers", "tag")}
                                    for name, account in self.accounts.items()}
        return self.result

    def _run(self) -> None:
        try:
            self.setup()
        except Exception as exc:
            self.row("setup", "customers, keys and receivers are set up", False, _error_text(exc))
            return
        total = len(self.scenario.steps)
        for step in self.scenario.steps:
            for iteration in range(1, step.repeat + 1):
                label = str(step.number) if step.repeat == 1 else f"{step.number}.{iteration}"
                self.variables["i"] = iteration
                try:
                    self.execute(step, label)
                except Exception as exc:
                    self.row(f"{label} {step.action}", "step runs", False, _error_text(exc))
                    skipped = total - step.number
                    if skipped:
                        self.row(f"{label} {step.action}", f"{skipped} later step(s) skipped", False,
                                 "stopped by the error above")
                    return

    def setup(self) -> None:
        if self.scenario.engine:
            self.set_engine(self.scenario.engine)
        op = self.config.operator
        for name, setup in self.scenario.customers.items():
            tag = f"{self.scenario.name}-{name}-{self.run_id}"
            customer = op.create_customer(f"QA {tag}", setup.tier, setup.credits)
            customer_id = customer["customer_id"]
            if setup.limits:
                op.set_limits(customer_id, **setup.limits)
            webhook_url = secret = receiver = None
            if setup.receiver is not None:
                receiver = re.sub(r"[^A-Za-z0-9_.-]", "-", tag)
                secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()  # the form keys accept
                answer = self.http.post(f"{self.config.sim_url}/_sim/receivers/{receiver}",
                                        json={"secret": secret, **setup.receiver}, timeout=self.config.http_timeout)
                if answer.status_code not in (200, 201):
                    raise StepError(f"simulator refused receiver {receiver}: {answer.status_code} {answer.text[:200]}")
                webhook_url = f"{self.config.hook_base_url}/_sim/hooks/{receiver}"
            key = op.issue_key(customer_id, f"QA {tag}", webhook_url, secret, test=setup.key_mode == "test")
            self.accounts[name] = {
                "customer_id": customer_id, "tier": setup.tier, "credits": setup.credits,
                "key_id": key["key_id"], "api_key": key["api_key"], "key_mode": setup.key_mode,
                "receiver": receiver, "webhook_url": webhook_url, "webhook_secret": secret,
                "receiver_secrets": [secret] if receiver else [],
                # Further receivers by the name a step gave them (``receiver: {name: ...}``).
                "tag": re.sub(r"[^A-Za-z0-9_.-]", "-", tag), "receivers": {},
            }
        self.variables["customers"] = self.accounts
        self.variables["customer"] = self.accounts[MAIN]
        shown = "; ".join(f"{n}: {a['customer_id']} {a['key_id']}" + (" (test)" if a["key_mode"] == "test" else "")
                          + (f" hook {a['receiver']}" if a["receiver"] else "")
                          for n, a in self.accounts.items())
        self.row("setup", "customers, keys and receivers are set up", True, shown)

    def execute(self, step, label: str) -> None:
        args = render(step.args, self.variables)
        expect = render(step.expect, self.variables)
        account = self.accounts[step.customer]
        shown = f"{label} {step.label_for(args)}"
        observation = getattr(self, f"do_{step.action}")(args, account, shown, expect)
        self.check(step.action, shown, observation, expect, account)
        if step.save:
            self.variables[step.save] = observation.body
            self.variables["_meta"][step.save] = {"_status": observation.status,
                                                  "_headers": dict(observation.headers or {})}

    # --- HTTP ------------------------------------------------------------------------------

    def api(self, method: str, path: str, account: dict, args: dict, json_body=None, extra_headers=None) -> Observation:
        headers = {"Accept": "application/json"}
        if "authorization" in args:
            if args["authorization"] is not None:
                headers["Authorization"] = str(args["authorization"])
        else:
            headers["Authorization"] = f"Bearer {account['api_key']}"
        headers.update({k: str(v) for k, v in (args.get("headers") or {}).items()})
        headers.update(extra_headers or {})
        kwargs = {} if json_body is None else {"json": json_body}
        response = self.http.request(method, self.config.base_url + path, headers=headers,
                                     timeout=self.config.http_timeout, **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return Observation(response.status_code, response.headers, body)

    @staticmethod
    def _idempotency(args: dict) -> dict:
        key = args.get("idempotency_key")
        return {"Idempotency-Key": str(key)} if key is not None else {}

    def do_create(self, args, account, label, expect) -> Observation:
        body = args["body"] if "body" in args else {k: args[k] for k in ("target", "kind") if k in args}
        return self.api("POST", "/api/v1/scan", account, args, body, self._idempotency(args))

    def do_bulk(self, args, account, label, expect) -> Observation:
        if "body" in args:
            body = args["body"]
        else:
            targets = args.get("targets") or []
            body = {"targets": [t if isinstance(t, dict) else {"target": t} for t in targets]}
        return self.api("POST", "/api/v1/scan/bulk", account, args, body, self._idempotency(args))

    def do_read(self, args, account, label, expect) -> Observation:
        return self.api("GET", f"/api/v1/scan/{_id(args, 'scan')}", account, args)

    def do_read_bulk(self, args, account, label, expect) -> Observation:
        return self.api("GET", f"/api/v1/scan/bulk/{_id(args, 'bulk')}", account, args)

    def do_request(self, args, account, label, expect) -> Observation:
        path = str(args["path"])
        return self.api(str(args.get("method", "GET")).upper(), path if path.startswith("/") else "/" + path,
                        account, args, args.get("json"))

    def do_wait(self, args, account, label, expect) -> Observation:
        if "scan" in args:
            path, final = f"/api/v1/scan/{_id(args, 'scan')}", (lambda b: b.get("status") in ("completed", "failed"))
        else:
            path, final = f"/api/v1/scan/bulk/{_id(args, 'bulk')}", (lambda b: b.get("all_done") is True)
        conditions = dict(args.get("until") or {})
        if "status" in args:
            wanted = args["status"]
            conditions["status"] = {"in": wanted} if isinstance(wanted, list) else wanted
        if "all_done" in args:
            conditions["all_done"] = args["all_done"]
        timeout, interval = self._timing(args, 0.5)

        def attempt():
            try:
                observation = self.api("GET", path, account, {})
            except requests.ConnectionError as exc:  # a restart or a refused connection: keep polling
                return Observation(None, {}, {"error": _error_text(exc)}), False, False
            met = observation.status == 200 and all(
                check_path(observation.body, p, m).met for p, m in conditions.items())
            # Give up early when waiting cannot help: a client error, or a final state that is not the one wanted.
            hopeless = (observation.status is not None and 400 <= observation.status < 500) or (
                observation.status == 200 and isinstance(observation.body, dict) and final(observation.body))
            return observation, met, hopeless

        observation, met, elapsed, polls = _poll(attempt, timeout, interval)
        wanted_text = " and ".join(f"{p} {describe(m)}" for p, m in conditions.items())
        seen = ", ".join(f"{p}={short(resolve_path(observation.body, p)[1][0], 30)}" for p in conditions
                         if not resolve_path(observation.body, p)[0])
        self.row(label, f"reaches {wanted_text} within {timeout:g}s", met,
                 f"{'after' if met else 'gave up after'} {elapsed:.1f}s, {polls} polls: "
                 f"HTTP {observation.status} {seen}")
        return observation

    # --- simulator -------------------------------------------------------------------------

    def set_engine(self, args: dict) -> Observation:
        body = {"mode": args["mode"], **({"every": args["every"]} if "every" in args else {})}
        response = self.http.post(f"{self.config.sim_url}/_sim/engine/mode", json=body,
                                  timeout=self.config.http_timeout)
        self.engine_changed = True
        if response.status_code != 200:
            raise StepError(f"simulator refused engine mode {body}: {response.status_code} {response.text[:200]}")
        return Observation(response.status_code, response.headers, response.json())

    def _restore_engine(self) -> None:
        try:
            self.http.post(f"{self.config.sim_url}/_sim/engine/mode", json={"mode": "up"},
                           timeout=self.config.http_timeout).raise_for_status()
        except requests.RequestException as exc:
            self.row("teardown", "engine mode restored to up", False, _error_text(exc))

    def do_engine(self, args, account, label, expect) -> Observation:
        return self.set_engine(args)

    def do_source(self, args, account, label, expect) -> Observation:
        """Set a simulated source's mode (E8); every source changed is set back to ``ok`` at the end."""
        response = self.http.post(f"{self.config.sim_url}/_sim/engine/sources/{args['id']}",
                                  json={"mode": args["mode"]}, timeout=self.config.http_timeout)
        if response.status_code != 200:
            raise StepError(f"simulator refused source mode {args}: {response.status_code} {response.text[:200]}")
        self.sources_changed.add(args["id"])
        return Observation(response.status_code, response.headers, response.json())

    def _receiver(self, account: dict, name: str | None = None) -> str:
        if name is not None:
            if name not in account["receivers"]:
                raise StepError(f"customer {self._name_of(account)} has no receiver {name!r} "
                                f"(a receiver step with name: {name} creates it)")
            return account["receivers"][name]["receiver"]
        if not account["receiver"]:
            raise StepError(f"customer {self._name_of(account)} has no receiver (add receiver: to its setup)")
        return account["receiver"]

    def _receiver_secrets(self, account: dict, name: str | None) -> list[str]:
        return account["receivers"][name]["secrets"] if name is not None else account["receiver_secrets"]

    def do_receiver(self, args, account, label, expect) -> Observation:
        """Reconfigure the customer's receiver (it forgets what it received): another answer, a
        delay, or the secrets it verifies with (default: the ones it has). With ``name``, a further
        receiver of the customer, created on first use (default secrets: the customer's), whose
        ``hook_url`` the step's body gives, e.g. for a second webhook endpoint."""
        name = args.get("name")
        if name is not None and name not in account["receivers"]:
            account["receivers"][name] = {"receiver": f"{account['tag']}-{name}",
                                          "secrets": list(account["receiver_secrets"] or [account["tag"]])}
        receiver = self._receiver(account, name)
        secrets_ = _secret_list(args.get("secrets", self._receiver_secrets(account, name)))
        body = {"secrets": secrets_, "responses": args.get("responses", [200]), "delay_ms": args.get("delay_ms", 0)}
        response = self.http.post(f"{self.config.sim_url}/_sim/receivers/{receiver}", json=body,
                                  timeout=self.config.http_timeout)
        if response.status_code not in (200, 201):
            raise StepError(f"simulator refused receiver {receiver}: {response.status_code} {response.text[:200]}")
        if name is None:
            account["receiver_secrets"] = secrets_
        else:
            account["receivers"][name]["secrets"] = secrets_
        self.row(label, "receiver reconfigured (its deliveries cleared)", True,
                 f"responses {body['responses']}, delay {body['delay_ms']} ms, {_count(len(secrets_), 'secret', 'secrets')}")
        # Where the service's workers reach it (the simulator names itself as this runner reaches it).
        return Observation(response.status_code, response.headers,
                           {**response.json(), "hook_url": f"{self.config.hook_base_url}/_sim/hooks/{receiver}"})

    def do_operator(self, args, account, label, expect) -> Observation:
        """An operator CLI command (``--json`` added); the body is its JSON answer."""
        command = args["command"]
        words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
        code, answer, output = self.config.operator.attempt_cli(words)
        if "exit" not in expect:
            self.row(label, "operator command exits 0", code == 0, f"exit {code}" + (f": {output}" if code else ""))
        return Observation(code, {}, answer if answer is not None else {"output": output})

    def do_webhooks(self, args, account, label, expect) -> Observation:
        name = args.get("receiver")
        receiver = self._receiver(account, name)
        # The secrets in force, current first: X-Service-Signature is recomputed with the first,
        # and webhook-signature must carry an entry for each.
        default = [account["webhook_secret"]] if name is None else account["receivers"][name]["secrets"][:1]
        secrets_ = _secret_list(args.get("secrets", default))
        wanted = args.get("count", expect.get("count") if isinstance(expect.get("count"), int) else 1)
        if not isinstance(wanted, int) or isinstance(wanted, bool):
            raise StepError("webhooks: count must be an integer")
        timeout, interval = self._timing(args, 0.25)
        url = f"{self.config.sim_url}/_sim/receivers/{receiver}/deliveries"

        def attempt():
            response = self.http.get(url, timeout=self.config.http_timeout)
            response.raise_for_status()
            deliveries = response.json().get("deliveries", [])
            return deliveries, len(deliveries) >= wanted, False

        deliveries, met, elapsed, polls = _poll(attempt, timeout, interval)
        self.row(label, f"at least {_count(wanted, 'delivery', 'deliveries')} received within {timeout:g}s", met,
                 f"{len(deliveries)} after {elapsed:.1f}s")
        return Observation(None, {}, {"count": len(deliveries),
                                      "deliveries": [_delivery(d, secrets_) for d in deliveries]})

    # --- operator -----------------------------------------------------------------------------

    def do_attempts(self, args, account, label, expect) -> Observation:
        wanted = args.get("deliveries", 1)
        final = args.get("final", True)
        until = args.get("until") or {}
        timeout, interval = self._timing(args, 1.0)

        def attempt():
            body = _attempt_body(self.config.operator.attempts(account["key_id"]))
            met = (len(body["deliveries"]) >= wanted
                   and (not final or all(d["status"] != "pending" for d in body["deliveries"]))
                   and all(check_path(body, p, m).met for p, m in until.items()))
            return body, met, False

        body, met, elapsed, polls = _poll(attempt, timeout, interval)
        wanted_text = (f"at least {_count(wanted, 'delivery', 'deliveries')}" + (", all final" if final else "")
                       + "".join(f", {p} {describe(m)}" for p, m in until.items()))
        self.row(label, f"attempt log shows {wanted_text} within {timeout:g}s", met,
                 f"after {elapsed:.1f}s: deliveries {short(body['statuses'], 40)}, "
                 f"attempts {short(body['status_codes'], 40)}")
        return Observation(None, {}, body)

    def do_credits(self, args, account, label, expect) -> Observation:
        customer = self.config.operator.customer(account["customer_id"])
        return Observation(None, {}, customer)

    # --- expectations ---------------------------------------------------------------------------

    def check(self, action: str, label: str, obs: Observation, expect: dict, account: dict) -> None:
        body = obs.body
        if action == "webhooks":
            self.check_webhooks(label, body, expect)
            return
        if action == "attempts":
            for key, path, text in (("count", "count", "attempts logged"),
                                    ("status_codes", "status_codes", "attempt status codes"),
                                    ("delivery_status", "deliveries.*.status", "each delivery's status")):
                if key in expect:
                    self.add_as(label, text, check_path(body, path, expect[key]), expect[key])
            for path, matcher in (expect.get("body") or {}).items():
                self.add(label, check_path(body, path, matcher, prefix="log."))
            return
        if action == "operator":
            if "exit" in expect:
                self.add_as(label, "operator exit status", check_path({"exit": obs.status}, "exit", expect["exit"]),
                            expect["exit"])
            if "error" in expect:
                self.add(label, check_path(body, "error", expect["error"], prefix="answer."))
            for path, matcher in (expect.get("body") or {}).items():
                self.add(label, check_path(body, path, matcher, prefix="answer."))
            return
        if action == "receiver":
            return
        if action == "credits":
            if "balance" in expect:
                self.add_as(label, "balance (operator)", check_path(body, "balance", expect["balance"]),
                            expect["balance"])
            for path, matcher in (expect.get("body") or {}).items():
                self.add(label, check_path(body, path, matcher, prefix="customer."))
            return
        if "status" in expect:
            error = f" {body.get('error')}" if isinstance(body, dict) and body.get("error") else ""
            check = check_path({"status": obs.status}, "status", expect["status"], prefix="HTTP ")
            self.row(label, check.expectation, check.met, f"{obs.status}{error}")
        if "error" in expect:
            self.add(label, check_path(body, "error", expect["error"], prefix="body."))
        for name, matcher in (expect.get("headers") or {}).items():
            self.add(label, check_path(obs.headers, name, matcher, prefix="header ", as_text=True))
        for path, matcher in (expect.get("body") or {}).items():
            self.add(label, check_path(body, path, matcher, prefix="body."))
        if "schema" in expect:
            self.check_schema(label, body, expect["schema"])

    def check_schema(self, label: str, body, spec, prefix: str = "body", base: str = "") -> None:
        """``spec``: a component name for the whole body, or ``{path: name}``; ``base`` is
        prepended to each path (not shown), e.g. ``deliveries.*.body.`` for webhooks."""
        targets = spec.items() if isinstance(spec, dict) else [("$", spec)]
        for path, name in targets:
            whole = path in ("", "$")
            multi, values = resolve_path(body, (base.rstrip(".") if whole else base + path) or "$")
            shown = prefix if whole else f"{prefix}.{path}"
            if not values or any(v is MISSING for v in values):
                self.row(label, f"{shown} matches schema {name}", False, "(missing)")
                continue
            checks = [self.config.schemas.check(v, str(name)) for v in values]
            bad = [c for c in checks if not c.met]
            observed = bad[0].observed if bad else (f"all {len(checks)} valid" if multi else "valid")
            self.row(label, f"{shown} matches schema {name}", not bad, observed)

    def check_webhooks(self, label: str, body: dict, expect: dict) -> None:
        if "count" in expect:
            self.add(label, check_path(body, "count", expect["count"], prefix="deliveries "))
        if "signature_valid" in expect:
            wanted = expect["signature_valid"]
            verb = "matches" if wanted is True else ("does not match" if wanted is False else describe(wanted))
            for path, text in (("signature_valid", "X-Service-Signature {} (receiver's check)"),
                               ("signature_recomputed", "X-Service-Signature {} HMAC-SHA256(secret, raw body)")):
                check = check_path(body, f"deliveries.*.{path}", wanted)
                self.row(label, f"each delivery: {text.format(verb)}", check.met, check.observed)
        if "webhook_signature_valid" in expect:
            wanted = expect["webhook_signature_valid"]
            verb = "verifies" if wanted is True else ("does not verify" if wanted is False else describe(wanted))
            for path, text in (("webhook_signature_valid",
                                "webhook-signature {} (receiver's check: one of its secrets, timestamp within 5 min)"),
                               ("webhook_signature_recomputed",
                                "webhook-signature {} (an entry per secret of the step, recomputed)")):
                check = check_path(body, f"deliveries.*.{path}", wanted)
                self.row(label, f"each delivery: {text.format(verb)}", check.met, check.observed)
        for name, matcher in (expect.get("headers") or {}).items():
            check = check_path(body, f"deliveries.*.headers.{name}", matcher, as_text=True)
            self.row(label, f"each delivery header {name} {describe(matcher)}", check.met, check.observed)
        for path, matcher in (expect.get("body") or {}).items():
            check = check_path(body, f"deliveries.*.body.{path}" if path not in ("", "$") else "deliveries.*.body",
                               matcher)
            self.row(label, f"each delivery body.{path} {describe(matcher)}", check.met, check.observed)
        if "schema" in expect:
            self.check_schema(label, body, expect["schema"], prefix="each delivery body", base="deliveries.*.body.")
        for path, matcher in (expect.get("deliveries") or {}).items():
            self.add(label, check_path(body["deliveries"], path, matcher, prefix="deliveries."))

    # --- helpers --------------------------------------------------------------------------------

    def _timing(self, args: dict, default_interval: float) -> tuple[float, float]:
        timeout = float(args.get("timeout", DEFAULT_TIMEOUT)) * self.config.timeout_scale
        interval = max(0.05, float(args.get("interval", default_interval)))
        return timeout, interval

    def _name_of(self, account: dict) -> str:
        return next((n for n, a in self.accounts.items() if a is account), "?")


def _id(args: dict, key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise StepError(f"{key} id must be a non-empty string, got {value!r}")
    return quote(value, safe="")


def _poll(attempt: Callable[[], tuple[Any, bool, bool]], timeout: float, interval: float):
    """Call ``attempt`` until it reports success or hopelessness, or the deadline passes.

    Returns ``(last value, met, elapsed seconds, number of calls)``. No sleep outlives the deadline.
    """
    started = time.monotonic()
    deadline = started + timeout
    polls = 0
    while True:
        value, met, hopeless = attempt()
        polls += 1
        now = time.monotonic()
        if met or hopeless or now >= deadline:
            return value, met, now - started, polls
        time.sleep(min(interval, max(0.0, deadline - now)))


def _secret_list(value) -> list[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        raise StepError(f"secrets must be a non-empty list of secrets, got {short(value, 60)}")
    return values


def _delivery(raw: dict, secrets_: list[str]) -> dict:
    """A recorded delivery, with the runner's own recomputation of both signatures (§6.3, D16):
    ``signature_by`` / ``webhook_signature_by`` say, per secret of ``secrets_``, whether it signed."""
    text = raw.get("body") or ""
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    headers = raw.get("headers") or {}
    signature = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
    raw_bytes = text.encode("utf-8")
    signature_by = [signature is not None and hmac.compare_digest(
        ("sha256=" + hmac.new(s.encode(), raw_bytes, hashlib.sha256).hexdigest()).encode(), str(signature).encode())
        for s in secrets_]
    standard_by = standard_signed_by(secrets_, raw_bytes, headers)
    entries = next((v for k, v in headers.items() if k.lower() == "webhook-signature"), "") or ""
    return {"headers": headers, "body": body, "raw_body": text, "signature_valid": raw.get("signature_valid"),
            "signature_recomputed": bool(signature_by and signature_by[0]), "signature_by": signature_by,
            "webhook_signature_valid": raw.get("webhook_signature_valid"),
            "webhook_signature_recomputed": bool(standard_by) and all(standard_by),
            "webhook_signature_by": standard_by, "webhook_signature_entries": len(entries.split()),
            "response_status": raw.get("response_status"),
            "received_at": raw.get("received_at"), "received_at_ms": raw.get("received_at_ms")}


def _attempt_body(log: dict) -> dict:
    deliveries = log.get("deliveries") or []
    attempts = [{**a, "delivery_id": d["delivery_id"]} for d in deliveries for a in d.get("attempts") or []]
    return {"count": len(attempts), "deliveries": deliveries, "attempts": attempts,
            "status_codes": [a.get("status_code") for a in attempts],
            "errors": [a.get("error") for a in attempts],
            "statuses": [d.get("status") for d in deliveries]}


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _error_text(exc: BaseException) -> str:
    return short(f"{exc.__class__.__name__}: {exc}", 200)


# --- running many ------------------------------------------------------------------------------


def _load(item) -> Scenario:
    return item if isinstance(item, Scenario) else load_scenario(item)


def run_scenario(item: Scenario | str | Path, config: RunConfig) -> ScenarioResult:
    """Run one scenario (a loaded ``Scenario`` or a file path); never raises for the scenario's faults."""
    try:
        scenario = _load(item)
    except ScenarioError as exc:
        name = Path(str(item)).stem
        row = Row(name, "load", "scenario file is valid", False, str(exc))
        result = ScenarioResult(name, str(item), [row])
    else:
        result = ScenarioRun(scenario, config).run()
    return result


# --- the table ---------------------------------------------------------------------------------

COLUMNS = ("scenario", "step", "expectation", "result", "observed")
WIDTHS = (26, 30, 72, 6, 70)


def _cell(text: str, width: int) -> str:
    text = str(text).replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def format_table(results: list[ScenarioResult], missed_only: bool = False) -> str:
    rows = [r for result in results for r in result.rows if not (missed_only and r.met)]
    cells = [[_cell(v, w) for v, w in zip((r.scenario, r.step, r.expectation, "met" if r.met else "MISSED", r.observed),
                                          WIDTHS)] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(COLUMNS)]
    line = lambda values: " | ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    out = [line(COLUMNS), "-+-".join("-" * w for w in widths)]
    previous = None
    for row in cells:
        shown = list(row)
        if row[0] == previous:
            shown[0] = ""  # one scenario name per block reads better
        previous = row[0]
        out.append(line(shown))
    return "\n".join(out)


# --- command line: pytest on the scenario files ------------------------------------------------

PLUGIN = "simulator.scenarios.plugin"


def build_parser(prog: str = "python -m simulator scenario") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, usage=f"{prog} NAME|all [NAME...] [options] [pytest options]",
        description="Run QA scenarios with pytest: against a stack started for the run, or a running service.",
        epilog="Other options go to pytest (-k EXPR, -m TAG, -v, -n auto, --junitxml FILE). "
               "Scenario format and how to add one: docs/scenarios.md")
    parser.add_argument("--base-url", default=None, help="a running service (default: start a stack)")
    parser.add_argument("--sim-url", default=None, help="the simulator that service uses as its engine")
    parser.add_argument("--hook-base-url", default=None,
                        help="the simulator as the service's workers reach it (default: --sim-url)")
    parser.add_argument("--operator", default=None, metavar="CMD",
                        help="operator CLI prefix (default: '<this python> -m flask --app wsgi', run in the "
                             "project root with this environment)")
    parser.add_argument("--operator-query", default=None, metavar="CMD",
                        help="attempt-log query prefix (default: '<this python> -m simulator.scenarios.operator_query')")
    parser.add_argument("--parallel", type=int, default=None, help="scenarios run at once on one stack (default 4)")
    parser.add_argument("--timeout-scale", type=float, default=None, help="multiply every wait's timeout")
    parser.add_argument("--time-scale", type=float, default=None, help="the started simulator's SIM_TIME_SCALE")
    parser.add_argument("--api-port", type=int, default=None, metavar="PORT",
                        help="the started API's port (default: $SCENARIO_API_PORT, else a free one)")
    parser.add_argument("--sim-port", type=int, default=None, metavar="PORT",
                        help="the started simulator's port (default: $SCENARIO_SIM_PORT, else a free one)")
    return parser


def pytest_args(argv: list[str], prog: str = "python -m simulator scenario") -> list[str]:
    """The pytest command line for ``NAME|all [NAME...] [options]``; ``ScenarioError`` for a usage error."""
    from simulator.scenarios.operator import PROJECT_ROOT
    names: list[str] = []
    rest = list(argv)
    while rest and not rest[0].startswith("-"):
        names.append(rest.pop(0))
    args, passed_on = build_parser(prog).parse_known_args(rest)
    if not names:
        raise ScenarioError("name the scenarios to run (file stems in simulator/scenarios, or .yaml paths), or 'all'")
    if bool(args.base_url) != bool(args.sim_url):
        raise ScenarioError("--base-url and --sim-url go together")
    targets = [str(SCENARIO_DIR)] if names == ["all"] else [str(p) for p in resolve_names(names, SCENARIO_DIR)]
    options = {"--scenario-base-url": args.base_url, "--scenario-sim-url": args.sim_url,
               "--scenario-hook-base-url": args.hook_base_url, "--scenario-operator": args.operator,
               "--scenario-operator-query": args.operator_query, "--scenario-parallel": args.parallel,
               "--scenario-timeout-scale": args.timeout_scale, "--scenario-time-scale": args.time_scale,
               "--scenario-api-port": args.api_port, "--scenario-sim-port": args.sim_port}
    # Files outside the project (a scenario of one's own) are named relative to their folder.
    inside = all(Path(t).resolve().is_relative_to(PROJECT_ROOT) for t in targets)
    rootdir = PROJECT_ROOT if inside else Path(os.path.commonpath([Path(t).resolve().parent for t in targets]))
    # The project's pytest settings (its markers among them: no "unknown mark" warnings) are in
    # pyproject.toml, wherever the scenario files are.
    return [*targets, "-p", PLUGIN, "--rootdir", str(rootdir), "-c", str(PROJECT_ROOT / "pyproject.toml"),
            *[f"{name}={value}" for name, value in options.items() if value is not None], *passed_on]


def main(argv: list[str] | None = None, prog: str = "python -m simulator scenario") -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        command = pytest_args(argv, prog)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import pytest
    status = int(pytest.main(command))
    # pytest: 1 tests failed; 2 interrupted (an invalid file); 3 internal; 4 usage; 5 nothing selected.
    return status if status in (0, 1) else 2


if __name__ == "__main__":
    sys.exit(main())
