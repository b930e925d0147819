"""The event registry (app.events) is the one list of webhook events: the services, the OpenAPI
document, the portal and the client all say what it says."""
import sys
from datetime import datetime

from app import events
from app.models import Scan
from app.services import webhooks


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
    assert webhooks.event_body(failed)["event"] == "scan.failed"
    done = Scan(id="scn_y", status="completed", livemode=True, target="a@example.com", kind="email",
                completed_at=moment, result_json="{}")
    assert webhooks.event_body(done)["event"] == "scan.completed"


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
    from app.schemas.scans import _webhook_body_schema
    running = events.EventKind("scan.running", "the engine started work on a scan", "WebhookRunning", "running",
                               (*events.SCAN_FIELDS, "progress"))
    scan = Scan(id="scn_r", status="running", livemode=True, target="a@example.com", kind="email",
                created_at=datetime(2026, 1, 2, 3, 4, 5), recipes_total=8, recipes_done=3)
    body = webhooks.event_body(scan, running)
    assert body == {"event": "scan.running", "scan_id": "scn_r", "livemode": True, "target": "a@example.com",
                    "kind": "email", "status": "running", "purpose": None, "case_ref": None,
                    "progress": {"recipes_total": 8, "recipes_done": 3}}
    schema = _webhook_body_schema(running)()
    assert set(schema.fields) == {"event", *events.SCAN_FIELDS, "progress"}
    assert schema.fields["status"].metadata == {"enum": ["running"]}
    assert schema.fields["progress"].required and not schema.fields["bulk_id"].required
