"""The scenario file format: loading and checking YAML files, ``{{variables}}``, paths and matchers.

A scenario is data, so a new one needs no new code. The format is described with an
example in ``docs/scenarios.md``; in short::

    name: email_poll                      # optional, defaults to the file name
    description: ...
    setup:                                # the main customer ("main")
      tier: business                      # pro | business | enterprise (default business)
      credits: 1000                       # default 1000
      limits: {inflight: 3, hour: 20, day: 100}   # optional per-customer overrides
      receiver: {responses: [200], delay_ms: 0}   # optional: the key gets a webhook URL and secret
      key_mode: test                      # optional: a test key (service_test_…, sandbox engine); default live
      engine: up                          # optional engine mode for the whole scenario
    customers:                            # optional further customers, same keys as setup
      other: {tier: business, credits: 10}
    steps:
      - create: {target: jane.doe@example.com, kind: email}
        save: scan
        expect: {status: 202, schema: ScanCreated}
      - wait: {scan: "{{scan.scan_id}}", status: completed, timeout: 30}
        expect: {body: {result.phone_profile: null}}

Everything here is pure (no I/O besides reading the file), so it is easy to test.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.accounts.models import TIERS

ENGINE_MODES = ("up", "down", "flaky")
MAIN = "main"

# Actions a step can take, and the arguments each accepts.
ACTIONS: dict[str, set[str]] = {
    "create": {"target", "kind", "idempotency_key", "body", "headers", "authorization"},
    "bulk": {"targets", "idempotency_key", "body", "headers", "authorization"},
    "read": {"scan", "headers", "authorization"},
    "read_bulk": {"bulk", "headers", "authorization"},
    "request": {"method", "path", "json", "headers", "authorization"},
    "wait": {"scan", "bulk", "status", "all_done", "until", "timeout", "interval"},
    "engine": {"mode", "every"},
    "webhooks": {"count", "timeout", "interval", "secrets", "receiver"},
    "attempts": {"deliveries", "final", "until", "timeout", "interval"},
    "credits": set(),
    "receiver": {"responses", "delay_ms", "secrets", "name"},
    "operator": {"command"},
    "source": {"id", "mode"},
}
# Arguments given as a bare value instead of a mapping: ``read: "{{scan.scan_id}}"``.
SCALAR_ARGUMENT = {"read": "scan", "read_bulk": "bulk", "engine": "mode", "webhooks": "count",
                   "operator": "command"}
HTTP_ACTIONS = {"create", "bulk", "read", "read_bulk", "request", "wait", "engine", "source"}
# A simulated engine source's modes (E8): ``source: {id: gravatar, mode: wrong}``.
SOURCE_MODES = ("ok", "error", "slow", "wrong")
STEP_KEYS = {"name", "save", "expect", "customer", "repeat"}
SETUP_KEYS = {"tier", "credits", "limits", "receiver", "key_mode", "engine"}
# The key issued to each customer: live (service_live_…) or test (service_test_…, keys issue --test).
KEY_MODES = ("live", "test")
CUSTOMER_KEYS = SETUP_KEYS - {"engine"}
LIMIT_KEYS = {"inflight", "hour", "day"}
RECEIVER_KEYS = {"responses", "delay_ms"}
SCENARIO_KEYS = {"name", "description", "tags", "setup", "customers", "steps", "exclusive"}

# Which expectation keys each action understands (docs/scenarios.md explains them).
_HTTP_EXPECT = {"status", "error", "body", "schema", "headers"}
EXPECT_KEYS: dict[str, set[str]] = {
    **{action: set(_HTTP_EXPECT) for action in HTTP_ACTIONS},
    "webhooks": {"count", "signature_valid", "webhook_signature_valid", "headers", "body", "schema", "deliveries"},
    "attempts": {"count", "status_codes", "delivery_status", "body"},
    "credits": {"balance", "body"},
    "receiver": set(),
    "operator": {"exit", "error", "body"},
}

DEFAULT_TIMEOUT = 30.0


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the place."""


@dataclass
class CustomerSetup:
    name: str
    tier: str = "business"
    credits: int = 1000
    limits: dict[str, int] = field(default_factory=dict)
    receiver: dict | None = None
    key_mode: str = "live"


@dataclass
class Step:
    number: int
    action: str
    args: dict
    expect: dict
    save: str | None = None
    customer: str = MAIN
    repeat: int = 1
    name: str | None = None

    @property
    def label(self) -> str:
        """A short description for the table and the progress line."""
        return self.label_for(self.args)

    def label_for(self, args: dict) -> str:
        """``label`` with the step's arguments as rendered for this run."""
        if self.name:
            return f"{self.action}: {self.name}"
        if self.action == "create":
            detail = args.get("target", "(body)")
        elif self.action == "bulk":
            targets = args.get("targets")
            detail = f"{len(targets)} targets" if isinstance(targets, list) else "(body)"
        elif self.action in ("read", "read_bulk"):
            detail = ""
        elif self.action == "request":
            detail = f"{args.get('method', 'GET')} {args.get('path', '')}"
        elif self.action == "wait":
            what = "bulk" if "bulk" in args else "scan"
            until = args.get("status") or ("all_done" if args.get("all_done") else "") or "until"
            detail = f"{what} {until if isinstance(until, str) else '/'.join(map(str, until))}"
        elif self.action == "engine":
            detail = str(args.get("mode", ""))
        elif self.action == "source":
            detail = f"{args.get('id', '')} {args.get('mode', '')}"
        elif self.action == "webhooks":
            detail = " ".join(part for part in (str(args["count"]) if "count" in args else "",
                                                f"at {args['receiver']}" if args.get("receiver") else "") if part)
        elif self.action == "operator":
            command = args.get("command")
            words = command.split() if isinstance(command, str) else [str(w) for w in command or []]
            detail = " ".join(words[:2])
        elif self.action == "receiver":
            detail = (f"{args['name']} " if args.get("name") else "") + "/".join(
                map(str, args.get("responses", [200]))) + (f" +{args['delay_ms']}ms" if args.get("delay_ms") else "")
        else:
            detail = ""
        who = f" [{self.customer}]" if self.customer != MAIN else ""
        return f"{self.action} {detail}".strip() + who


@dataclass
class Scenario:
    name: str
    path: Path | None
    description: str
    customers: dict[str, CustomerSetup]
    engine: dict | None
    steps: list[Step]
    exclusive_flag: bool = False
    tags: tuple[str, ...] = ()

    @property
    def exclusive(self) -> bool:
        """Whether it changes state shared by all scenarios (the engine's mode): run it alone."""
        return self.exclusive_flag or self.engine is not None or any(s.action in ("engine", "source")
                                                                     for s in self.steps)


# --- loading ---------------------------------------------------------------------------


def parse_scenario(data: Any, path: Path | None = None, default_name: str | None = None) -> Scenario:
    where = str(path) if path else "scenario"
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: the file must hold a mapping")
    _no_unknown(data, SCENARIO_KEYS, where)
    name = data.get("name") or default_name or (path.stem if path else "scenario")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ScenarioError(f"{where}: name must be letters, digits, '_', '.' or '-'")
    setup = data.get("setup") or {}
    if not isinstance(setup, dict):
        raise ScenarioError(f"{where}: setup must be a mapping")
    _no_unknown(setup, SETUP_KEYS, f"{where}: setup")
    customers = {MAIN: _customer(MAIN, setup, f"{where}: setup")}
    extra = data.get("customers") or {}
    if not isinstance(extra, dict):
        raise ScenarioError(f"{where}: customers must be a mapping of name to setup")
    for cname, csetup in extra.items():
        if cname == MAIN or not re.fullmatch(r"[A-Za-z0-9_-]+", str(cname)):
            raise ScenarioError(f"{where}: customer name {cname!r} is not allowed")
        csetup = csetup or {}
        if not isinstance(csetup, dict):
            raise ScenarioError(f"{where}: customers.{cname} must be a mapping")
        _no_unknown(csetup, CUSTOMER_KEYS, f"{where}: customers.{cname}")
        customers[cname] = _customer(cname, csetup, f"{where}: customers.{cname}")
    engine = _engine_args(setup["engine"], f"{where}: setup.engine") if "engine" in setup else None
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ScenarioError(f"{where}: steps must be a non-empty list")
    steps = [_step(i + 1, raw, customers, f"{where}: step {i + 1}") for i, raw in enumerate(raw_steps)]
    tags = data.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ScenarioError(f"{where}: tags must be a list of names")
    return Scenario(name=name, path=path, description=str(data.get("description") or "").strip(),
                    customers=customers, engine=engine, steps=steps,
                    exclusive_flag=bool(data.get("exclusive", False)), tags=tuple(tags))


def _no_unknown(mapping: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(map(str, mapping)) - allowed)
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _int(value, where: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ScenarioError(f"{where} must be an integer >= {minimum}")
    return value


def _customer(name: str, setup: dict, where: str) -> CustomerSetup:
    tier = setup.get("tier", "business")
    if tier not in TIERS:
        raise ScenarioError(f"{where}.tier must be one of {', '.join(TIERS)}")
    credits = _int(setup.get("credits", 1000), f"{where}.credits")
    limits = setup.get("limits") or {}
    if not isinstance(limits, dict):
        raise ScenarioError(f"{where}.limits must be a mapping")
    _no_unknown(limits, LIMIT_KEYS, f"{where}.limits")
    limits = {k: _int(v, f"{where}.limits.{k}") for k, v in limits.items()}
    receiver = setup.get("receiver")
    if receiver is not None:
        if receiver is True:
            receiver = {}
        if not isinstance(receiver, dict):
            raise ScenarioError(f"{where}.receiver must be a mapping {{responses, delay_ms}}")
        _no_unknown(receiver, RECEIVER_KEYS, f"{where}.receiver")
        responses = receiver.get("responses", [200])
        if not isinstance(responses, list) or not responses or not all(
                isinstance(r, int) and 200 <= r <= 599 for r in responses):
            raise ScenarioError(f"{where}.receiver.responses must be a non-empty list of HTTP statuses")
        receiver = {"responses": responses, "delay_ms": _int(receiver.get("delay_ms", 0), f"{where}.receiver.delay_ms")}
    key_mode = setup.get("key_mode", "live")
    if key_mode not in KEY_MODES:
        raise ScenarioError(f"{where}.key_mode must be one of {', '.join(KEY_MODES)}")
    return CustomerSetup(name=name, tier=tier, credits=credits, limits=limits, receiver=receiver, key_mode=key_mode)


def _engine_args(value, where: str) -> dict:
    args = {"mode": value} if isinstance(value, str) else value
    if not isinstance(args, dict) or args.get("mode") not in ENGINE_MODES:
        raise ScenarioError(f"{where}: engine mode must be one of {', '.join(ENGINE_MODES)}")
    _no_unknown(args, ACTIONS["engine"], where)
    if args["mode"] == "flaky":
        _int(args.get("every"), f"{where}: every", 1)
    return args


def _step(number: int, raw: Any, customers: dict, where: str) -> Step:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: a step must be a mapping with one action ({', '.join(ACTIONS)})")
    actions = [key for key in raw if key in ACTIONS]
    if len(actions) != 1:
        raise ScenarioError(f"{where}: a step needs exactly one action of {', '.join(ACTIONS)}; "
                            f"got {actions or 'none'}")
    action = actions[0]
    _no_unknown({k: v for k, v in raw.items() if k != action}, STEP_KEYS, where)
    args = raw[action]
    if action == "engine":
        args = _engine_args(args, where)
    elif args is None:
        args = {}
    elif not isinstance(args, dict):
        if action not in SCALAR_ARGUMENT:
            accepted = ", ".join(sorted(ACTIONS[action])) or "nothing"
            raise ScenarioError(f"{where}: {action} takes a mapping of {accepted}")
        args = {SCALAR_ARGUMENT[action]: args}
    _no_unknown(args, ACTIONS[action], f"{where}: {action}")
    if action == "wait" and ("scan" in args) == ("bulk" in args):
        raise ScenarioError(f"{where}: wait needs exactly one of scan or bulk")
    if action == "wait" and not ({"status", "all_done", "until"} & set(args)):
        raise ScenarioError(f"{where}: wait needs status, all_done or until")
    if action == "request" and "path" not in args:
        raise ScenarioError(f"{where}: request needs a path")
    if action == "source" and (not args.get("id") or args.get("mode") not in SOURCE_MODES):
        raise ScenarioError(f"{where}: source needs an id and a mode of {', '.join(SOURCE_MODES)}")
    if action == "operator" and not args.get("command"):
        raise ScenarioError(f"{where}: operator needs a command (a string or a list of words)")
    for key in ("until",):
        if key in args and not isinstance(args[key], dict):
            raise ScenarioError(f"{where}: {action}.{key} must be a mapping of path to expected value")
    expect = raw.get("expect") or {}
    if not isinstance(expect, dict):
        raise ScenarioError(f"{where}: expect must be a mapping")
    _no_unknown(expect, EXPECT_KEYS[action], f"{where}: expect")
    for key in ("body", "headers", "deliveries"):
        if key in expect and not isinstance(expect[key], dict):
            raise ScenarioError(f"{where}: expect.{key} must be a mapping of path to expected value")
    for key, matcher in _iter_matchers(expect):
        _check_matcher(matcher, f"{where}: expect.{key}")
    customer = raw.get("customer", MAIN)
    if customer not in customers:
        raise ScenarioError(f"{where}: unknown customer {customer!r} (declare it under customers:)")
    save = raw.get("save")
    if save is not None and (not isinstance(save, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", save)
                             or save in RESERVED_VARIABLES):
        raise ScenarioError(f"{where}: save must be a variable name (not {', '.join(sorted(RESERVED_VARIABLES))})")
    repeat = _int(raw.get("repeat", 1), f"{where}: repeat", 1)
    name = raw.get("name")
    return Step(number=number, action=action, args=args, expect=expect, save=save, customer=customer,
                repeat=repeat, name=str(name) if name is not None else None)


def _iter_matchers(expect: dict):
    for key in ("body", "headers", "deliveries"):
        for path, matcher in (expect.get(key) or {}).items():
            yield f"{key}.{path}", matcher


def _check_matcher(matcher, where: str) -> None:
    if is_matcher(matcher):
        if "matches" in matcher and isinstance(matcher["matches"], str) and "{{" not in matcher["matches"]:
            try:
                re.compile(matcher["matches"])
            except re.error as exc:
                raise ScenarioError(f"{where}: bad regular expression: {exc}") from None
        for key in ("in", "not_in"):
            if key in matcher and not isinstance(matcher[key], (list, str)):
                raise ScenarioError(f"{where}: {key} needs a list")
        if "type" in matcher and matcher["type"] not in TYPES:
            raise ScenarioError(f"{where}: type must be one of {', '.join(TYPES)}")


def scenario_files(directory: str | Path) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*.yaml") if not p.name.startswith("_"))


def resolve_names(names: list[str], directory: str | Path) -> list[Path]:
    """``all``, scenario names (file stems in ``directory``) or paths to YAML files."""
    directory = Path(directory)
    paths: list[Path] = []
    for name in names:
        if name == "all":
            found = scenario_files(directory)
            if not found:
                raise ScenarioError(f"no scenario files (*.yaml) in {directory}")
            paths.extend(found)
            continue
        candidate = Path(name)
        if candidate.suffix in (".yaml", ".yml") and candidate.exists():
            paths.append(candidate)
            continue
        in_dir = directory / f"{name}.yaml"
        if not in_dir.exists():
            known = ", ".join(p.stem for p in scenario_files(directory)) or "none"
            raise ScenarioError(f"unknown scenario {name!r} in {directory} (known: {known})")
        paths.append(in_dir)
    return list(dict.fromkeys(paths))


# --- variables ---------------------------------------------------------------------------

RESERVED_VARIABLES = {"run", "scenario", "customer", "customers", "i"}
TEMPLATE_RE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")


class VariableError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def lookup(variables: dict, reference: str):
    name, _, rest = reference.partition(".")
    if name not in variables or name == "_meta":
        known = ", ".join(sorted(k for k in variables if k != "_meta"))
        raise VariableError(f"unknown variable {name!r} in {{{{{reference}}}}} (known: {known})")
    # A saved response's status and headers: {{name._status}}, {{name._headers.X-Credits-Remaining}}.
    meta = (variables.get("_meta") or {}).get(name) or {}
    holder = meta if rest.split(".")[0] in meta else variables[name]
    multi, values = resolve_path(holder, rest)
    if multi or values[0] is MISSING:
        raise VariableError(f"{{{{{reference}}}}}: no value at {rest!r}")
    return values[0]


def render(value, variables: dict):
    """Replace ``{{name.path}}`` in strings, recursively; a string that is one reference keeps its type."""
    if isinstance(value, str):
        whole = TEMPLATE_RE.fullmatch(value.strip()) if value.strip().startswith("{{") else None
        if whole:
            return lookup(variables, whole.group(1))
        return TEMPLATE_RE.sub(lambda m: _text(lookup(variables, m.group(1))), value)
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if isinstance(value, dict):
        return {render(k, variables) if isinstance(k, str) else k: render(v, variables) for k, v in value.items()}
    return value


def _text(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


# --- paths -------------------------------------------------------------------------------


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


MISSING = _Missing()


def _get(item, segment: str):
    if isinstance(item, list):
        try:
            return item[int(segment)]
        except (ValueError, IndexError):
            return MISSING
    if isinstance(item, dict) or hasattr(item, "keys"):
        if segment in item:
            return item[segment]
        lowered = segment.lower()  # header names are case-insensitive
        for key in item:
            if isinstance(key, str) and key.lower() == lowered:
                return item[key]
    return MISSING


def resolve_path(obj, path: str) -> tuple[bool, list]:
    """Values at a dotted ``path`` (list indexes as numbers, ``*`` for every element).

    Returns ``(multi, values)``: ``multi`` when the path has a ``*`` (then ``values`` holds
    one value per element), else ``values`` holds exactly one value, possibly ``MISSING``.
    ``""`` and ``$`` address the whole object.
    """
    segments = [] if path in ("", "$") else path.split(".")
    current, multi = [obj], False
    for segment in segments:
        following = []
        for item in current:
            if item is MISSING:
                following.append(MISSING)
            elif segment == "*":
                multi = True
                if isinstance(item, list):
                    following.extend(item)
                elif isinstance(item, dict):
                    following.extend(item.values())
                else:
                    following.append(MISSING)
            else:
                following.append(_get(item, segment))
        current = following
    return multi, current


# --- matchers -----------------------------------------------------------------------------

TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
         "object": dict, "null": type(None)}
# Operators of a matcher mapping; a mapping with any other key is a literal object.
OPERATORS = ("eq", "ne", "in", "not_in", "matches", "gt", "gte", "lt", "lte", "type", "present",
             "length", "contains", "all_equal", "all_distinct", "count")
SYMBOLS = {"eq": "==", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
# Operators that judge the list a ``*`` path collects, not each element.
LIST_OPERATORS = {"all_equal", "all_distinct", "count"}


def is_matcher(value) -> bool:
    return isinstance(value, dict) and bool(value) and all(k in OPERATORS for k in value)


MISSED_LIMIT = 4000  # characters of an observed value shown for a missed expectation


def short(value, limit: int = 70) -> str:
    if value is MISSING:
        return "(missing)"
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def describe(matcher) -> str:
    """``== 202``, ``in [low, high]``, ``matches ^scn_``..."""
    if not is_matcher(matcher):
        return f"== {short(matcher, 50)}"
    parts = []
    for op, arg in matcher.items():
        if op == "present":
            parts.append("present" if arg else "absent")
        elif op == "type":
            parts.append(f"is {arg}")
        elif op in ("length", "count") and is_matcher(arg):
            parts.append(f"{op} {describe(arg)}")
        elif op == "all_equal":
            parts.append("all equal" if arg else "not all equal")
        elif op == "all_distinct":
            parts.append("all distinct" if arg else "not all distinct")
        else:
            symbol = SYMBOLS.get(op, op.replace("_", " "))
            parts.append(f"{symbol} {short(arg, 50)}")
    return " and ".join(parts)


def _same(actual, expected) -> bool:
    # True == 1 in Python; an API that answers 1 for true (or the reverse) is wrong.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(_same(actual[k], expected[k]) for k in actual)
    return actual == expected


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return None
    return None


def evaluate(actual, matcher, *, as_text: bool = False) -> bool:
    """Whether ``actual`` (possibly ``MISSING``) satisfies ``matcher``.

    ``as_text``: ``actual`` is a header value (a string), so a literal number or boolean in
    the scenario is compared with its text (``99`` with ``"99"``, ``true`` with ``"true"``).
    """
    if not is_matcher(matcher):
        matcher = {"eq": matcher}
    for op, arg in matcher.items():
        if op == "present":
            if (actual is not MISSING) != bool(arg):
                return False
            continue
        if actual is MISSING:
            return False
        if not _apply(op, actual, arg, as_text):
            return False
    return True


def _as_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _apply(op: str, actual, arg, as_text: bool) -> bool:
    if op in ("eq", "ne"):
        same = _as_text(arg) == actual if as_text and isinstance(actual, str) else _same(actual, arg)
        return same if op == "eq" else not same
    if op in ("in", "not_in"):
        options = arg if isinstance(arg, list) else [arg]
        inside = any((_as_text(o) == actual) if as_text and isinstance(actual, str) else _same(actual, o)
                     for o in options)
        return inside if op == "in" else not inside
    if op == "matches":
        return re.search(str(arg), actual if isinstance(actual, str) else _as_text(actual)) is not None
    if op in ("gt", "gte", "lt", "lte"):
        a, b = _number(actual), _number(arg)
        if a is None or b is None:
            return False
        return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    if op == "type":
        if arg == "integer":
            return isinstance(actual, int) and not isinstance(actual, bool)
        if arg == "number":
            return isinstance(actual, (int, float)) and not isinstance(actual, bool)
        return isinstance(actual, TYPES[arg])
    if op in ("length", "count"):
        if not hasattr(actual, "__len__"):
            return False
        return evaluate(len(actual), arg)
    if op == "contains":
        if isinstance(actual, str):
            return str(arg) in actual
        if isinstance(actual, list):
            return any(_same(item, arg) or (is_matcher(arg) and evaluate(item, arg)) for item in actual)
        if isinstance(actual, dict):
            return arg in actual
        return False
    if op == "all_equal":
        if not isinstance(actual, list) or not actual:
            return False
        equal = all(_same(item, actual[0]) for item in actual)
        return equal if arg else not equal
    if op == "all_distinct":  # e.g. each delivery id received once
        if not isinstance(actual, list) or not actual:
            return False
        texts = [json.dumps(item, sort_keys=True, default=str) for item in actual]
        distinct = len(set(texts)) == len(texts)
        return distinct if arg else not distinct
    raise ValueError(f"unknown operator {op}")


@dataclass
class Check:
    """The outcome of one expectation: what was expected, whether it held, what was seen."""

    expectation: str
    met: bool
    observed: str


def check_path(obj, path: str, matcher, *, prefix: str = "", as_text: bool = False) -> Check:
    """Apply ``matcher`` to the value(s) at ``path``: for a ``*`` path, to each element
    (``all_equal``, ``all_distinct`` and ``count`` judge the collected list instead)."""
    multi, values = resolve_path(obj, path)
    shown = f"{prefix}{path}" if path not in ("", "$") else (prefix.rstrip(".") or "$")
    expectation = f"{shown} {describe(matcher)}"
    if not multi:
        actual = values[0]
        met = evaluate(actual, matcher, as_text=as_text)
        # A miss shows what was there (up to MISSED_LIMIT): it is what the reader needs.
        return Check(expectation, met, short(actual) if met else short(actual, MISSED_LIMIT))
    list_ops = is_matcher(matcher) and set(matcher) & LIST_OPERATORS
    if list_ops:
        element_ops = {k: v for k, v in matcher.items() if k not in LIST_OPERATORS}
        met = evaluate(values, {k: matcher[k] for k in list_ops})
        if element_ops:
            met = met and bool(values) and all(evaluate(v, element_ops, as_text=as_text) for v in values)
        return Check(expectation, met, short(values) if met else short(values, MISSED_LIMIT))
    if not values:
        return Check(expectation, False, "(no elements)")
    failing = [v for v in values if not evaluate(v, matcher, as_text=as_text)]
    if failing:
        return Check(expectation, False,
                     f"{len(failing)} of {len(values)} differ, e.g. {short(failing[0], MISSED_LIMIT)}")
    return Check(expectation, True, f"all {len(values)}: {short(values, 60)}")
