"""The event registry (app.events.kinds) is the one list of webhook events: the services, the OpenAPI
document, the portal and the client all say what it says."""
import sys
from datetime import datetime

from app.events import kinds as events
from app.scans.models import Scan
from app.webhooks import outbox


def test_every_event_has_its_body_schema_in_the_document(client):
    spec = client.get("/api/v1/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    for kind in events.EVENTS:
        assert schemas[kind.schema]["properties"]["event"]["enum"] == [kind.name]
    callback = spec["paths"]["/api/v1/scan"]["post"]["callbacks"]["scanFinished"]
    body = next(iter(callback.values()))["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["discriminator"]["mapping"]) == set(events.NAMES)
    # A delivery may also carry the event about the key's endpoints (endpoint.disabled).
    assert spec["components"]["schemas"]["Delivery"]["properties"]["event"]["enum"] == list(events.DELIVERY_EVENTS)


def test_a_final_scan_sends_the_event_of_its_status():
    assert events.for_status("completed") is events.SCAN_COMPLETED
    assert events.for_status("failed") is events.SCAN_FAILED
    moment = datetime(2026, 1, 2, 3, 4, 5)
    failed = Scan(id="scn_x", status="failed", livemode=True, target="a@example.com", kind="email",
                  failed_at=moment, failure_code="engine_failed", failure_message="no")
    assert outbox.event_body(failed)["event"] == "scan.failed"
    done = Scan(id="scn_y", status="completed", livemode=True, target="a@example.com", kind="email",
                completed_at=moment, result_json="{}")
    assert outbox.event_body(done)["event"] == "scan.completed"


def test_the_client_keeps_no_copy_of_the_event_names():
    """The service validates the filter; the client passes any name on, so a new kind needs no
    client release."""
    sys.path.insert(0, "client")
    from scan_api_client import cli
    parser = cli.build_parser(sys.stdout, sys.stderr)
    args = parser.parse_args(["deliveries", "--event", "scan.some_future_kind"])
    assert args.event == "scan.some_future_kind"


def test_a_kinds_body_is_its_fields_of_the_read_in_order():
    read = {"ok": True, "scan_id": "scn_1", "livemode": False, "status": "failed", "target": "t", "kind": "email",
            "created_at": "x", "failed_at": "y", "failure": {"code": "engine_failed", "message": ""}}
    body = events.SCAN_FAILED.body(read)
    assert list(body) == ["event", "scan_id", "livemode", "target", "kind", "status", "failed_at", "failure"]
    # purpose and case_ref are in every read (null when not given), so in every body: this read has none
    assert body["event"] == "scan.failed"
    assert "bulk_id" in events.SCAN_FAILED.body({**read, "bulk_id": "blk_1"})


def test_a_new_kind_needs_only_its_registry_entry():
    """What a newcomer adds for a new event: the entry. Its body and its schema follow from it."""
    from app.scans.schemas import _webhook_body_schema
    running = events.EventKind("scan.running", "the engine started work on a scan", "WebhookRunning", "running",
                               (*events.SCAN_FIELDS, "progress"))
    scan = Scan(id="scn_r", status="running", livemode=True, target="a@example.com", kind="email",
                created_at=datetime(2026, 1, 2, 3, 4, 5), recipes_total=8, recipes_done=3)
    body = outbox.event_body(scan, running)
    assert body == {"event": "scan.running", "scan_id": "scn_r", "livemode": True, "target": "a@example.com",
                    "kind": "email", "status": "running", "purpose": None, "case_ref": None,
                    "progress": {"recipes_total": 8, "recipes_done": 3}}
    schema = _webhook_body_schema(running)()
    assert set(schema.fields) == {"event", *events.SCAN_FIELDS, "progress"}
    assert schema.fields["status"].metadata == {"enum": ["running"]}
    assert schema.fields["progress"].required and not schema.fields["bulk_id"].required


def test_the_watch_events_are_in_the_registry_and_the_document(client):
    spec = client.get("/api/v1/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    assert events.WATCH_EVENTS == ("watch.changed", "watch.paused", "watch.ended")
    for kind in events.WATCH_KINDS:
        full, thin = schemas[kind.schema], schemas[kind.schema + "Thin"]
        assert full["properties"]["event"]["enum"] == [kind.name]
        assert list(full["properties"]) == ["event", *kind.fields]
        # watch.ended has no target: the watch forgot it when the person opted out
        assert ("target" in full["properties"]) == (kind.name != "watch.ended")
        assert "kind" in full["properties"] and not {"target", "kind", "added_items"} & set(thin["properties"])
    callback = spec["paths"]["/api/v1/watches"]["post"]["callbacks"]["watchEvents"]
    operation = next(iter(callback.values()))["post"]
    body = operation["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["discriminator"]["mapping"]) == set(events.WATCH_EVENTS)
    example = body["examples"]["watch.changed"]["value"]
    assert list(example) == ["event", *events.WATCH_KINDS[0].fields]
    [header] = [p for p in operation["parameters"] if p["name"] == "X-Service-Event"]
    assert header["schema"]["enum"] == list(events.WATCH_EVENTS)
    # The events list and stream take and show them.
    assert set(events.WATCH_EVENTS) <= set(schemas["Event"]["properties"]["event"]["enum"])
    listing = spec["paths"]["/api/v1/events"]["get"]["parameters"]
    [kinds] = [p for p in listing if p["name"] == "events"]
    assert "watch\\.changed" in kinds["schema"]["pattern"] and "watch.paused" in kinds["description"]
    assert all(f"`{name}`" in spec["info"]["description"] for name in events.WATCH_EVENTS)


def test_one_thin_rule_for_every_kind():
    watch = {"event": "watch.ended", "watch_id": "wch_1", "livemode": True, "purpose": None, "case_ref": None,
             "reason": "target_suppressed", "target": "a@example.com", "kind": "email"}
    assert events.thin_body(watch) == {k: v for k, v in watch.items() if k not in ("target", "kind")}
    scan = {"event": "scan.failed", "scan_id": "scn_1", "livemode": True, "target": "a@example.com",
            "status": "failed", "failure": {"code": "engine_failed", "message": "no"}}
    assert events.thin_body(scan) == {"event": "scan.failed", "scan_id": "scn_1", "livemode": True,
                                      "status": "failed"}
    key_event = {"event": "endpoint.disabled", "endpoint_id": "ep_1"}
    assert events.thin_body(key_event) == key_event
