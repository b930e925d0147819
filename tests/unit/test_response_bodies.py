"""The scan endpoints answer without a marshmallow dump (``app.scans.routes.json_body``): their
bodies must be exactly what the response schema would dump, byte for byte, in every state."""
import json
from datetime import datetime, timedelta

from freezegun import freeze_time

from app.plumbing.rawjson import RawJSON, parsed, render
from app.scans.models import Scan
from app.scans.reads import scan_view
from app.scans.results import normalize_result
from app.scans.schemas import BulkCreatedSchema, BulkStateSchema, ScanCreatedSchema, ScanSchema
from simulator.results import result_for


def smorest_bytes(schema, body) -> bytes:
    """What flask-smorest answered before: the schema's dump, through jsonify (compact)."""
    return (json.dumps(schema.dump(parsed(body)), separators=(",", ":")) + "\n").encode()


def assert_same_as_schema(response, schema) -> None:
    assert response.data == smorest_bytes(schema, json.loads(response.data))
    assert response.mimetype == "application/json"


def test_render_splices_raw_text_and_leaves_look_alike_strings_alone():
    nested = {"a": [1, {"b": "c"}], "d": None}
    text = json.dumps(nested, separators=(",", ":"))
    body = {"x": RawJSON(text), "y": [RawJSON("[]"), "0123456789abcdef:0"]}
    out = render(body, lambda o: json.dumps(o, separators=(",", ":")))
    assert json.loads(out) == {"x": nested, "y": [[], "0123456789abcdef:0"]}


def test_scan_view_matches_the_schema_in_every_state():
    now = datetime(2026, 11, 21, 12, 0, 0)
    result = normalize_result(result_for("phone", "+14155552671", "http://127.0.0.1:1/_sim/artifacts/inv_x"), "phone")
    base = {"id": "scn_x", "customer": "cus_x", "api_key": "key_x", "kind": "phone", "target": "+14155552671",
                "created_at": now, "recipes_total": 8, "recipes_done": 3, "eta_at": now + timedelta(seconds=42)}
    scans = [
        Scan(status="queued", **base),
        Scan(status="running", bulk="blk_x", **base),
        Scan(status="completed", completed_at=now, result_json=json.dumps(result, separators=(",", ":")), **base),
        Scan(status="failed", failed_at=now, failure_code="engine_failed", failure_message=None, **base),
    ]
    for scan in scans:
        body = scan_view(scan, now, raw_result=True)
        text = render(body, lambda o: json.dumps(o, separators=(",", ":"))) + "\n"
        assert text.encode() == smorest_bytes(ScanSchema(), body), scan.status


def test_api_answers_are_the_schema_dumps(client, make_customer, jobs):
    account = make_customer(tier="business", credits=1000)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        created = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers)
        assert created.status_code == 202
        assert_same_as_schema(created, ScanCreatedSchema())
        bulk = client.post("/api/v1/scan/bulk", headers=account.headers, json={"targets": [
            {"target": "john.roe@example.com"}, {"target": "+447700900123"}, {"target": "ab"},
            {"target": "failing.user", "kind": "username"}, {"target": "x@y", "kind": "fax"}, 42]})
        assert bulk.status_code == 202 and bulk.json["rejected"]
        assert_same_as_schema(bulk, BulkCreatedSchema())
        scan_id, bulk_id = created.json["scan_id"], bulk.json["bulk_id"]
        queued = client.get(f"/api/v1/scan/{scan_id}", headers=account.headers)
        assert queued.json["status"] == "queued"
        assert_same_as_schema(queued, ScanSchema())
        assert_same_as_schema(client.get(f"/api/v1/scan/bulk/{bulk_id}", headers=account.headers),
                              BulkStateSchema())
        ids = [scan_id] + [s["scan_id"] for s in bulk.json["scans"]]
        assert jobs.run(frozen, until=lambda: all(Scan.get_by_id(i).status in ("completed", "failed") for i in ids))
        done = client.get(f"/api/v1/scan/{scan_id}", headers=account.headers)
        assert done.json["status"] == "completed"
        assert_same_as_schema(done, ScanSchema())
        batch = client.get(f"/api/v1/scan/bulk/{bulk_id}", headers=account.headers)
        assert batch.json["all_done"] and batch.json["completed"] and batch.json["failed"]
        assert_same_as_schema(batch, BulkStateSchema())
