"""The event registry (app.events.kinds) is the one list of webhook events: the services, the OpenAPI
document, the portal and the client all say what it says."""
import sys
from datetime import datetime

import pytest

from app.events import kinds as events
from app.scans.models import Scan
from app.watches import event_kinds as watch_kinds
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
    assert spec["components"]["schemas"]["Delivery"]["properties"]["event"]["enum"] == list(events.delivery_events())


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


def test_the_other_domains_kinds_are_declared_before_any_module_reads_them():
    """Each domain keeps its kinds in its own package; ``import app`` declares them first, so a process
    that imports nothing but a module that reads the registry at import (the deliveries' filter, the
    feed's default kinds) sees every kind, in the order customers read them."""
    import json
    import subprocess
    code = ("import json; from app.webhooks import schemas; from app.events import feed, kinds; "
            "print(json.dumps([kinds.delivery_events(), list(schemas.DeliveryListArgs().fields['event']"
            ".validate.choices), feed.DEFAULT_KINDS]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    names, filter_choices, default_kinds = json.loads(done.stdout)
    assert tuple(names) == tuple(filter_choices) == events.delivery_events()
    assert names[:3] == list(events.NAMES)  # the scans' own first, then each domain's
    assert {"endpoint.disabled", "watch.ended", "source.degraded", "subject.erased"} <= set(names)
    assert default_kinds == [name for name in names if not name.startswith("source.")]


def test_the_kinds_are_declared_once():
    declared = events.delivery_events()
    with pytest.raises(RuntimeError, match="declared once"):
        events.REGISTRY.declare(events.Kind("scan.some_future_kind"))
    assert events.delivery_events() == declared


def test_a_declared_kind_says_its_personal_fields_and_whether_a_feed_holds_it_unasked():
    from app.privacy import event_kinds as privacy_kinds
    from app.sources import event_kinds as source_kinds
    assert all(not kind.personal and kind.in_default_feed for kind in privacy_kinds.KINDS)
    assert all(not kind.in_default_feed for kind in source_kinds.KINDS)
    assert events.thinned() == frozenset({*events.NAMES, *watch_kinds.WATCH_EVENTS})
    opted_out = {"event": "subject.opted_out", "scan_ids": ["scn_1"], "at": "2026-01-02T03:04:05Z"}
    assert events.thin_body(opted_out) == opted_out
