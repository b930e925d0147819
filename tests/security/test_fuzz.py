"""Hostile input: schemathesis against the served OpenAPI document, then what a fuzzer does not
try by itself: oversized and deeply nested bodies, broken encodings, wrong content types, huge
headers on the real servers, NUL bytes and Unicode edge cases in targets, ids and headers.

Every answer must be a documented status with a JSON error body (D1), never a 5xx, and nothing
may be created or charged by a request the contract refuses.

``FUZZ_EXAMPLES`` (default 25 per operation and generation mode, derandomized for CI) raises
the number of generated cases; ``make fuzz`` runs 300 per operation and mode, random.
"""
from __future__ import annotations

import base64
import copy
import json
import os
import re
import socket
import time
from collections import Counter, defaultdict
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import schemathesis
from freezegun import freeze_time
from hypothesis import HealthCheck, Phase, given, settings
from jsonschema import Draft4Validator
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as REGISTERED_CHECKS
from schemathesis.checks import load_all_checks
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.converter import to_json_schema

from app.accounts.models import CreditLedger
from app.billing import charges
from app.billing.models import IdempotencyRecord
from app.extensions import db
from app.plumbing.models import utcnow
from app.scans.models import BulkBatch, Scan
from app.targets.schemas import TARGET_PATTERNS

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
# The bulk calls and the status each answers with its bad items listed in ``rejected`` (D7, D28).
BULK_CALLS = {BULK: 202, "/api/v1/watches/bulk": 201}
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES") or 25)
RANDOM = bool(os.environ.get("FUZZ_EXAMPLES"))  # CI: the same cases every run; by hand: new ones
load_all_checks()
CHECKS = REGISTERED_CHECKS.get_all()  # `--checks all`: every check schemathesis ships
ALL_CHECKS = {"not_a_server_error", "status_code_conformance", "content_type_conformance",
              "response_headers_conformance", "response_schema_conformance", "negative_data_rejection",
              "positive_data_acceptance", "missing_required_header", "unsupported_method",
              "allow_header_conformance", "use_after_free", "ensure_resource_availability", "ignored_auth",
              "object_level_authorization"}
CREDITS = 1_000_000


SECRET = "whsec_" + base64.b64encode(b"fuzzing-the-api-32-bytes-secret!").decode()


@pytest.fixture
def rich(make_customer, sim_receiver):
    """An Enterprise customer whose limits and credits no fuzzer exhausts, with a webhook URL (so
    that it has deliveries to list)."""
    url, _ = sim_receiver(SECRET)
    return make_customer(tier="enterprise", credits=CREDITS, inflight=1_000_000, hour=1_000_000, day=1_000_000,
                         webhook_url=url, webhook_secret=SECRET)


def assert_json_error(response, status, code=None) -> dict:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["Content-Type"].startswith("application/json"), response.headers["Content-Type"]
    body = response.json()
    assert body["ok"] is False and body["message"] and body["request_id"] == response.headers["X-Request-Id"]
    if code:
        assert body["error"] == code, body
    assert "Traceback" not in response.text
    return body


def books_balance(account) -> int:
    with db.connection_context():
        balance = charges.balance_of(account.id)
        assert charges.ledger_sum(account.id) == balance
    return balance


# --- schemathesis ------------------------------------------------------------------------------

def known_objects(client, rich, jobs) -> tuple[list[str], list[str]]:
    """Scans in every state (completed with and without a phone profile, failed, running, queued)
    and batches, so that reads answer 200 bodies of each shape, not only 404s."""
    ids = [client.post(SCAN, json={"target": t}, headers=rich.headers).json["scan_id"]
           for t in ("jane@example.com", "+447700900123", "octocat", "fail.fred@example.com", "hang.h@example.com")]
    bulk = client.post(BULK, json={"targets": [{"target": "ann@example.com"}, {"target": "fail.x@example.com"},
                                               {"target": "ab"}, None, {"target": "+4915123456788"}]},
                       headers=rich.headers).json
    with freeze_time(utcnow()) as frozen:
        jobs.run(frozen, until=lambda: _states() >= {"completed", "failed", "running"}
                 and not _states(exclude="hang.h@example.com") & {"queued", "running"})
    queued = client.post(SCAN, json={"target": "queued@example.com"}, headers=rich.headers).json["scan_id"]
    empty = client.post(BULK, json={"targets": [{"target": "ab"}]}, headers=rich.headers).json["bulk_id"]
    assert _states() == {"completed", "failed", "running", "queued"}
    return ids + [s["scan_id"] for s in bulk["scans"]] + [queued], [bulk["bulk_id"], empty]


def real_cursors(client, rich, scan_ids) -> dict:
    """A ``starting_after`` names one of the caller's own objects, which no schema can say: the
    fuzzer's valid cases get real ones, as its reads get real scan ids."""
    deliveries = client.get("/api/v1/deliveries", headers=rich.headers).json["data"]
    activity = client.get("/api/v1/activity", headers=rich.headers).json["data"]
    events = client.get("/api/v1/events", headers=rich.headers).json["data"]
    watch = client.post("/api/v1/watches", json={"target": "watched@example.com", "interval": "weekly"},
                        headers=rich.headers).json
    export = client.get("/api/v1/activity/export", headers=rich.headers).headers.get("X-Next-Cursor")
    assert deliveries and activity and events and watch["ok"] and export
    return {"/api/v1/scans": scan_ids[0], "/api/v1/deliveries": deliveries[0]["delivery_id"],
            "/api/v1/activity": activity[-1]["activity_id"], "/api/v1/events": events[0]["event_id"],
            "/api/v1/watches": watch["watch_id"], "/api/v1/activity/export": export}


KIND_FORMS = {kind: re.compile(f"^({pattern})$") for kind, pattern in TARGET_PATTERNS.items()}


def valid_bulk_item(item) -> bool:
    """``BulkTarget`` of the document, restated: an object of a target in one of the documented
    forms and an optional kind that agrees with it."""
    if not isinstance(item, dict) or not set(item) <= {"target", "kind"} or not isinstance(item.get("target"), str):
        return False
    kind = item.get("kind")
    if kind is None:
        return any(form.match(item["target"]) for form in KIND_FORMS.values())
    return isinstance(kind, str) and kind in KIND_FORMS and bool(KIND_FORMS[kind].match(item["target"]))


def bulk_validators(document: dict) -> dict[str, tuple]:
    """Per bulk call, two validators of its body as the document describes it: whole, and with any
    item allowed (the document says in words that a bad item is a ``rejected`` entry, not a 400)."""
    components = {name: to_json_schema(schema, "nullable") for name, schema in document["components"]["schemas"].items()}
    validators = {}
    for path in BULK_CALLS:
        ref = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        whole = {**copy.deepcopy(components[ref.rsplit("/", 1)[-1]]), "components": {"schemas": components}}
        any_items = copy.deepcopy(whole)
        any_items["properties"]["targets"]["items"] = {}
        validators[path] = (Draft4Validator(whole), Draft4Validator(any_items))
    return validators


def bad_items_only(validators, case) -> bool:
    """Whether the case's body breaks the document in its items alone: the call then answers its
    success with them in ``rejected``, by design; any other breach must be refused (4xx)."""
    whole, any_items = validators[case.path]
    return not whole.is_valid(case.body) and any_items.is_valid(case.body)


def query_as_sent_is_valid(document: dict, method: str, path: str, url: str) -> bool:
    """Whether the query string that went out obeys the document: a negative case whose breach did
    not survive serialising (a parameter made an integer, ``0``, is the string "0" in a URL; one made
    an empty list is not sent at all) is a valid request, rightly answered 200."""
    components = {name: to_json_schema(schema, "nullable") for name, schema in document["components"]["schemas"].items()}
    declared = {p["name"]: p for p in document["paths"][path][method].get("parameters", []) if p["in"] == "query"}
    sent = parse_qs(urlsplit(url).query, keep_blank_values=True)
    if set(sent) - set(declared) or any(p.get("required") and name not in sent for name, p in declared.items()):
        return False
    for name, values in sent.items():
        schema = {**to_json_schema(declared[name]["schema"], "nullable"), "components": {"schemas": components}}
        value: object = values[0]
        if len(values) > 1:
            return False
        if schema.get("type") == "integer":
            if not re.fullmatch(r"-?[0-9]+", values[0]):
                return False
            value = int(values[0])
        if not Draft4Validator(schema).is_valid(value):
            return False
    return True


def bad_bulk_items_rejected(case, response) -> str | None:
    """A bulk call (``BULK_CALLS``) answers its success for bad items, listing them in ``rejected`` (D7),
    so a "negative" case with bad items is accepted by design: instead of schemathesis'
    negative_data_rejection, every item the document calls invalid must be rejected and every valid
    one queued (or watched)."""
    if response.status_code != BULK_CALLS[case.path]:
        return None
    targets = case.body["targets"]
    rejected = {r["index"] for r in response.json()["rejected"]}
    wrong = [i for i, item in enumerate(targets) if valid_bulk_item(item) == (i in rejected)]
    return f"items {wrong[:5]} of {json.dumps(targets)[:300]}: rejected {sorted(rejected)}" if wrong else None


def _states(exclude=None) -> set:
    with db.connection_context():
        query = Scan.select(Scan.status)
        if exclude:
            query = query.where(Scan.target != exclude)
        return {s.status for s in query}


def test_schemathesis_finds_no_server_error_and_no_answer_off_the_document(served_app, client, rich, jobs,
                                                                            figures):
    scan_ids, bulk_ids = known_objects(client, rich, jobs)
    cursors = real_cursors(client, rich, scan_ids)
    schema = schemathesis.openapi.from_url(f"{served_app.url}/api/v1/openapi.json")
    document = requests.get(f"{served_app.url}/api/v1/openapi.json", timeout=30).json()
    validators = bulk_validators(document)
    unbroken = Counter()  # negative cases whose query went out valid (schemathesis' false positives)
    auth = {"Authorization": f"Bearer {rich.api_key}"}
    session = requests.Session()
    tried, unsendable, statuses, failures = Counter(), Counter(), Counter(), []
    by_label = defaultdict(Counter)
    bulk_cases = Counter()  # the cases judged by their items' fate instead of negative_data_rejection

    def check(case, label):
        if label.endswith("positive") and case.query and "starting_after" in case.query:
            case.query["starting_after"] = cursors[case.path]
        if label.endswith("positive") and case.query and case.path == "/api/v1/activity/export" \
                and "cursor" in case.query:  # an export's cursor is one the service gave
            case.query["cursor"] = cursors[case.path]
        if label.endswith("positive") and isinstance(case.body, dict) and isinstance(case.body.get("required"), str):
            case.body["required"] = "profiles.verified OR (emails AND breaches)"  # a grammar no schema can say
        if label.endswith("positive") and case.path == "/api/v1/events/stream":  # an event id is one it gave
            for where, name in ((case.query, "after"), (case.headers, "Last-Event-ID")):
                if where and name in where:
                    where[name] = cursors["/api/v1/events"]
        if label.endswith("positive") and case.query and case.query.get("wait") in range(2, 61):
            case.query["wait"] = 1  # a valid wait holds the answer that long: the shortest one, to keep pace
        # The events stream never ends: schemathesis reads it until the timeout, so a short one.
        timeout = 2 if case.path == "/api/v1/events/stream" else 30
        response = case.call(base_url=served_app.url, session=session, headers=auth, timeout=timeout)
        tried[label] += 1
        statuses[response.status_code] += 1
        by_label[label][response.status_code] += 1
        # Every check on every case, but one: a bulk call's body whose items alone break the document
        # is accepted (its bad items listed in ``rejected``, as the document says in words), so
        # negative_data_rejection is replaced there by the stricter check of each item's fate.
        bulk_negative = label in {f"POST {path} negative" for path in BULK_CALLS} and bad_items_only(validators, case)
        if bulk_negative:
            bulk_cases[label] += 1
        checks = [c for c in CHECKS if not (bulk_negative and c.__name__ == "negative_data_rejection")]
        try:
            case.validate_response(response, checks=checks, headers=auth)
        except FailureGroup as group:
            for failure in group.exceptions:
                if (failure.title == "Schema-violating request accepted" and case.method.upper() == "GET"
                        and query_as_sent_is_valid(document, case.method.lower(), case.path, response.request.url)):
                    unbroken[label] += 1
                    continue
                failures.append((label, failure.title, response.status_code, response.text[:300],
                                 case.as_curl_command(headers=auth), (failure.message or "")[:400]))
        if bulk_negative and (wrong := bad_bulk_items_rejected(case, response)):
            failures.append((label, "bulk items misjudged", response.status_code, wrong, ""))
        return response

    # The reads of real objects in every state: 200 bodies checked against the document.
    read_scan, read_bulk = schema["/api/v1/scan/{scan_id}"]["GET"], schema["/api/v1/scan/bulk/{bulk_id}"]["GET"]
    for scan_id in scan_ids:
        assert check(read_scan.Case(path_parameters={"scan_id": scan_id}), "GET scan known").status_code == 200
    for bulk_id in bulk_ids:
        assert check(read_bulk.Case(path_parameters={"bulk_id": bulk_id}), "GET bulk known").status_code == 200

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            label = f"{operation.method.upper()} {operation.path} {mode.value}"

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not RANDOM,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
                      print_blob=False)
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                try:
                    check(case, label)  # noqa: B023 - run() is called within this iteration only
                except (requests.exceptions.InvalidHeader, UnicodeEncodeError, ValueError) as exc:
                    unsendable[exc.__class__.__name__] += 1  # the client library refuses to send it

            run()
    session.close()
    figures.update(requests=sum(tried.values()), concurrency=1, faults="none (generated input)",
                   inputs={"per_operation_and_mode": EXAMPLES, "operations": len(list(schema.get_all_operations())), "known_ids_read":
                           len(scan_ids) + len(bulk_ids), "sent": sum(tried.values()),
                           "unsendable": sum(unsendable.values())},
                   failures=len(failures), statuses={str(k): v for k, v in sorted(statuses.items())},
                   checks=[c.__name__ for c in CHECKS], items_judged_one_by_one=dict(bulk_cases),
                   negative_cases_sent_valid=dict(unbroken),
                   by_operation={k: {str(s): n for s, n in sorted(v.items())} for k, v in by_label.items()})
    kinds = Counter((label, title) for label, title, *_ in failures)
    firsts = {(f[0], f[1]): f for f in reversed(failures)}  # one example of each kind
    assert {c.__name__ for c in CHECKS} >= ALL_CHECKS  # every check, as `--checks all` runs them
    assert not failures, "\n".join(f"{n} x {kind}" for kind, n in kinds.most_common()) + "\n\n" + "\n\n".join(
        " | ".join(map(str, f)) for f in firsts.values())
    operations = len(list(schema.get_all_operations()))
    assert operations >= 5 and len(tried) == 2 * operations + 2 and min(tried.values()) >= 1  # x 2 modes, known reads
    assert statuses[500] == 0 and not [s for s in statuses if s >= 500]
    books_balance(rich)


def test_a_negative_case_is_excused_only_when_its_query_went_out_valid(client):
    """The two cases schemathesis reported as "accepted" (their breach lost in the URL) are valid
    as sent; a query that is really off the document is not excused."""
    document = client.get("/api/v1/openapi.json").get_json()
    base = "http://127.0.0.1:1"
    for path, query in (("/api/v1/events", "bulk_id=0"),
                        ("/api/v1/deliveries", "endpoint_id=0&event=scan.failed&limit=5")):
        assert query_as_sent_is_valid(document, "get", path, f"{base}{path}?{query}")
    for path, query in (("/api/v1/events", "bulk_id="), ("/api/v1/deliveries", "limit=0"),
                        ("/api/v1/deliveries", "limit=x"), ("/api/v1/scans", "colour=red"),
                        ("/api/v1/scans", "limit=5&limit=6"), ("/api/v1/events", "events=scan.nothing")):
        assert not query_as_sent_is_valid(document, "get", path, f"{base}{path}?{query}"), (path, query)


# --- bodies -------------------------------------------------------------------------------------

def test_oversized_bodies_are_413_json_on_the_real_server(served_app, rich, figures):
    big = json.dumps({"target": "a" * (300 * 1024)}).encode()
    headers = {"Authorization": f"Bearer {rich.api_key}", "Content-Type": "application/json"}
    sent = 0
    for path in (SCAN, BULK):
        refused = assert_json_error(requests.post(f"{served_app.url}{path}", data=big, headers=headers, timeout=30),
                                    413, "payload_too_large")
        assert refused["message"] == "the request body is larger than 256 KB"  # the limit in plain numbers
        # Chunked, without Content-Length: the limit holds on the stream too.
        chunked = requests.post(f"{served_app.url}{path}", data=iter([big[i:i + 65536] for i in
                                                                      range(0, len(big), 65536)]),
                                headers=headers, timeout=30)
        assert_json_error(chunked, 413, "payload_too_large")
        sent += 2
    assert books_balance(rich) == CREDITS  # refused before being served: nothing charged
    figures.update(requests=sent, concurrency=1, faults="none", inputs={"body_bytes": len(big),
                   "ways": ["content-length", "chunked"]}, failures=0)


NESTED = 10_000


@pytest.mark.parametrize("idempotency", [False, True], ids=["plain", "with-idempotency-key"])
def test_deeply_nested_json_is_a_clean_400(client, rich, idempotency, figures):
    deep_array = "[" * NESTED + "]" * NESTED
    deep_object = '{"a":' * NESTED + "1" + "}" * NESTED
    bodies = {SCAN: [deep_array, deep_object, '{"target": ' + deep_array + "}"],
              BULK: ['{"targets": ' + deep_array + "}", '{"targets": [' + deep_object + "]}"]}
    sent = 0
    for path, payloads in bodies.items():
        for n, payload in enumerate(payloads):
            headers = dict(rich.headers, **({"Idempotency-Key": f"deep-{path}-{n}"} if idempotency else {}))
            response = client.post(path, data=payload, content_type="application/json", headers=headers)
            assert response.status_code == 400, (path, n, response.get_data(as_text=True)[:200])
            assert response.json["error"] == "invalid_request" and response.mimetype == "application/json"
            sent += 1
    with db.connection_context():
        assert Scan.select().count() == 0 and IdempotencyRecord.select().count() == 0
    assert books_balance(rich) == CREDITS - sent  # a 400 is a served call: 1 credit each (D3)
    figures.update(requests=sent, concurrency=1, faults="none", inputs={"nesting_levels": NESTED,
                   "bodies": sent}, failures=0)


BROKEN_BODIES = {
    "invalid UTF-8": b'{"target": "\xff\xfe\xfa@example.com"}',
    "UTF-8 BOM then garbage": b"\xef\xbb\xbf\xff{",
    "lone continuation bytes": b"\x80\x80\x80",
    "Latin-1 text": '{"target": "jos\u00e9@example.com"}'.encode("latin-1"),
    "UTF-16 without BOM": '{"target": "jane@example.com"}'.encode("utf-16-le"),
    "NUL bytes": b'\x00{"target": "jane@example.com"}\x00',
    "truncated": b'{"target": "jane@exa',
    "trailing garbage": b'{"target": "jane@example.com"} trailing',
    "NaN": b'{"target": NaN}',
    "huge number": b'{"target": 1' + b"0" * 5000 + b"}",
    "empty": b"",
    "JSON null": b"null",
    "JSON string": b'"jane@example.com"',
    "duplicate keys": b'{"target": "ab", "target": 7}',
}


@pytest.mark.parametrize("path", [SCAN, BULK])
def test_broken_encodings_are_clean_400s(client, rich, path, figures):
    answers = {}
    for name, raw in BROKEN_BODIES.items():
        response = client.post(path, data=raw, content_type="application/json", headers=rich.headers)
        assert response.status_code == 400, (name, response.get_data(as_text=True)[:200])
        assert response.mimetype == "application/json" and response.json["ok"] is False
        answers[name] = response.json["error"]
    with db.connection_context():
        assert Scan.select().count() == 0 and BulkBatch.select().count() == 0
    figures.update(requests=len(BROKEN_BODIES), concurrency=1, faults="none",
                   inputs=len(BROKEN_BODIES), failures=0, errors=dict(Counter(answers.values())))


WRONG_TYPES = {
    "text/plain": {"data": '{"target": "jane@example.com"}', "content_type": "text/plain"},
    "form": {"data": {"target": "jane@example.com"}, "content_type": "application/x-www-form-urlencoded"},
    "multipart": {"data": {"target": "jane@example.com"}, "content_type": "multipart/form-data"},
    "xml": {"data": "<target>jane@example.com</target>", "content_type": "application/xml"},
    "no content type": {"data": '{"target": "jane@example.com"}'},
    "json lookalike": {"data": '{"target": "jane@example.com"}', "content_type": "application/jsonx"},
}


@pytest.mark.parametrize("path", [SCAN, BULK])
def test_wrong_content_types_are_clean_400s_and_create_nothing(client, rich, path, figures):
    for name, kwargs in WRONG_TYPES.items():
        response = client.post(path, headers=rich.headers, **kwargs)
        assert response.status_code in (400, 415), (name, response.status_code)
        assert response.mimetype == "application/json" and response.json["ok"] is False, name
    with db.connection_context():
        assert Scan.select().count() == 0
    books_balance(rich)
    figures.update(requests=len(WRONG_TYPES), concurrency=1, faults="none", inputs=list(WRONG_TYPES), failures=0)


# --- headers, on the real servers -----------------------------------------------------------

def raw_request(url: str, head: bytes, timeout=10) -> bytes:
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data


@pytest.mark.parametrize("server", ["werkzeug", pytest.param("gunicorn", marks=pytest.mark.processes)])
def test_huge_headers_get_a_clean_4xx_from_the_real_server(request, rich, server, figures):
    target = request.getfixturevalue("served_app" if server == "werkzeug" else "gunicorn")
    url = target.url
    answers = {}
    # 64 KiB in one header, and 150 headers: refused by the HTTP server itself, before the app.
    huge = requests.get(f"{url}{SCAN}/scn_x", headers={"Authorization": "Bearer " + "a" * 65536}, timeout=30)
    answers["64 KiB Authorization"] = huge.status_code
    assert 400 <= huge.status_code < 500
    many = requests.get(f"{url}{SCAN}/scn_x", timeout=30,
                        headers=dict(rich.headers, **{f"X-Pad-{i}": "x" for i in range(150)}))
    answers["150 headers"] = many.status_code
    assert 400 <= many.status_code < 500 or many.status_code == 404
    # 6 KiB: within the servers' limits, so the app answers, as JSON.
    long_token = requests.get(f"{url}{SCAN}/scn_x", headers={"Authorization": "Bearer service_live_" + "a" * 6000},
                              timeout=30)
    answers["6 KiB token"] = long_token.status_code
    assert_json_error(long_token, 401, "invalid_token")
    long_key = requests.post(f"{url}{SCAN}", json={"target": "jane@example.com"}, timeout=30,
                             headers=dict(rich.headers, **{"Idempotency-Key": "k" * 6000}))
    assert_json_error(long_key, 400, "invalid_request")
    # A request line of 10 KiB.
    line = raw_request(url, f"GET {SCAN}/{'x' * 10240} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
    answers["10 KiB request line"] = int(line.split(b" ", 2)[1]) if line.startswith(b"HTTP/") else 0
    assert 400 <= answers["10 KiB request line"] < 500
    # Still serving.
    assert requests.get(f"{url}{SCAN}/scn_x", headers=rich.headers, timeout=30).status_code == 404
    if server == "gunicorn":
        assert target.alive() and "Traceback" not in target.log_text()
    figures.update(requests=6, concurrency=1, faults="none", inputs=list(answers), failures=0, answers=answers)


# --- NUL bytes and Unicode edge cases ---------------------------------------------------------

EDGE_TARGETS = [
    "jane\u0000@example.com", "\u0000\u0000\u0000", "ab\u0000", "user\u0000name", "+44\u00007700900123",
    "\ud800jane@example.com", "jane\udfff", "\u202ejane@example.com", "jane@exa\u200bmple.com",
    "\U0001d4f3\U0001d4ea\U0001d4f7\U0001d4ee@example.com", "\uff4a\uff41\uff4e\uff45@example.com",
    "jos\u00e9@ex\u00e4mple.com", "\u0130stanbul@example.com", "\U0001f600\U0001f600\U0001f600",
    "a\u0301\u0301\u0301", "\ufeffjane@example.com", "jane@example.com\u0000", " \t\n ", "\u3000\u3000jane\u3000",
    "x" * 257, "\U0001f600" * 64, "@" * 300, "+" + "9" * 300, "\u00e9" * 256 + "@example.com",
    "<script>alert(1)</script>", "'; DROP TABLE scan; --", "${jndi:ldap://x}", "../../etc/passwd",
]
EDGE_KINDS = [None, "email", "phone", "username", "email\u0000", "\ud800", ""]


def test_nul_bytes_and_unicode_edge_cases_in_targets(client, rich, figures):
    answers, stored = Counter(), 0
    for kind in EDGE_KINDS:
        for target in EDGE_TARGETS:
            body = {"target": target, **({} if kind is None else {"kind": kind})}
            response = client.post(SCAN, data=json.dumps(body), content_type="application/json",
                                   headers=rich.headers)
            answers[response.status_code] += 1
            assert response.status_code in (202, 400), (target, kind, response.get_data(as_text=True)[:300])
            assert response.mimetype == "application/json"
            if response.status_code == 202:  # admitted: stored and read back exactly as answered
                read = client.get(f"{SCAN}/{response.json['scan_id']}", headers=rich.headers)
                assert read.status_code == 200 and "\u0000" not in read.json["target"]
                stored += 1
        bulk = client.post(BULK, data=json.dumps({"targets": [
            {"target": t, **({} if kind is None else {"kind": kind})} for t in EDGE_TARGETS]}),
            content_type="application/json", headers=rich.headers)
        answers[bulk.status_code] += 1
        assert bulk.status_code == 202, bulk.get_data(as_text=True)[:300]
        assert bulk.json["queued"] + len(bulk.json["rejected"]) == len(EDGE_TARGETS)
        if bulk.json["queued"]:
            assert client.get(f"{BULK}/{bulk.json['bulk_id']}", headers=rich.headers).status_code == 200
    with db.connection_context():
        scans = list(Scan.select())
    assert all("\u0000" not in s.target and len(s.target) <= 300 for s in scans)
    books_balance(rich)
    figures.update(requests=sum(answers.values()) + stored, concurrency=1, faults="none",
                   inputs={"targets": len(EDGE_TARGETS), "kinds": len(EDGE_KINDS)}, failures=0,
                   answers={str(k): v for k, v in sorted(answers.items())}, admitted=len(scans))


EDGE_PATHS = [
    f"{SCAN}/-1", f"{SCAN}/0", f"{SCAN}/99999999999999999999999999", f"{SCAN}/{'9' * 4000}", f"{SCAN}/%00",
    f"{SCAN}/scn_%00abc", f"{SCAN}/..%2F..%2Fetc%2Fpasswd", f"{SCAN}/%ff%fe", f"{SCAN}/'%20OR%20'1'='1",
    f"{SCAN}/%F0%9F%98%80", f"{SCAN}/%ED%A0%80", f"{SCAN}/scn_%0d%0aSet-Cookie:x=y", f"{BULK}/-1",
    f"{BULK}/%00", f"{BULK}/{'b' * 4000}", f"{BULK}/blk_%00", f"{SCAN}/%2e%2e", f"{SCAN}/scn_x%3Fa=b",
    "/app/api-keys/%00", "/app/api-keys/key_%00x",
]


@pytest.mark.parametrize("server", ["test-client", "werkzeug"])
def test_negative_huge_and_nul_ids_in_paths_are_404(request, rich, server, figures):
    if server == "werkzeug":
        base = request.getfixturevalue("served_app").url

        def get(path):
            response = requests.get(f"{base}{path}", headers=rich.headers, timeout=30, allow_redirects=False)
            return response.status_code, response.headers.get("Content-Type", ""), response.text
    else:
        client = request.getfixturevalue("client")

        def get(path):
            response = client.get(path, headers=rich.headers)
            return response.status_code, response.headers.get("Content-Type", ""), response.get_data(as_text=True)
    answers = {}
    for path in EDGE_PATHS:
        status, content_type, text = get(path)
        answers[path[:60]] = status
        if path.startswith("/app/"):
            assert status in (302, 404), (path, status)  # no portal session: the login page, or unknown
            continue
        assert status == 404, (path, status, text[:200])
        assert content_type.startswith("application/json") and json.loads(text)["error"] == "not_found"
    books_balance(rich)
    figures.update(requests=len(EDGE_PATHS), concurrency=1, faults="none", inputs=len(EDGE_PATHS), failures=0)


def test_nul_and_control_characters_in_headers(served_app, rich, figures):
    """Over a raw socket, since client libraries refuse to send some of these."""
    key = rich.api_key.encode()
    body = b'{"target": "jane@example.com"}'
    cases = {
        "NUL in Idempotency-Key": b"Idempotency-Key: a\x00b\r\n",
        "control character in Idempotency-Key": b"Idempotency-Key: a\x1bb\r\n",
        "NUL in X-Request-Id": b"X-Request-Id: req\x00x\r\n",
        "NUL after the bearer token": b"",
    }
    answers = {}
    for name, extra in cases.items():
        auth = b"Authorization: Bearer " + key + (b"\x00x" if "bearer" in name else b"") + b"\r\n"
        head = (b"POST " + SCAN.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + auth + extra
                + b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        raw = raw_request(served_app.url, head)
        status = int(raw.split(b" ", 2)[1])
        answers[name] = status
        assert status in (202, 400, 401), (name, raw[:300])
        if status != 202:
            assert b"application/json" in raw.split(b"\r\n\r\n")[0] or status == 400
    with db.connection_context():
        assert not [r for r in IdempotencyRecord.select() if "\x00" in r.key]
    books_balance(rich)
    figures.update(requests=len(cases), concurrency=1, faults="none", inputs=list(cases), failures=0,
                   answers=answers)


def test_a_slow_client_does_not_hold_the_server(served_app, rich, figures):
    """A body announced but never sent: the other clients are still served meanwhile."""
    host, port = served_app.url.split("//")[1].split(":")
    stalled = socket.create_connection((host, int(port)), timeout=10)
    stalled.sendall(b"POST " + SCAN.encode() + b" HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer " + rich.api_key.encode() + b"\r\nContent-Length: 1000\r\n\r\n{")
    try:
        started = time.monotonic()
        others = [requests.get(f"{served_app.url}{SCAN}/scn_x", headers=rich.headers, timeout=10).status_code
                  for _ in range(5)]
        assert others == [404] * 5 and time.monotonic() - started < 5
    finally:
        stalled.close()
    with db.connection_context():
        assert Scan.select().count() == 0
        assert CreditLedger.select().where(CreditLedger.reason == "scan").count() == 0
    figures.update(requests=6, concurrency=2, faults="a client stalls mid-body", inputs=1, failures=0)
