"""signing_secrets: the headers of an attempt, signed with both schemes, and a secret's rolling rotation (D16)."""

from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts.models import ApiKey
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import AccountError
from app.plumbing.signatures import SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER, verify_signature, verify_standard
from app.webhooks import outbox, signing_secrets
from tests.domain_fixtures import new_customer
from tests.webhooks.conftest import NOW, PORTAL_SECRET, ROTATION_SECRET, SECRET, URL


def test_delivery_headers_carry_both_signatures_that_receivers_verify(conn):
    with freeze_time(NOW):
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        delivery = outbox.send_test_event(key.id, cust.id)
        body = delivery.body.encode()
        headers = signing_secrets.delivery_headers(delivery, body, NOW)
        assert verify_signature(SECRET, body, headers[SIGNATURE_HEADER])
        assert verify_standard(SECRET, body, headers)
        assert not verify_standard("whsec_" + "QUJD" * 8, body, headers)
    assert headers["X-Service-Timestamp"] == str(int(NOW.replace(tzinfo=UTC).timestamp()) * 1000)
    assert (headers["X-Service-Event"], headers["X-Service-Delivery"], headers["webhook-id"]) == (
        "scan.completed", delivery.id, delivery.id)
    assert headers["webhook-timestamp"] == str(int(headers["X-Service-Timestamp"]) // 1000)


def test_a_key_without_a_secret_sends_no_signature(conn):
    cust, key = new_customer(webhook_url=URL)
    delivery = outbox.send_test_event(key.id, cust.id)
    headers = signing_secrets.delivery_headers(delivery, delivery.body.encode(), NOW)
    assert SIGNATURE_HEADER not in headers and STANDARD_SIGNATURE_HEADER not in headers


def test_a_rolling_rotation_signs_with_both_until_the_switch(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(webhook_url=URL, webhook_secret=SECRET)
        rolled = signing_secrets.roll_secret(key.id, cust.id, overlap_hours=2)
        assert rolled.overlapping and rolled.switch_at == NOW + timedelta(hours=2)
        with pytest.raises(AccountError, match="already under way"):
            signing_secrets.roll_secret(key.id, cust.id)
        delivery = outbox.send_test_event(key.id, cust.id)
        body = delivery.body.encode()
        headers = signing_secrets.delivery_headers(delivery, body, NOW)
        assert verify_signature(SECRET, body, headers[SIGNATURE_HEADER])  # the current one, still
        assert verify_standard(SECRET, body, headers) and verify_standard(rolled.secret, body, headers)
        assert signing_secrets.secret_state(ApiKey.get_by_id(key.id))["rotating"] is True
        frozen.tick(timedelta(hours=2))
        later = datetime(2026, 11, 22, 14, 0, 0)
        headers = signing_secrets.delivery_headers(delivery, body, later)  # the overlap is over: switched lazily
        assert verify_signature(rolled.secret, body, headers[SIGNATURE_HEADER])
        assert not verify_standard(SECRET, body, headers)
        assert signing_secrets.secret_state(ApiKey.get_by_id(key.id)) == {"has_secret": True, "rotating": False,
                                                                   "switch_at": None}


def test_switching_ends_a_rotation_at_once_and_needs_one(hooked):
    cust, key = hooked
    with pytest.raises(AccountError, match="no secret rotation"):
        signing_secrets.switch_secret(key.id, cust.id)
    rolled = signing_secrets.roll_secret(key.id, None, overlap_hours=24)  # None: the operator, any key
    switched = signing_secrets.switch_secret(key.id, cust.id)
    assert decrypt_secret(switched.webhook_secret_enc) == rolled.secret
    assert switched.webhook_next_secret_enc is None


def test_an_overlap_of_zero_replaces_the_secret_at_once(hooked):
    cust, key = hooked
    rolled = signing_secrets.roll_secret(key.id, cust.id, overlap_hours=0)
    assert rolled.overlapping is False
    assert decrypt_secret(ApiKey.get_by_id(key.id).webhook_secret_enc) == rolled.secret


def test_rolling_another_customers_key_is_refused(hooked):
    _, key = hooked
    with pytest.raises(LookupError):
        signing_secrets.roll_secret(key.id, new_customer()[0].id)
    with pytest.raises(LookupError):
        signing_secrets.roll_secret("key\x00", None)


@pytest.mark.parametrize("hours", [-1, 169, 1.5, True, "24"])
def test_the_overlap_is_0_to_168_whole_hours(conn, hours):
    cust, key = new_customer(webhook_secret=ROTATION_SECRET)
    with pytest.raises(AccountError, match="0 to 168"):
        signing_secrets.roll_secret(key.id, cust.id, overlap_hours=hours)
    assert ApiKey.get_by_id(key.id).webhook_next_secret_enc is None


def test_only_the_owner_rolls_or_switches(conn):
    cust, key = new_customer(webhook_secret=ROTATION_SECRET)
    other, _ = new_customer()
    for action in (lambda: signing_secrets.roll_secret(key.id, other.id),
                   lambda: signing_secrets.switch_secret(key.id, other.id)):
        with pytest.raises(LookupError):
            action()
    assert ApiKey.get_by_id(key.id).webhook_next_secret_enc is None


def test_generate_secret_rotates_and_returns_the_new_secret_once(conn):
    cust, key = new_customer(webhook_url="https://hooks.example.com/x", webhook_secret=PORTAL_SECRET)
    plaintext = signing_secrets.generate_secret(key.id, cust.id)
    assert plaintext.startswith("whsec_") and len(plaintext) >= 40
    stored = ApiKey.get_by_id(key.id).webhook_secret_enc
    assert plaintext not in stored and decrypt_secret(stored) == plaintext


