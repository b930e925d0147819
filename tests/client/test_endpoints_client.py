"""The Python client's webhook endpoints calls (D22), against the served app: create (secret shown
once), list, read, update, roll the secret, recover a window, delete; deliveries' endpoint_id."""
from __future__ import annotations

import pytest
from scan_api_client import Endpoint, NotFound, ScanClient, ValidationError

from app.services import webhooks

URL = "https://hooks.example.com/a"
OTHER = "https://hooks.example.com/b"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="


def no_sleep(seconds):
    raise AssertionError(f"the client slept {seconds}s")


def test_the_endpoints_calls(served_app, make_customer):
    account = make_customer(webhook_url=URL, webhook_secret=SECRET)
    api = ScanClient(served_app.url, account.api_key, sleep=no_sleep)
    [first] = api.list_endpoints()
    assert isinstance(first, Endpoint) and first.endpoint_id == webhooks.first_endpoint_id(account.key.id)
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
