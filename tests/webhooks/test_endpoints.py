"""endpoints: a key's webhook endpoints (D22): the key's URL as its first endpoint, up to 10 each
with its own secret, events, payload, enabled flag and description; the URL rules at save; each
endpoint rolling its own secret; recover's window."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts.models import ApiKey, Customer
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import Conflict, EndpointNotFound, InvalidRequest
from app.tracking import states
from app.webhooks import endpoints, outbox, signing_secrets
from app.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.domain_fixtures import new_customer, new_scan

URL = "https://hooks.example.com/x"
OTHER = "https://hooks.example.com/y"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="
NOW = datetime(2026, 11, 22, 12, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}}


def _customer_and_key(key):
    return Customer.get_by_id(key.customer_id), key


@pytest.fixture
def key(conn):
    _, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
    return key


def test_the_keys_url_and_secret_are_its_first_endpoint_with_the_default_events(key):
    [first] = endpoints.list_endpoints(key)
    assert first["endpoint_id"] == outbox.first_endpoint_id(key.id) and first["endpoint_id"].startswith("ep_")
    assert (first["url"], first["events"], first["payload"], first["enabled"], first["description"]) == (
        URL, ["scan.completed", "scan.failed"], "full", True, "")
    assert "secret" not in first


def test_a_key_without_url_has_none_and_its_first_creation_becomes_the_keys_url(conn):
    _, key = new_customer()
    assert endpoints.list_endpoints(key) == []
    created, secret = endpoints.create(key, url=URL, events=["scan.completed"])
    row = ApiKey.get_by_id(key.id)
    assert created["endpoint_id"] == outbox.first_endpoint_id(key.id)
    assert row.webhook_url == URL and decrypt_secret(row.webhook_secret_enc) == secret
    assert secret.startswith("whsec_") and row.webhook_events == ["scan.completed"]


def test_a_further_endpoint_has_its_own_secret_and_settings(key):
    created, secret = endpoints.create(key, url=OTHER, events=["scan.running", "scan.failed"], payload="thin",
                                       description="audit copy")
    assert created["endpoint_id"] != outbox.first_endpoint_id(key.id)
    row = WebhookEndpoint.get_by_id(created["endpoint_id"])
    assert decrypt_secret(row.webhook_secret_enc) == secret != SECRET and secret not in row.webhook_secret_enc
    assert (created["url"], created["events"], created["payload"], created["description"]) == (
        OTHER, ["scan.running", "scan.failed"], "thin", "audit copy")
    given, shown = endpoints.create(key, url=OTHER, secret=SECRET)
    assert shown == SECRET and decrypt_secret(WebhookEndpoint.get_by_id(given["endpoint_id"]).webhook_secret_enc) == SECRET
    assert [e["endpoint_id"] for e in endpoints.list_endpoints(key)][1:] == [created["endpoint_id"],
                                                                            given["endpoint_id"]]


def test_at_most_ten_endpoints_per_key(key):
    for _ in range(9):
        endpoints.create(key, url=OTHER)
    with pytest.raises(Conflict, match="at most 10") as refused:
        endpoints.create(key, url=OTHER)
    assert refused.value.code == "endpoint_limit"
    assert len(endpoints.list_endpoints(key)) == 10


@pytest.mark.parametrize("changes, message", [
    ({"events": []}, "events"), ({"events": ["scan.exploded"]}, "events"), ({"payload": "fat"}, "payload"),
    ({"description": "x" * 501}, "description"), ({"url": "ftp://hooks.example.com"}, "URL"),
])
def test_refused_inputs_change_nothing(key, changes, message):
    created, _ = endpoints.create(key, url=OTHER)
    with pytest.raises(InvalidRequest, match=message):
        endpoints.update(key, created["endpoint_id"], **changes)
    assert endpoints.read(key, created["endpoint_id"]) == created


@pytest.mark.config(APP_ENV="production")
def test_a_private_address_is_refused_at_save_as_for_the_keys_url(conn):
    _, key = new_customer()
    with pytest.raises(InvalidRequest, match="https"):
        endpoints.create(key, url="http://hooks.example.com/x")
    with pytest.raises(InvalidRequest):
        endpoints.create(key, url="https://10.0.0.5/hook")
    assert WebhookEndpoint.select().count() == 0 and ApiKey.get_by_id(key.id).webhook_url is None


def test_update_and_delete(key):
    created, _ = endpoints.create(key, url=OTHER)
    changed = endpoints.update(key, created["endpoint_id"], url=URL + "/2", events=["scan.failed"], payload="thin",
                               enabled=False, description="paused")
    assert (changed["url"], changed["events"], changed["payload"], changed["enabled"], changed["description"]) == (
        URL + "/2", ["scan.failed"], "thin", False, "paused")
    first = endpoints.update(key, outbox.first_endpoint_id(key.id), payload="thin")
    assert first["payload"] == "thin" and ApiKey.get_by_id(key.id).webhook_payload == "thin"
    endpoints.delete(key, created["endpoint_id"])
    with pytest.raises(EndpointNotFound):
        endpoints.read(key, created["endpoint_id"])
    endpoints.delete(key, outbox.first_endpoint_id(key.id))
    assert endpoints.list_endpoints(key) == [] and ApiKey.get_by_id(key.id).webhook_secret_enc is None


def test_another_keys_endpoint_is_not_found(key, conn):
    _, other = new_customer(webhook_url=URL)
    theirs, _ = endpoints.create(other, url=OTHER)
    for endpoint_id in (theirs["endpoint_id"], outbox.first_endpoint_id(other.id), "ep_nope"):
        with pytest.raises(EndpointNotFound):
            endpoints.update(key, endpoint_id, description="mine now")
        with pytest.raises(EndpointNotFound):
            endpoints.delete(key, endpoint_id)
    assert endpoints.read(other, theirs["endpoint_id"])["description"] == ""


def test_each_endpoint_rolls_its_own_secret_with_an_overlap(key):
    created, secret = endpoints.create(key, url=OTHER)
    with freeze_time(NOW):
        rolled = endpoints.roll_secret(key, created["endpoint_id"], overlap_hours=24)
        assert rolled.overlapping and rolled.switch_at == NOW + timedelta(hours=24)
        row = WebhookEndpoint.get_by_id(created["endpoint_id"])
        assert decrypt_secret(row.webhook_next_secret_enc) == rolled.secret
        assert signing_secrets.signing_secrets(row, NOW).active == [secret, rolled.secret]
        assert endpoints.read(key, created["endpoint_id"])["secret_rotation_ends_at"] == "2026-11-23T12:00:00Z"
        with pytest.raises(InvalidRequest, match="already under way"):
            endpoints.roll_secret(key, created["endpoint_id"])
    assert decrypt_secret(ApiKey.get_by_id(key.id).webhook_secret_enc) == SECRET  # the key's is untouched
    row = WebhookEndpoint.get_by_id(created["endpoint_id"])
    assert signing_secrets.signing_secrets(row, NOW + timedelta(hours=25)).active == [rolled.secret]


def test_switch_ends_an_endpoints_rotation_now(key):
    created, secret = endpoints.create(key, url=OTHER)
    with pytest.raises(InvalidRequest, match="no secret rotation"):
        endpoints.switch_secret(key, created["endpoint_id"], now=NOW)
    rolled = endpoints.roll_secret(key, created["endpoint_id"], overlap_hours=24, now=NOW)
    assert endpoints.switch_secret(key, created["endpoint_id"], now=NOW)["secret_rotation_ends_at"] is None
    row = WebhookEndpoint.get_by_id(created["endpoint_id"])
    assert decrypt_secret(row.webhook_secret_enc) == rolled.secret != secret and row.webhook_next_secret_enc is None


def test_recover_needs_a_window_that_ends_after_it_starts(key):
    with pytest.raises(InvalidRequest, match="before"):
        endpoints.recover(key, outbox.first_endpoint_id(key.id), since=NOW, until=NOW)
    assert endpoints.recover(key, outbox.first_endpoint_id(key.id), since=NOW - timedelta(days=1),
                             until=NOW) == 0
    assert WebhookDelivery.select().count() == 0


def test_deleting_an_endpoint_cancels_its_pending_deliveries(key):
    created, _ = endpoints.create(key, url=OTHER, events=["scan.completed"])
    scan = new_scan(*_customer_and_key(key))
    states.complete(scan.id, RESULT)
    rows = {d.endpoint_id: d for d in WebhookDelivery.select()}
    assert rows[created["endpoint_id"]].status == "pending"
    endpoints.delete(key, created["endpoint_id"])
    assert WebhookDelivery.get_by_id(rows[created["endpoint_id"]].id).status == "cancelled"
    assert WebhookDelivery.get_by_id(rows[outbox.first_endpoint_id(key.id)].id).status == "pending"


# --- Auto-disable: the rule judged by the operator's QA clock (keys check-endpoints) ----------


def _delivered(key, status: str, endpoint_id: str | None = None) -> WebhookDelivery:
    """A delivery to the key's endpoint (its first by default) already ``status``, created now."""
    endpoint = next(e for e in outbox.key_endpoints(ApiKey.get_by_id(key.id))
                    if e.id == (endpoint_id or outbox.first_endpoint_id(key.id)))
    body = outbox.sample_event_body()
    return outbox._create_delivery(key, body["event"], body, None, endpoint, status)


@pytest.mark.config(WEBHOOK_DISABLE_AFTER_HOURS=120)
def test_check_endpoints_judges_the_rule_as_if_hours_had_passed_and_dates_the_disabling_now(key):
    first = outbox.first_endpoint_id(key.id)
    watcher, _ = endpoints.create(key, url=OTHER, events=["endpoint.disabled"])
    with freeze_time(NOW):
        for _ in range(9):
            _delivered(key, "failed")
        assert endpoints.check_endpoints(key, hours_ahead=1000) == []  # 9 failures are not enough
        _delivered(key, "failed")
        assert endpoints.check_endpoints(key) == []
        assert endpoints.check_endpoints(key, hours_ahead=119) == []  # failing for 119 hours only
        assert endpoints.read(key, first)["enabled"] is True
        assert WebhookDelivery.select().where(WebhookDelivery.event == "endpoint.disabled").count() == 0
        assert endpoints.check_endpoints(key, hours_ahead=121) == [first]
        assert endpoints.check_endpoints(key, hours_ahead=121) == []  # once
    state = endpoints.read(key, first)
    assert (state["enabled"], state["disabled_at"]) == (False, "2026-11-22T12:00:00Z")  # now, not the QA clock's
    [notice] = WebhookDelivery.select().where(WebhookDelivery.event == "endpoint.disabled")
    assert (notice.endpoint_id, notice.status) == (watcher["endpoint_id"], "pending")
    assert '"failed_deliveries":10' in notice.body and f'"endpoint_id":"{first}"' in notice.body


@pytest.mark.config(WEBHOOK_DISABLE_AFTER_HOURS=120)
def test_a_success_after_the_failures_keeps_the_endpoint_enabled(key):
    with freeze_time(NOW) as frozen:
        for _ in range(10):
            _delivered(key, "failed")
        frozen.tick(timedelta(minutes=1))
        _delivered(key, "succeeded")
        assert endpoints.check_endpoints(key, hours_ahead=200) == []
    assert endpoints.read(key, outbox.first_endpoint_id(key.id))["enabled"] is True


@pytest.mark.parametrize("first", [True, False], ids=["the key's own endpoint", "a further endpoint"])
def test_of_two_rolls_or_switches_that_read_the_same_secrets_one_wins_and_the_other_is_a_conflict(key, first):
    """D25: two requests that read the endpoint's secrets before either wrote (two connections, as
    two API hosts): the second write finds them changed and answers 409 ``conflict``, changing
    nothing, so the secret the first answer shows is the one in force."""
    from app.plumbing.errors import SecretChanged
    endpoint_id = outbox.first_endpoint_id(key.id) if first else endpoints.create(key, url=OTHER)[0]["endpoint_id"]

    def read():
        return endpoints.find(key, endpoint_id).row

    def race(first_change, second_change):
        a, b = read(), read()  # both requests read the same secrets
        won = first_change(a)
        with pytest.raises(SecretChanged) as lost:
            second_change(b)
        assert (lost.value.code, "meanwhile" in lost.value.message) == ("conflict", True)
        return won

    with freeze_time(NOW):
        won = race(lambda row: signing_secrets.roll_secret_of(row, 0, NOW), lambda row: signing_secrets.roll_secret_of(row, 0, NOW))
        assert decrypt_secret(read().webhook_secret_enc) == won.secret and read().webhook_next_secret_enc is None
        won = race(lambda row: signing_secrets.roll_secret_of(row, 0, NOW), lambda row: signing_secrets.roll_secret_of(row, 24, NOW))
        assert decrypt_secret(read().webhook_secret_enc) == won.secret and read().webhook_next_secret_enc is None
        rolled = race(lambda row: signing_secrets.roll_secret_of(row, 24, NOW),
                      lambda row: signing_secrets.roll_secret_of(row, 24, NOW))
        assert decrypt_secret(read().webhook_next_secret_enc) == rolled.secret
        race(lambda row: signing_secrets.switch_secret_of(row, NOW), lambda row: signing_secrets.switch_secret_of(row, NOW))
        assert decrypt_secret(read().webhook_secret_enc) == rolled.secret and read().webhook_next_secret_enc is None
        # One after the other, rolls keep working as before.
        for _ in range(2):
            again = endpoints.roll_secret(key, endpoint_id, overlap_hours=0)
            assert decrypt_secret(read().webhook_secret_enc) == again.secret
