"""The webhook endpoints calls (D22): list, create (secret shown once), read, update, delete,
roll secret and recover; scope `webhooks`, 1 credit each, an activity log entry each, another
key's endpoint not found, the URL rules at save."""
from __future__ import annotations

import pytest
from freezegun import freeze_time

from app.accounts import access, admin
from app.activity.models import ActivityEntry
from app.plumbing.crypto import decrypt_secret
from app.plumbing.db import db
from app.webhooks import outbox
from app.webhooks.models import WebhookEndpoint
from tests.api.helpers import balance
from tests.factories import Account

ENDPOINTS = "/api/v1/endpoints"
URL, OTHER = "https://hooks.example.com/x", "https://hooks.example.com/y"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="


@pytest.fixture
def hooked(make_customer):
    return make_customer(webhook_url=URL, webhook_secret=SECRET)


def actions(account) -> list[tuple[str, str | None, int]]:
    with db.connection_context():
        return [(e.action, e.resource_id, e.status) for e in ActivityEntry.select()
                .where(ActivityEntry.customer_id == account.id).order_by(ActivityEntry.created_at, ActivityEntry.id)]


def test_the_keys_url_is_listed_as_its_first_endpoint(client, hooked):
    before = balance(hooked)
    r = client.get(ENDPOINTS, headers=hooked.headers)
    assert r.status_code == 200, r.json
    [first] = r.json["data"]
    assert first == {"endpoint_id": outbox.first_endpoint_id(hooked.key.id), "url": URL,
                     "events": ["scan.completed", "scan.failed"], "payload": "full", "enabled": True,
                     "description": "", "disabled_at": None, "secret_rotation_ends_at": None}
    assert balance(hooked) == before - 1 and actions(hooked)[-1] == ("endpoints.list", None, 200)


def test_create_read_update_roll_and_delete(client, hooked):
    r = client.post(ENDPOINTS, headers=hooked.headers,
                    json={"url": OTHER, "events": ["scan.running"], "payload": "thin", "description": "audit"})
    assert r.status_code == 201, r.json
    endpoint_id, secret = r.json["endpoint_id"], r.json["secret"]
    with db.connection_context():
        assert decrypt_secret(WebhookEndpoint.get_by_id(endpoint_id).webhook_secret_enc) == secret
    assert (r.json["url"], r.json["events"], r.json["payload"]) == (OTHER, ["scan.running"], "thin")

    read = client.get(f"{ENDPOINTS}/{endpoint_id}", headers=hooked.headers).json
    assert "secret" not in read and read["description"] == "audit"

    r = client.patch(f"{ENDPOINTS}/{endpoint_id}", headers=hooked.headers, json={"enabled": False, "url": URL})
    assert r.status_code == 200 and (r.json["enabled"], r.json["url"]) == (False, URL)

    with freeze_time("2026-11-21 12:00:00"):
        r = client.post(f"{ENDPOINTS}/{endpoint_id}/roll-secret", headers=hooked.headers, json={"overlap_hours": 2})
    assert r.status_code == 200, r.json
    assert r.json["switch_at"] == "2026-11-21T14:00:00Z" and r.json["secret"] != secret
    rolled = r.json["secret"]
    with freeze_time("2026-11-21 12:30:00"):
        during = client.get(f"{ENDPOINTS}/{endpoint_id}", headers=hooked.headers).json
        r = client.post(f"{ENDPOINTS}/{endpoint_id}/switch-secret", headers=hooked.headers)
        assert r.status_code == 200, r.json
        assert during["secret_rotation_ends_at"] == "2026-11-21T14:00:00Z" and r.json["secret_rotation_ends_at"] is None
        with db.connection_context():  # switched now, not at 14:00: the rolled secret alone
            row = WebhookEndpoint.get_by_id(endpoint_id)
            assert decrypt_secret(row.webhook_secret_enc) == rolled and row.webhook_next_secret_enc is None
        again = client.post(f"{ENDPOINTS}/{endpoint_id}/switch-secret", headers=hooked.headers)
        assert again.status_code == 400 and "no secret rotation" in again.json["message"]

    r = client.delete(f"{ENDPOINTS}/{endpoint_id}", headers=hooked.headers)
    assert r.status_code == 200 and r.json == {"ok": True, "endpoint_id": endpoint_id, "deleted": True}
    assert client.get(f"{ENDPOINTS}/{endpoint_id}", headers=hooked.headers).status_code == 404
    # (The roll's entry was written at frozen time: compared as a set, not in order.)
    assert sorted(actions(hooked)) == sorted([
        ("endpoint.create", None, 201), ("endpoint.read", endpoint_id, 200), ("endpoint.update", endpoint_id, 200),
        ("endpoint.roll_secret", endpoint_id, 200), ("endpoint.read", endpoint_id, 200),
        ("endpoint.switch_secret", endpoint_id, 200), ("endpoint.switch_secret", endpoint_id, 400),
        ("endpoint.delete", endpoint_id, 200),
        ("endpoint.read", endpoint_id, 404)])


def test_a_given_secret_is_used_and_refused_inputs_are_400(client, hooked):
    r = client.post(ENDPOINTS, headers=hooked.headers, json={"url": OTHER, "secret": SECRET})
    assert r.status_code == 201 and r.json["secret"] == SECRET
    for body in ({"url": OTHER, "events": ["scan.nope"]}, {"url": OTHER, "payload": "fat"}, {"events": []},
                 {"url": OTHER, "secret": "whsec_short"}):
        r = client.post(ENDPOINTS, headers=hooked.headers, json=body)
        assert r.status_code == 400 and r.json["error"] == "invalid_request", (body, r.json)
    assert len(client.get(ENDPOINTS, headers=hooked.headers).json["data"]) == 2


@pytest.mark.config(APP_ENV="production")
def test_a_private_url_is_refused_at_save(client, make_customer):
    account = make_customer()
    r = client.post(ENDPOINTS, headers=account.headers, json={"url": "https://169.254.169.254/latest"})
    assert r.status_code == 400 and r.json["error"] == "invalid_request"
    assert client.get(ENDPOINTS, headers=account.headers).json["data"] == []


def test_another_keys_endpoint_is_not_found(client, hooked, make_customer):
    other = make_customer(webhook_url=URL)
    theirs = outbox.first_endpoint_id(other.key.id)
    for method in ("GET", "PATCH", "DELETE"):
        r = client.open(f"{ENDPOINTS}/{theirs}", method=method, headers=hooked.headers,
                        json={"enabled": False} if method == "PATCH" else None)
        assert r.status_code == 404 and r.json["error"] == "not_found"
    assert client.get(ENDPOINTS, headers=other.headers).json["data"][0]["enabled"] is True


def test_the_calls_need_the_webhooks_scope(client, hooked):
    with db.connection_context():
        key, plaintext = admin.issue_key(hooked.id, "reader", scopes=[access.SCANS_READ])
    reader = Account(hooked.customer, key, plaintext)
    r = client.post(ENDPOINTS, headers=reader.headers, json={"url": OTHER})
    assert r.status_code == 403 and r.json["error"] == "insufficient_scope" and "webhooks" in r.json["message"]


def test_recover_queues_nothing_in_an_empty_window_and_refuses_a_reversed_one(client, hooked):
    first = outbox.first_endpoint_id(hooked.key.id)
    r = client.post(f"{ENDPOINTS}/{first}/recover", headers=hooked.headers, json={"since": "2026-11-01T00:00:00Z"})
    assert r.status_code == 202 and r.json == {"ok": True, "queued": 0}
    r = client.post(f"{ENDPOINTS}/{first}/recover", headers=hooked.headers,
                    json={"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"})
    assert r.status_code == 400 and r.json["error"] == "invalid_request"
    r = client.post(f"{ENDPOINTS}/{first}/recover", headers=hooked.headers, json={})
    assert r.status_code == 400


def test_the_deliveries_list_filters_by_endpoint_and_takes_the_endpoint_event(client, hooked):
    first = outbox.first_endpoint_id(hooked.key.id)
    for query in (f"endpoint_id={first}", "event=endpoint.disabled", "event=scan.running", "status=skipped"):
        r = client.get(f"/api/v1/deliveries?{query}", headers=hooked.headers)
        assert r.status_code == 200 and r.json["data"] == [], (query, r.json)
    assert client.get("/api/v1/deliveries?event=endpoint.exploded", headers=hooked.headers).status_code == 400


def _at_once(count: int, send) -> list:
    """``send()`` from ``count`` threads released together: real concurrent requests."""
    import threading
    barrier, answers = threading.Barrier(count), []

    def one():
        barrier.wait()
        answers.append(send())
    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _secrets(endpoint_id: str) -> tuple:
    with db.connection_context():
        row = WebhookEndpoint.get_by_id(endpoint_id)
        return decrypt_secret(row.webhook_secret_enc), decrypt_secret(row.webhook_next_secret_enc)


def test_concurrent_switches_and_rolls_of_one_endpoint_one_wins_the_others_are_free_conflicts(served_app, hooked):
    """D25 over HTTP: of concurrent switches one switches; a request that read the rotation before
    it is 409 `conflict`, free (one that came after finds none: 400, as a second switch always
    did). Of concurrent rolls without overlap, every answer is 200 or 409 and the secret in force
    is one the answers showed."""
    import requests
    created = requests.post(f"{served_app.url}{ENDPOINTS}", headers=hooked.headers, json={"url": OTHER}, timeout=30)
    endpoint_id = created.json()["endpoint_id"]
    rolled = requests.post(f"{served_app.url}{ENDPOINTS}/{endpoint_id}/roll-secret", headers=hooked.headers,
                           json={"overlap_hours": 24}, timeout=30).json()["secret"]
    before = balance(hooked)
    switches = _at_once(8, lambda: requests.post(f"{served_app.url}{ENDPOINTS}/{endpoint_id}/switch-secret",
                                                 headers=hooked.headers, timeout=60))
    statuses = sorted(r.status_code for r in switches)
    assert statuses.count(200) == 1 and set(statuses) <= {200, 400, 409}, statuses
    assert {r.json()["error"] for r in switches if r.status_code == 409} <= {"conflict"}
    assert _secrets(endpoint_id) == (rolled, None)
    assert balance(hooked) == before - statuses.count(200) - statuses.count(400)  # a conflict is free

    rolls = _at_once(8, lambda: requests.post(f"{served_app.url}{ENDPOINTS}/{endpoint_id}/roll-secret",
                                              headers=hooked.headers, json={"overlap_hours": 0}, timeout=60))
    assert {r.status_code for r in rolls} <= {200, 409}, [(r.status_code, r.json()) for r in rolls]
    shown = [r.json()["secret"] for r in rolls if r.status_code == 200]
    assert shown and _secrets(endpoint_id)[0] in shown and _secrets(endpoint_id)[1] is None


def test_creating_an_endpoint_costs_a_credit_as_every_call(client, hooked):
    """Each endpoints call costs 1 credit, its 201 creation too (a 2xx is a served call)."""
    before = balance(hooked)
    r = client.post(ENDPOINTS, headers=hooked.headers, json={"url": OTHER})
    assert r.status_code == 201
    assert balance(hooked) == before - 1
    assert r.headers["X-Credits-Remaining"] == str(before - 1)
