"""The OpenAPI document: valid, every operation named and tagged, examples for every request and error code,
the webhook events; and a client generated from it works against the served API."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from app import create_app
from app.billing import charges

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture
def spec(client):
    return client.get("/api/v1/openapi.json").get_json()


def operations(spec):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def test_the_document_validates_and_names_every_operation(spec):
    validate(spec)
    assert spec["servers"] and spec["servers"][0]["url"]
    ids = [op.get("operationId") for _, _, op in operations(spec)]
    assert all(ids) and len(set(ids)) == len(ids)
    assert {"createScan", "getScan", "createBulk", "getBulk", "listScans"} <= set(ids)
    tag_names = {t["name"] for t in spec["tags"]}
    assert all(op.get("tags") and set(op["tags"]) <= tag_names for _, _, op in operations(spec))


def test_the_document_is_written_once_when_first_read_and_whole_for_every_reader(app, spec):
    """An app starts without writing the document; the first read writes it, and readers that
    come meanwhile wait for all of it instead of reading what is written so far."""
    import threading

    fresh = create_app(dict(app.config))
    api = fresh.extensions["scan_api"]
    assert not api.written, "the document was written at start"
    documents, start = [], threading.Barrier(4)

    def read():
        start.wait()
        documents.append(json.dumps(api.spec.to_dict(), sort_keys=True))

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(30)
    assert api.written and len(documents) == 4
    assert len(set(documents)) == 1 and json.loads(documents[0]) == spec  # each whole: the document served


def test_every_request_body_has_an_example(spec):
    for path, method, op in operations(spec):
        if "requestBody" in op:
            content = op["requestBody"]["content"]["application/json"]
            assert "example" in content or "examples" in content, (method, path)


def test_every_error_status_shows_the_codes_it_carries(spec):
    seen = {}
    for path, method, op in operations(spec):
        for status, response in op["responses"].items():
            if not status.isdigit() or int(status) < 400:
                continue
            examples = response["content"]["application/json"]["examples"]
            for code, example in examples.items():
                assert example["value"]["error"] == code and example["value"]["ok"] is False
                assert f"`{code}`" in response["description"], (path, method, status, code)
                seen.setdefault(status, set()).add(code)
    assert seen["401"] == {"unauthorized", "invalid_token", "key_expired"}
    assert "target_too_short" not in seen["401"] | seen["402"] | seen["404"]
    assert seen["402"] == {"insufficient_balance"} and seen["503"] == {"service_unavailable"}
    assert {"no_targets", "too_many_targets", "target_too_short"} <= seen["400"]


def test_every_operation_names_the_refusals_of_the_key(spec):
    """D21: any endpoint can refuse an expired key (401), a call from outside the key's allowlist or
    without the scope it needs (403), and says so with an example of each."""
    for path, method, op in operations(spec):
        assert {"key_expired"} <= set(op["responses"]["401"]["content"]["application/json"]["examples"]), path
        assert {"ip_not_allowed", "insufficient_scope"} <= set(
            op["responses"]["403"]["content"]["application/json"]["examples"]), (path, method)


def test_every_operation_says_the_scope_its_view_declares(app, spec):
    from app.accounts import access
    from app.api.hooks import declared, route_of

    seen = 0
    for rule in app.url_map.iter_rules():
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            scope = declared(app, rule, method, "scope")
            if scope is None:
                continue
            description = spec["paths"][route_of(rule.rule)][method.lower()]["description"]
            assert description.endswith("Any key may call it, whatever its scopes." if scope == access.ANY_SCOPE
                                        else f"Needs the key scope `{scope}`."), (rule.rule, method)
            seen += 1
    assert seen >= 8


def test_webhook_events_and_their_signature_headers(spec):
    callbacks = spec["paths"]["/api/v1/scan"]["post"]["callbacks"]
    [(url, item)] = callbacks["scanFinished"].items()
    operation = item["post"]
    headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert {"X-Service-Signature", "X-Service-Delivery", "X-Service-Timestamp", "X-Service-Event", "webhook-id",
            "webhook-timestamp", "webhook-signature"} <= headers
    body = operation["requestBody"]["content"]["application/json"]
    assert set(body["examples"]) == {"scan.completed", "scan.failed"}
    schemas = spec["components"]["schemas"]
    assert schemas["WebhookCompleted"]["properties"]["event"]["enum"] == ["scan.completed"]
    assert {"failure", "failed_at"} <= set(schemas["WebhookFailed"]["required"])
    assert "callbacks" in spec["paths"]["/api/v1/scan/bulk"]["post"]


OPTIONAL_PROPERTIES = {"reason"}
EXPLANATION_SCHEMAS = ("Result", "Risk", "Reason", "Source", "Coverage", "Finding", "Feedback", "Filtered")


def _resolve(spec, schema):
    ref = schema.get("$ref") or (schema.get("allOf") or [{}])[0].get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


# The result's only field present some of the time: what a min_confidence left out (D29).
OPTIONAL_RESULT_FIELDS = {"result": {"filtered"}}


def _matches(spec, schema, value, where="result"):
    """``value`` has exactly the properties of ``schema`` (all required but OPTIONAL_RESULT_FIELDS), at every level."""
    if value is None:
        assert schema.get("nullable"), where
        return
    schema = _resolve(spec, schema)
    if schema.get("type") == "object" or "properties" in schema:
        required = set(schema.get("required", []))
        # Every property required but a quarantined source's ``reason`` (present on that source only)
        # and the result's ``filtered`` (what a min_confidence left out).
        optional = OPTIONAL_PROPERTIES | OPTIONAL_RESULT_FIELDS.get(where, set())
        assert set(schema["properties"]) - required <= optional, where
        assert required <= set(value) <= set(schema["properties"]), where
        for name, item in value.items():
            _matches(spec, schema["properties"][name], item, f"{where}.{name}")
    elif schema.get("type") == "array":
        for index, item in enumerate(value):
            _matches(spec, schema["items"], item, f"{where}[{index}]")


def test_the_result_explanation_documents_every_field_with_an_example(spec):
    """Sources, coverage, partial, findings and the score's reasons: each leaf field has an example, and the
    webhook's example result shows every field of the result."""
    schemas = spec["components"]["schemas"]
    for name in EXPLANATION_SCHEMAS[1:]:
        for field, prop in schemas[name]["properties"].items():
            leaf = "$ref" not in prop and "allOf" not in prop and prop.get("type") != "array"
            assert not leaf or "example" in prop or prop.get("type") == "boolean", (name, field)
    for field in ("sources", "coverage", "partial", "findings"):
        assert field in schemas["Result"]["required"] and schemas["Result"]["properties"][field]["description"]
    assert schemas["Source"]["properties"]["status"]["enum"] == ["found", "not_found", "error", "rate_limited",
                                                                 "timeout", "skipped"]
    callbacks = spec["paths"]["/api/v1/scan"]["post"]["callbacks"]["scanFinished"]
    [item] = callbacks.values()
    example = item["post"]["requestBody"]["content"]["application/json"]["examples"]["scan.completed"]["value"]
    _matches(spec, schemas["Result"], example["result"])
    reasons = example["result"]["risk"]["reasons"]
    assert sum(r["points"] for r in reasons) == example["result"]["risk"]["score"]


@pytest.mark.processes
def test_a_generated_client_creates_and_reads_a_scan(spec, served_app, account, tmp_path):
    (tmp_path / "openapi.json").write_text(json.dumps(spec))
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    generated = subprocess.run([os.path.join(bin_dir, "openapi-python-client"), "generate", "--path",
                                str(tmp_path / "openapi.json"), "--output-path", str(tmp_path / "generated_client"),
                                "--meta", "none"], capture_output=True, text=True, env=env, timeout=180)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Warning" not in generated.stdout, generated.stdout
    # Its own models, not anonymous ones: a nullable phone profile, bulk targets, one Kind enum.
    models = {path.stem for path in (tmp_path / "generated_client" / "models").glob("*.py")}
    assert not [name for name in models if "type_0" in name or "type_1" in name], sorted(models)
    assert {"kind", "bulk_target", "phone_profile"} <= models
    bulk_create = (tmp_path / "generated_client" / "models" / "bulk_create.py").read_text()
    assert "list[BulkTarget]" in bulk_create
    script = textwrap.dedent(f"""
        import sys
        from generated_client import AuthenticatedClient
        from generated_client.api.scans import create_scan, get_scan, list_scans
        from generated_client.models import ScanCreate, ScanCreated, Scan, ScanList
        api = AuthenticatedClient(base_url={served_app.url!r}, token={account.api_key!r})
        created = create_scan.sync(client=api, body=ScanCreate(target="jane@example.com"))
        assert isinstance(created, ScanCreated), created
        read = get_scan.sync(client=api, scan_id=created.scan_id)
        assert isinstance(read, Scan) and read.scan_id == created.scan_id and read.target == "jane@example.com"
        listed = list_scans.sync(client=api, limit=5)
        assert isinstance(listed, ScanList) and listed.data[0].scan_id == created.scan_id
        print(created.scan_id, read.status.value if hasattr(read.status, "value") else read.status)
    """)
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    scan_id, status = ran.stdout.split()
    assert scan_id.startswith("scn_") and status == "queued"


def test_references_a_generated_client_can_use(spec):
    schemas = spec["components"]["schemas"]
    assert schemas["BulkCreate"]["properties"]["targets"]["items"] == {"$ref": "#/components/schemas/BulkTarget"}
    assert schemas["Result"]["properties"]["phone_profile"]["allOf"] == [{"$ref": "#/components/schemas/PhoneProfile"}]
    assert schemas["Result"]["properties"]["phone_profile"]["nullable"] is True
    assert schemas["Kind"]["enum"] == ["email", "phone", "username"]
    kinds = {name: schema["properties"]["kind"] for name, schema in schemas.items()
             if "kind" in schema.get("properties", {})}
    inline = [name for name, prop in kinds.items() if "enum" in prop]
    assert inline == []  # every enumerated kind is the one Kind component
    assert kinds["ScanCreate"]["allOf"] == [{"$ref": "#/components/schemas/Kind"}]


def test_the_prices_customers_read_are_billings(spec):
    """Every operation says its price in billing's words (a new price is one change in billing), at the
    end of its first paragraph (the scope it needs follows)."""
    by_id = {operation["operationId"]: operation for _, _, operation in operations(spec)}
    assert by_id["createBulk"]["description"].split("\n\n")[0].endswith(f"Costs {charges.PRICE_WORDS['bulk']}.")
    assert by_id["createScan"]["description"].split("\n\n")[0].endswith(f"Costs {charges.PRICE_WORDS['scan']}.")
    assert by_id["getScan"]["description"].split("\n\n")[0].endswith(f"Costs {charges.PRICE_WORDS['call']}.")
    assert "{price}" not in json.dumps(spec) and "{call_price}" not in json.dumps(spec)
    assert f"costs {charges.PRICE_WORDS['call']}, except {charges.PRICE_WORDS['free_403']};" in " ".join(
        spec["info"]["description"].split())  # the 403s that cost nothing are named
    assert "`insufficient_scope`, `ip_not_allowed` or `target_suppressed`" in charges.PRICE_WORDS["free_403"]


def test_the_readme_never_says_every_403_costs_a_credit():
    """Where the README says a 403 costs a credit it names the free ones in the same sentence (its
    behaviour details said a read answered 403 costs 1 credit, unqualified)."""
    import re
    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    for sentence in re.findall(r"[^.]*\b403\b[^.]*\bcosts? (?:1|a|one) credit[^.]*\.", text):
        assert "insufficient_scope" in sentence and "ip_not_allowed" in sentence, sentence


def test_the_document_is_as_strict_as_the_service(client, account, spec):
    """What the document promises about requests, the service keeps: error details are lists of sentences
    per field (an item named by its index), unknown fields and parameters are refused, purpose may be
    null in bulk, and the bounds a fuzzer reads are there."""
    schemas = spec["components"]["schemas"]
    assert schemas["Error"]["properties"]["details"]["additionalProperties"] == {"type": "array",
                                                                                 "items": {"type": "string"}}
    refused = client.post("/api/v1/endpoints", json={"url": "https://hooks.example.com/x", "events": [None]},
                          headers=account.headers)
    assert refused.status_code == 400 and "events" in refused.json["message"]
    assert all(isinstance(v, list) and all(isinstance(m, str) for m in v)
               for v in refused.json.get("details", {}).values())
    from app.errors import _validation_details  # any nesting webargs reports comes out flat
    assert _validation_details({"messages": {"json": {"events": {0: ["Field may not be null."]}, "a": ["x"]}}}) \
        == {"events[0]": ["Field may not be null."], "a": ["x"]}
    for name in ("ScanCreate", "BulkCreate", "BulkTarget", "EndpointCreate", "EndpointUpdate", "RollSecret",
                 "FeedbackCreate", "Recover"):
        assert schemas[name]["additionalProperties"] is False, name
    unknown = client.post("/api/v1/scan", json={"target": "jane@example.com", "colour": "red"},
                          headers=account.headers)
    assert unknown.status_code == 400 and unknown.json["details"] == {"colour": ["Unknown field."]}
    query = client.get("/api/v1/scans?colour=red", headers=account.headers)
    assert query.status_code == 400 and "query parameter" in query.json["message"]
    assert schemas["RollSecret"]["properties"]["overlap_hours"]["type"] == "integer"
    made = client.post("/api/v1/endpoints", json={"url": "https://hooks.example.com/x"}, headers=account.headers)
    endpoint = made.json["endpoint_id"]
    for hours in ("24", 24.0, True):  # an integer, as documented: no string, float or boolean for it
        rolled = client.post(f"/api/v1/endpoints/{endpoint}/roll-secret", json={"overlap_hours": hours},
                             headers=account.headers)
        assert rolled.status_code == 400 and "overlap_hours" in rolled.json["details"], hours
    for enabled in ("yes", 1, "true"):
        changed = client.patch(f"/api/v1/endpoints/{endpoint}", json={"enabled": enabled}, headers=account.headers)
        assert changed.status_code == 400 and "enabled" in changed.json["details"], enabled
    assert schemas["ScanCreate"]["properties"]["target"]["minLength"] == 3
    assert schemas["BulkCreate"]["properties"]["targets"]["minItems"] == 1
    assert schemas["BulkCreate"]["properties"]["purpose"]["nullable"] is True
    assert schemas["Purpose"]["enum"] and "enum" not in schemas["BulkCreate"]["properties"]["purpose"]
    bulk = client.post("/api/v1/scan/bulk", json={"targets": [{"target": "ann@example.com"}], "purpose": None},
                       headers=account.headers)
    assert bulk.status_code == 202, bulk.json
    extra = client.post("/api/v1/scan/bulk", json={"targets": [{"target": "ann@example.com", "x": 1}]},
                        headers=account.headers)
    assert extra.status_code == 202 and extra.json["rejected"][0]["error"] == "invalid_request"


def accepted_query_parameters(app) -> dict[tuple[str, str], set[str]]:
    """What each API view takes in its query string, from its own argument schemas: ``{(OpenAPI
    path, method): names}``."""
    import re

    accepted: dict[tuple[str, str], set[str]] = {}
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/"):
            continue
        view = app.view_functions[rule.endpoint]
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        for method in (rule.methods or set()) & {m.upper() for m in HTTP_METHODS}:
            handler = getattr(getattr(view, "view_class", None), method.lower(), view)
            for argument in getattr(handler, "_apidoc", {}).get("arguments", {}).get("parameters", []):
                if argument.get("in") == "query":
                    schema = argument["schema"]
                    schema = schema() if isinstance(schema, type) else schema
                    names = {field.data_key or name for name, field in schema.fields.items() if not field.dump_only}
                    accepted.setdefault((path, method.lower()), set()).update(names)
    return accepted


def test_every_query_parameter_the_service_takes_is_in_the_document(app, spec):
    """A header documented by hand beside query arguments once hid them (the stream's filters,
    ``wait`` on a creation)."""
    accepted = accepted_query_parameters(app)
    assert {"events", "scan_id", "watch_id", "after"} <= accepted[("/api/v1/events/stream", "get")]
    assert "wait" in accepted[("/api/v1/scan", "post")]
    for (path, method), names in accepted.items():
        documented = {p["name"] for p in spec["paths"][path][method].get("parameters", []) if p["in"] == "query"}
        assert names <= documented, (method, path, names - documented)


# The four lists whose cursor must be one of the caller's objects (the events feed pages from any
# well-formed id), each with a well-formed id that is no one's.
OWN_CURSORS = {"/api/v1/scans": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "/api/v1/activity": "act_Wq3nV7xL0bKp2mYt9cR4sA",
               "/api/v1/deliveries": "dlv_T3JhbmdlIGp1aWNlIGJveA", "/api/v1/watches": "wch_Q2x0mV8rLk1cYt6nWb3a9g"}


@pytest.mark.parametrize("path", OWN_CURSORS)
def test_the_document_says_an_unknown_cursor_is_a_400_as_the_service_answers(client, account, spec, path):
    operation = spec["paths"][path]["get"]
    cursor = next(p for p in operation["parameters"] if p["name"] == "starting_after")
    assert "not one of your" in cursor["description"] and "400 `invalid_request`" in cursor["description"]
    assert "`starting_after` is not one of your" in operation["responses"]["400"]["description"] \
        or "`starting_after` not one of your" in operation["responses"]["400"]["description"]
    answer = client.get(path, query_string={"starting_after": OWN_CURSORS[path]}, headers=account.headers)
    assert (answer.status_code, answer.json["error"]) == (400, "invalid_request"), answer.json


@pytest.mark.parametrize("path", ["/api/v1/scan/bulk", "/api/v1/watches/bulk"])
def test_the_document_says_an_empty_bulk_target_is_a_rejected_entry_as_the_service_answers(
        client, make_customer, spec, path):
    schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[-1]
    words = spec["components"]["schemas"][name]["properties"]["targets"]["description"]
    assert "an empty or too short target" in words and "`rejected`" in words and "not make the call a 400" in words
    account = make_customer(tier="enterprise", credits=100)
    body = {"targets": [{"target": ""}, {"target": "jane@example.com"}]}
    if "watches" in path:
        body["interval"] = "weekly"
    answer = client.post(path, json=body, headers=account.headers)
    assert answer.status_code in (201, 202), answer.json
    assert [(r["index"], r["target"]) for r in answer.json["rejected"]] == [(0, "")]
