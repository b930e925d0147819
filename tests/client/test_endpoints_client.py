"""The Python client's webhook endpoints calls (D22), against the served app: create (secret shown
once), list, read, update, roll the secret, recover a window, delete; deliveries' endpoint_id; the same
through ``scan-api endpoints``."""
from __future__ import annotations

import csv
import io
import json

import pytest
from scan_api_client import Endpoint, NotFound, ScanClient, ValidationError
from scan_api_client.cli import main

from app.webhooks import outbox

URL = "https://hooks.example.com/a"
OTHER = "https://hooks.example.com/b"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="


def no_sleep(seconds):
    raise AssertionError(f"the client slept {seconds}s")


def test_the_endpoints_calls(served_app, make_customer):
    account = make_customer(webhook_url=URL, webhook_secret=SECRET)
    api = ScanClient(served_app.url, account.api_key, sleep=no_sleep)
    [first] = api.list_endpoints()
    assert isinstance(first, Endpoint) and first.endpoint_id == outbox.first_endpoint_id(account.key.id)
    assert (first.url, first.events, first.secret) == (URL, ["scan.completed", "scan.failed"], None)

    created = api.create_endpoint(OTHER, events=["scan.running"], payload="thin", description="progress")
    assert created.secret and created.secret.startswith("whsec_") and created.payload == "thin"
    read = api.get_endpoint(created.endpoint_id)
    assert read.secret is None and read.description == "progress"
    changed = api.update_endpoint(created.endpoint_id, enabled=False, events=["scan.running", "scan.failed"])
    assert (changed.enabled, changed.events, changed.url) == (False, ["scan.running", "scan.failed"], OTHER)
    rolled = api.roll_endpoint_secret(created.endpoint_id, overlap_hours=0)
    assert rolled["secret"] != created.secret and rolled["endpoint_id"] == created.endpoint_id
    with pytest.raises(ValidationError, match="no secret rotation"):  # an overlap of 0 switched at once
        api.switch_endpoint_secret(created.endpoint_id)
    overlapping = api.roll_endpoint_secret(created.endpoint_id, overlap_hours=24)
    assert overlapping["switch_at"] and api.get_endpoint(created.endpoint_id).secret_rotation_ends_at
    switched = api.switch_endpoint_secret(created.endpoint_id)
    assert isinstance(switched, Endpoint) and switched.secret_rotation_ends_at is None
    assert api.recover_endpoint(created.endpoint_id, since="2026-11-01T00:00:00Z") == 0
    api.delete_endpoint(created.endpoint_id)
    with pytest.raises(NotFound):
        api.get_endpoint(created.endpoint_id)
    with pytest.raises(ValidationError):
        api.create_endpoint(OTHER, events=["scan.nope"])
    assert [e.endpoint_id for e in api.list_endpoints()] == [first.endpoint_id]
    assert api.list_deliveries(endpoint_id=first.endpoint_id).data == []


def run_cli(served_app, key, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": key})
    return code, out.getvalue(), err.getvalue()


def test_the_endpoints_subcommands(served_app, make_customer):
    account = make_customer(webhook_url=URL, webhook_secret=SECRET)
    first = outbox.first_endpoint_id(account.key.id)

    def cli(*argv):
        code, out, err = run_cli(served_app, account.api_key, "endpoints", *argv)
        assert code == 0 and err == "", (argv, err)
        return json.loads(out) if "--format" not in argv else list(csv.DictReader(io.StringIO(out)))

    created = cli("create", OTHER, "--event", "scan.running", "--event", "scan.failed", "--payload", "thin",
                  "--description", "progress", "--disabled")
    endpoint_id = created["endpoint_id"]
    assert created["secret"].startswith("whsec_") and (created["url"], created["events"], created["enabled"]) == \
        (OTHER, ["scan.running", "scan.failed"], False)
    listed = cli("list", "--format", "csv")
    assert [(row["endpoint_id"], row["url"], row["events"], row["enabled"], row["secret"]) for row in listed] == [
        (first, URL, "scan.completed scan.failed", "true", ""),
        (endpoint_id, OTHER, "scan.running scan.failed", "false", "")]
    assert cli("get", endpoint_id)["description"] == "progress"
    changed = cli("update", endpoint_id, "--enable", "--endpoint-url", URL + "/new", "--payload", "full")
    assert (changed["enabled"], changed["url"], changed["payload"]) == (True, URL + "/new", "full")
    assert cli("update", endpoint_id, "--disable")["enabled"] is False
    [rolled] = cli("roll-secret", endpoint_id, "--overlap-hours", "24", "--format", "csv")
    assert list(rolled) == ["endpoint_id", "secret", "switch_at"] and rolled["secret"].startswith("whsec_")
    assert cli("get", endpoint_id)["secret_rotation_ends_at"] == rolled["switch_at"]
    assert cli("switch-secret", endpoint_id)["secret_rotation_ends_at"] is None
    assert cli("recover", endpoint_id, "--since", "2026-11-01T00:00:00Z")["queued"] == 0
    assert cli("delete", endpoint_id) == {"ok": True, "endpoint_id": endpoint_id, "deleted": True}
    assert [e["endpoint_id"] for e in cli("list")] == [first]

    code, out, err = run_cli(served_app, account.api_key, "endpoints", "get", endpoint_id)
    assert code == 1 and out == "" and "not_found, HTTP 404" in err and "endpoint" in err
    code, out, err = run_cli(served_app, account.api_key, "endpoints", "create", OTHER, "--event", "scan.nope")
    assert code == 1 and "invalid_request, HTTP 400" in err and "Traceback" not in err
    code, out, err = run_cli(served_app, account.api_key, "endpoints")
    assert code == 2 and "ACTION" in err
    code, out, err = run_cli(served_app, account.api_key, "endpoints", "update", "ep_x", "--enable", "--disable")
    assert code == 2 and "not allowed with" in err
