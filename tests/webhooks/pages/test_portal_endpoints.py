"""The key page's endpoints (D22): listed, added (secret shown once), changed, disabled and
enabled, deleted, with the warning of an endpoint auto-disable stopped; each an activity entry."""
import re
from datetime import datetime

from freezegun import freeze_time

from app.accounts.models import ApiKey
from app.activity.models import ActivityEntry
from app.extensions import db
from app.plumbing.crypto import decrypt_secret
from app.webhooks import outbox
from app.webhooks.models import WebhookEndpoint
from tests.portal.helpers import csrf, login

URL = "https://hooks.acme.example/audit"


def _endpoint(key_id) -> WebhookEndpoint:
    with db.connection_context():
        return WebhookEndpoint.get(WebhookEndpoint.api_key == key_id)


def test_add_change_disable_enable_and_delete_an_endpoint(client, portal_account):
    login(client)
    key_id = portal_account.key.id
    page = f"/app/api-keys/{key_id}"
    assert "No endpoint: events of this key are not sent anywhere." in client.get(page).get_data(as_text=True)
    added = client.post(f"{page}/endpoints", data={"csrf_token": csrf(client, page), "url": URL,
                                                   "events": ["scan.running", "scan.failed"], "payload": "thin",
                                                   "description": "audit copy"})
    assert added.status_code == 200, added.get_data(as_text=True)[:2000]
    shown = re.search(r'id="revealed-secret">([^<]+)<', added.get_data(as_text=True)).group(1)
    with db.connection_context():
        key = ApiKey.get_by_id(key_id)
    # The key had no URL: the endpoint became its first, the key's own webhook.
    assert key.webhook_url == URL and decrypt_secret(key.webhook_secret_enc) == shown
    assert key.webhook_events == ["scan.running", "scan.failed"] and key.webhook_payload == "thin"
    endpoint_id = outbox.first_endpoint_id(key_id)
    assert endpoint_id in client.get(page).get_data(as_text=True)

    second = client.post(f"{page}/endpoints", data={"csrf_token": csrf(client, page), "url": URL + "/2",
                                                    "events": ["scan.completed"], "payload": "full"})
    assert second.status_code == 200
    other = _endpoint(key_id)
    changed = client.post(f"{page}/endpoints/{other.id}", data={
        "csrf_token": csrf(client, page), f"{other.id}-url": URL + "/3", f"{other.id}-events": ["scan.failed"],
        f"{other.id}-payload": "thin", f"{other.id}-description": "moved"})
    assert changed.status_code == 302
    other = _endpoint(key_id)
    assert (other.webhook_url, other.webhook_events, other.webhook_description) == (URL + "/3", ["scan.failed"],
                                                                                    "moved")
    off = client.post(f"{page}/endpoints/{other.id}/enabled", data={"csrf_token": csrf(client, page),
                                                                    "enabled": "no"})
    assert off.status_code == 302 and _endpoint(key_id).webhook_enabled is False
    client.post(f"{page}/endpoints/{other.id}/enabled", data={"csrf_token": csrf(client, page), "enabled": "yes"})
    assert _endpoint(key_id).webhook_enabled is True
    gone = client.post(f"{page}/endpoints/{other.id}/delete", data={"csrf_token": csrf(client, page)})
    assert gone.status_code == 302
    with db.connection_context():
        assert not WebhookEndpoint.select().exists()
        logged = [e.action for e in ActivityEntry.select().where(ActivityEntry.customer_id == portal_account.id)]
    assert {"endpoint.create", "endpoint.update", "endpoint.enable", "endpoint.delete"} <= set(logged)


def test_a_refused_url_is_explained_and_nothing_added(client, portal_account):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    refused = client.post(f"{page}/endpoints", data={"csrf_token": csrf(client, page), "url": "ftp://x",
                                                     "events": ["scan.completed"], "payload": "full"})
    assert refused.status_code == 400 and "URL" in refused.get_data(as_text=True)
    with db.connection_context():
        assert ApiKey.get_by_id(portal_account.key.id).webhook_url is None


def test_an_auto_disabled_endpoint_shows_why_and_since_when(client, portal_account):
    with freeze_time("2026-11-27 09:00:00"):
        login(client)
        with db.connection_context():
            ApiKey.update(webhook_url=URL, webhook_enabled=False,
                          webhook_disabled_at=datetime(2026, 11, 26, 13, 0)).where(
                ApiKey.id == portal_account.key.id).execute()
        body = client.get(f"/app/api-keys/{portal_account.key.id}").get_data(as_text=True)
    assert "Disabled on" in body and "2026-11-26 13:00" in body and ">Enable<" in body


def test_a_further_endpoint_rolls_its_secret_after_confirming(client, portal_account):
    with freeze_time("2026-11-21 12:00:00"):
        login(client)
        page = f"/app/api-keys/{portal_account.key.id}"
        client.post(f"{page}/endpoints", data={"csrf_token": csrf(client, page), "url": URL,
                                               "events": ["scan.completed"], "payload": "full"})
        client.post(f"{page}/endpoints", data={"csrf_token": csrf(client, page), "url": URL + "/2",
                                               "events": ["scan.completed"], "payload": "full"})
        endpoint = _endpoint(portal_account.key.id)
        before = endpoint.webhook_secret_enc
        asked = client.post(f"{page}/endpoints/{endpoint.id}/roll-secret",
                            data={"csrf_token": csrf(client, page), "overlap_hours": "2"})
        assert asked.status_code == 200 and "2026-11-21 14:00" in asked.get_data(as_text=True)
        assert _endpoint(portal_account.key.id).webhook_next_secret_enc is None  # nothing before confirming
        done = client.post(f"{page}/endpoints/{endpoint.id}/roll-secret",
                           data={"csrf_token": csrf(client, page), "overlap_hours": "2", "confirm": "yes"})
        shown = re.search(r'id="revealed-secret">([^<]+)<', done.get_data(as_text=True)).group(1)
        rolled = _endpoint(portal_account.key.id)
        assert decrypt_secret(rolled.webhook_next_secret_enc) == shown and rolled.webhook_secret_enc == before
        assert rolled.webhook_secret_switch_at == datetime(2026, 11, 21, 14, 0)
        switched = client.post(f"{page}/endpoints/{endpoint.id}/switch-secret", data={"csrf_token": csrf(client, page)})
        assert switched.status_code == 302
        now_only = _endpoint(portal_account.key.id)
        assert decrypt_secret(now_only.webhook_secret_enc) == shown and now_only.webhook_next_secret_enc is None


def test_the_delivery_list_shows_each_deliverys_endpoint_and_filters_by_it(client, portal_account, make_customer):
    from app.webhooks import endpoints
    stranger = make_customer(webhook_url=URL + "/stranger")
    with db.connection_context():
        ApiKey.update(webhook_url=URL, webhook_description="Case system").where(
            ApiKey.id == portal_account.key.id).execute()
        key = ApiKey.get_by_id(portal_account.key.id)
        second, _ = endpoints.create(key, url=URL + "/2", description="On-call tool")
        made = {}
        for endpoint in outbox.key_endpoints(ApiKey.get_by_id(key.id)):
            body = outbox.sample_event_body()
            made[endpoint.id] = outbox._create_delivery(key, body["event"], body, None, endpoint).id
    first = outbox.first_endpoint_id(key.id)
    login(client)
    page = f"/app/api-keys/{key.id}"
    everything = client.get(page).get_data(as_text=True)
    assert made[first] in everything and made[second["endpoint_id"]] in everything
    assert '<span title="' + first + '">Case system</span>' in everything
    assert '<span title="' + second["endpoint_id"] + '">On-call tool</span>' in everything
    assert 'name="endpoint_id"' in everything

    only_second = client.get(f"{page}?endpoint_id={second['endpoint_id']}").get_data(as_text=True)
    assert made[second["endpoint_id"]] in only_second and made[first] not in only_second
    only_first = client.get(f"{page}?endpoint_id={first}").get_data(as_text=True)
    assert made[first] in only_first and made[second["endpoint_id"]] not in only_first
    # Another key's endpoint is no filter of this page: everything is listed.
    other = client.get(f"{page}?endpoint_id={outbox.first_endpoint_id(stranger.key.id)}").get_data(as_text=True)
    assert made[first] in other and made[second["endpoint_id"]] in other
