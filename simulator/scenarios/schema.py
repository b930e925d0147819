"""The scenario file format as a JSON Schema, and a validator that names file, line and key.

Every scenario file is checked against ``SCENARIO_SCHEMA`` before anything starts (the
pytest plugin does it while collecting), so a typo fails fast, with a message such as::

    simulator/scenarios/x.yaml:7: setup: unknown key 'credit' (did you mean 'credits'?); allowed: ...

The schema is built from the constants of ``model`` (actions, their arguments, the
expectation keys of each), so the two cannot drift apart; ``model.parse_scenario`` then
checks what a schema cannot say well (customer names, regular expressions, templates).
``python -m simulator.scenarios.schema`` prints it, e.g. for an editor's YAML support.
"""
from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from simulator.scenarios import model

# Tags a scenario may carry (``tags: [webhooks]``); each becomes a pytest marker, so
# ``pytest simulator/scenarios -m webhooks`` selects by it. A new tag is added here.
TAGS: dict[str, str] = {
    "polling": "scans followed by reading them until they are final",
    "webhooks": "webhook deliveries, their signatures, retries and the attempt log",
    "bulk": "bulk creation and the aggregate read",
    "engine": "the engine's behaviour: failures, outages, flaky tracking",
    "limits": "rate limits, in-flight limit and quotas",
    "credits": "charging and the credit balance",
    "auth": "authentication and tenant isolation",
    "validation": "refused input",
    "idempotency": "Idempotency-Key replays and conflicts",
    "lists": "the cursor-paged lists: scans and webhook deliveries",
    "rotation": "webhook secret rotation and the two signature schemes",
    "operator": "steps that run operator CLI commands",
    "testmode": "test keys: the sandbox engine, livemode false, nothing charged, apart from live data",
    "privacy": "personal data: purpose, erasure on request, retention, opt-outs",
    "results": "a result's sources, coverage, findings and reasons; feedback on findings; re-runs",
    "watches": "watches taken through their intervals with the QA clock (flask watches run-due --days-ahead)",
    "sources": "source health: probes, quarantine, the sources list and status page",
}

_ANY: dict = {}
_TEXT_OR_NUMBER = {"type": ["string", "integer", "number"]}
_NON_NEGATIVE = {"type": "integer", "minimum": 0}
_SECONDS = {"type": ["number", "string"], "minimum": 0}  # a number, or a {{variable}}
_PATHS = {"type": "object"}  # {dotted path: matcher}; matchers are checked by model
_SECRETS = {"type": ["array", "string"], "minItems": 1, "items": {"type": "string"}}  # a list, or a {{variable}}
_RESPONSES = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 200, "maximum": 599}}
# A further receiver of the customer (beside the one its setup gives its key), e.g. for a second endpoint.
_RECEIVER_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}
_HTTP_ARGS = {"headers": {"type": "object"}, "authorization": {"type": ["string", "null"]}}

# The arguments of each action. ``type`` lists a scalar where the action takes a bare
# value (``read: "{{scan.scan_id}}"``); object keywords apply to the mapping form only.
ACTION_ARGS: dict[str, dict] = {
    "create": {"type": ["object", "null"], "properties": {
        "target": {"type": "string"}, "kind": {"type": "string"}, "idempotency_key": _TEXT_OR_NUMBER,
        "body": _ANY, **_HTTP_ARGS}},
    "bulk": {"type": "object", "properties": {
        "targets": {"type": ["array", "string"], "items": {
            "type": ["string", "object"], "properties": {"target": _ANY, "kind": _ANY}}},
        "idempotency_key": _TEXT_OR_NUMBER, "body": _ANY, **_HTTP_ARGS}},
    "read": {"type": ["string", "object"], "properties": {"scan": {"type": "string"}, **_HTTP_ARGS}},
    "read_bulk": {"type": ["string", "object"], "properties": {"bulk": {"type": "string"}, **_HTTP_ARGS}},
    "request": {"type": "object", "required": ["path"], "properties": {
        "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS",
                            "get", "post", "put", "patch", "delete", "head", "options"]},
        "path": {"type": "string"}, "json": _ANY, **_HTTP_ARGS}},
    "wait": {"type": "object", "properties": {
        "scan": {"type": "string"}, "bulk": {"type": "string"}, "status": {"type": ["string", "array"]},
        "all_done": {"type": "boolean"}, "until": _PATHS, "timeout": _SECONDS, "interval": _SECONDS}},
    "engine": {"type": ["string", "object"], "properties": {
        "mode": {"enum": list(model.ENGINE_MODES)}, "every": {"type": "integer", "minimum": 1}},
        "required": ["mode"]},
    "webhooks": {"type": ["integer", "object", "null"], "properties": {
        "count": {"type": "integer", "minimum": 0}, "timeout": _SECONDS, "interval": _SECONDS,
        "secrets": _SECRETS, "receiver": _RECEIVER_NAME}},
    "attempts": {"type": ["object", "null"], "properties": {
        "deliveries": {"type": "integer", "minimum": 0}, "final": {"type": "boolean"}, "until": _PATHS,
        "timeout": _SECONDS, "interval": _SECONDS}},
    "credits": {"type": ["object", "null"]},
    "receiver": {"type": ["object", "null"], "properties": {
        "responses": _RESPONSES, "delay_ms": _NON_NEGATIVE, "secrets": _SECRETS, "name": _RECEIVER_NAME}},
    "source": {"type": "object", "required": ["id", "mode"], "properties": {
        "id": {"type": "string", "minLength": 1}, "mode": {"enum": list(model.SOURCE_MODES)}}},
    "operator": {"type": ["string", "array", "object"], "items": _TEXT_OR_NUMBER, "properties": {
        "command": {"type": ["string", "array"], "minLength": 1, "minItems": 1, "items": _TEXT_OR_NUMBER}}},
}
for _action, _schema in ACTION_ARGS.items():
    assert set(_schema.get("properties", {})) == model.ACTIONS[_action], _action
    _schema["additionalProperties"] = False
ACTION_ARGS["engine"]["allOf"] = [{"if": {"type": "string"}, "then": {"enum": list(model.ENGINE_MODES)}}]

# What each expectation key holds (matchers are checked by model).
EXPECT_VALUES: dict[str, dict] = {
    "status": _ANY, "error": _ANY, "body": _PATHS, "headers": _PATHS, "deliveries": _PATHS,
    "schema": {"type": ["string", "object"], "additionalProperties": {"type": "string"}},
    "count": _ANY, "signature_valid": _ANY, "webhook_signature_valid": _ANY, "status_codes": _ANY,
    "delivery_status": _ANY, "balance": _ANY, "exit": _ANY,
}

_LIMITS = {"type": "object", "properties": dict.fromkeys(sorted(model.LIMIT_KEYS), _NON_NEGATIVE),
           "additionalProperties": False}
_RECEIVER = {"type": ["object", "boolean"], "properties": {
    "responses": _RESPONSES, "delay_ms": _NON_NEGATIVE}, "additionalProperties": False}
_CUSTOMER_PROPERTIES = {"tier": {"enum": list(model.TIERS)}, "credits": _NON_NEGATIVE,
                        "limits": _LIMITS, "receiver": _RECEIVER, "key_mode": {"enum": list(model.KEY_MODES)}}


def _step_schema() -> dict:
    properties = {
        "name": {"type": ["string", "integer"]},
        "save": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "customer": {"type": "string"},
        "repeat": {"type": "integer", "minimum": 1},
        "expect": {"type": ["object", "null"]},
        **ACTION_ARGS,
    }
    assert set(properties) == model.STEP_KEYS | set(model.ACTIONS)
    per_action = [{"if": {"required": [action]},
                   "then": {"properties": {"expect": {
                       "type": ["object", "null"],
                       "properties": {key: EXPECT_VALUES[key] for key in sorted(model.EXPECT_KEYS[action])},
                       "additionalProperties": False}}}}
                  for action in model.ACTIONS]
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "oneOf": [{"required": [action]} for action in model.ACTIONS], "allOf": per_action}


SCENARIO_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "QA scenario (simulator/scenarios/*.yaml)",
    "type": "object",
    "required": ["description", "steps"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
        "description": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "uniqueItems": True, "items": {"enum": sorted(TAGS)}},
        "exclusive": {"type": "boolean"},
        "setup": {"type": ["object", "null"], "additionalProperties": False, "properties": {
            **_CUSTOMER_PROPERTIES, "engine": ACTION_ARGS["engine"]}},
        "customers": {"type": ["object", "null"], "propertyNames": {"pattern": "^[A-Za-z0-9_-]+$", "not": {
            "const": model.MAIN}}, "additionalProperties": {
            "type": ["object", "null"], "properties": _CUSTOMER_PROPERTIES, "additionalProperties": False}},
        "steps": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/step"}},
    },
    "$defs": {"step": _step_schema()},
}
assert set(SCENARIO_SCHEMA["properties"]) == model.SCENARIO_KEYS
assert set(_CUSTOMER_PROPERTIES) == model.CUSTOMER_KEYS

_VALIDATOR = Draft202012Validator(SCENARIO_SCHEMA)
_TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "empty"}


# --- reading with line numbers ------------------------------------------------------------


def compose(text: str, where: str) -> tuple[Any, yaml.Node | None, list[str]]:
    """The file's data, its YAML node tree (for line numbers) and any duplicate-key errors."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = ": ".join(p for p in (exc.context, exc.problem) if p)
        raise model.ScenarioError(f"{where}{line}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise model.ScenarioError(f"{where}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    return data, node, list(_duplicates(node, where))


def _duplicates(node, where: str, path: tuple = ()):
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                yield (f"{where}:{key.start_mark.line + 1}: {_place(path)}key '{name}' appears twice "
                       f"(first on line {seen[name]}); the last one would win")
            seen.setdefault(name, key.start_mark.line + 1)
            yield from _duplicates(value, where, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicates(item, where, (*path, index))


def _node_at(root, path) -> tuple[yaml.Node | None, yaml.Node | None]:
    """(the node at ``path``, the key node naming it when it is a mapping value)."""
    node, key_node = root, None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if match is None:
                break
            key_node, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            key_node, node = None, node.value[part]
        else:
            break
    return node, key_node


def _line(root, path, key: str | None = None) -> int | None:
    node, key_node = _node_at(root, path)
    if key is not None and isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if str(k.value) == key:
                return k.start_mark.line + 1
    if key_node is not None:
        return key_node.start_mark.line + 1
    return node.start_mark.line + 1 if node is not None else None


def _place(path) -> str:
    """``steps/2/expect`` -> ``step 3.expect: ``; the top level -> ``""``."""
    parts = []
    items = list(path)
    while items:
        part = items.pop(0)
        if part == "steps" and items and isinstance(items[0], int):
            parts.append(f"step {items.pop(0) + 1}")
        elif isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(str(part))
    text = ".".join(parts).replace(".[", "[")
    return f"{text}: " if text else ""


# --- messages ------------------------------------------------------------------------------


def did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _types(expected) -> str:
    names = expected if isinstance(expected, list) else [expected]
    return " or ".join(_TYPE_NAMES.get(n, n) for n in names)


def _got(instance) -> str:
    kind = next((name for name, t in (("true or false", bool), ("an integer", int), ("a number", float),
                                      ("a string", str), ("a list", list), ("a mapping", dict))
                 if isinstance(instance, t)), "empty" if instance is None else type(instance).__name__)
    return f"got {json.dumps(instance, default=str)} ({kind})" if not isinstance(instance, (dict, list)) \
        else f"got {kind}"


def _messages(error, root, where: str) -> list[tuple[int, str]]:
    """One or more ``(line, message)`` for a jsonschema error."""
    path = list(error.absolute_path)
    line = _line(root, path) or 1
    place = _place(path)
    kind = error.validator
    if "propertyNames" in error.schema_path:
        return [(_line(root, path, str(error.instance)) or line,
                 f"{place}name {error.instance!r} is not allowed: '{model.MAIN}' is the setup's customer, "
                 f"and names are letters, digits, '_' or '-'")]
    if kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in error.schema.get("properties", {})]
        return [(_line(root, path, str(key)) or line,
                 f"{place}unknown key '{key}'{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}")
                for key in extra]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return [(line, f"{place}missing required key '{k}'") for k in missing]
    if kind == "type":
        return [(line, f"{place.rstrip(': ') or 'the file'} must be {_types(error.validator_value)}, "
                       f"{_got(error.instance)}")]
    if kind == "enum":
        options = [str(o) for o in error.validator_value]
        return [(line, f"{place.rstrip(': ')} must be one of {', '.join(options)}, got {error.instance!r}"
                       f"{did_you_mean(error.instance, options) if isinstance(error.instance, str) else ''}")]
    if kind == "oneOf" and path and path[0] == "steps":
        actions = [a for a in model.ACTIONS if a in error.instance]
        got = f"got {', '.join(actions)}" if actions else "got none"
        unknown = [k for k in error.instance if k not in model.ACTIONS and k not in model.STEP_KEYS]
        if unknown and not actions:
            return []  # the unknown key (a misspelled action) is reported on its own
        return [(line, f"{place}a step needs exactly one action of {', '.join(model.ACTIONS)}; {got}")]
    if kind in ("minimum", "maximum", "minItems", "minLength", "pattern", "uniqueItems", "const", "not"):
        subject = place.rstrip(": ") or "the file"
        text = {"minimum": f"must be at least {error.validator_value}",
                "maximum": f"must be at most {error.validator_value}",
                "minItems": f"needs at least {error.validator_value} item(s)",
                "minLength": "must not be empty",
                "pattern": f"must match {error.validator_value}",
                "uniqueItems": "must not repeat a value"}.get(kind, "is not allowed")
        return [(line, f"{subject} {text}, got {json.dumps(error.instance, default=str)}")]
    return [(line, f"{place}{error.message}")]


def validate(text: str, where: str) -> Any:
    """Parse and validate a scenario file's text; return its data or raise ``ScenarioError``
    listing every problem as ``<where>:<line>: <message>`` (in line order, never shortened)."""
    data, root, problems = compose(text, where)
    if data is None:
        raise model.ScenarioError(f"{where}:1: the file is empty (a scenario needs description and steps)")
    found: list[tuple[int, str]] = []
    for error in _VALIDATOR.iter_errors(data):
        found.extend(_messages(error, root, where))
    lines = problems + [f"{where}:{line}: {message}" for line, message in sorted(set(found))]
    if lines:
        raise model.ScenarioError("\n".join(lines))
    return data


def validate_file(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise model.ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return validate(text, str(path))


if __name__ == "__main__":
    json.dump(SCENARIO_SCHEMA, sys.stdout, indent=2)
    sys.stdout.write("\n")
