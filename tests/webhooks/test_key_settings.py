"""key_settings: a key's webhook URL, payload and secret as the portal, the API and the CLI set them."""

import base64
import json

import pytest
from standardwebhooks import Webhook

from app.accounts import admin
from app.accounts.models import ApiKey
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import AccountError
from app.tracking import states
from app.webhooks import key_settings, signing_secrets
from app.webhooks.models import WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan
from tests.webhooks.conftest import PORTAL_SECRET, RESULT, ROTATION_SECRET, SECRET


def test_a_thin_key_sends_no_personal_data(hooked):
    cust, key = hooked
    key_settings.set_payload(key.id, cust.id, "thin")
    done, failed = new_scan(cust, key), new_scan(cust, key, "fail.me@example.com")
    states.complete(done.id, RESULT)
    states.fail(failed.id, "engine_failed", "the engine could not finish jane@example.com")
    bodies = {json.loads(d.body)["event"]: json.loads(d.body) for d in WebhookDelivery.select()}
    assert list(bodies["scan.completed"]) == ["event", "scan_id", "livemode", "status", "purpose", "case_ref",
                                              "completed_at"]
    assert list(bodies["scan.failed"]) == ["event", "scan_id", "livemode", "status", "purpose", "case_ref",
                                           "failed_at"]
    assert "jane" not in json.dumps(bodies) and "fail.me" not in json.dumps(bodies)
    with pytest.raises(AccountError):
        key_settings.set_payload(key.id, cust.id, "medium")
    key_settings.set_payload(key.id, cust.id, "full")  # later events carry everything again
    again = new_scan(cust, key)
    states.complete(again.id, RESULT)
    assert json.loads(WebhookDelivery.get(WebhookDelivery.scan_id == again.id).body)["result"] == RESULT


@pytest.mark.parametrize("secret", ["whsec_", "sk_abc", "whsec_" + "A" * 20, "whsec_" + "QUJD" * 5 + "!",
                                    "whsec_QUJDRA==", "whsec_" + "QUFB" * 44])
def test_a_hand_set_secret_must_be_whsec_and_16_to_128_bytes_of_base64(secret):
    with pytest.raises(AccountError):
        key_settings.check_secret(secret)


def test_a_valid_secret_is_accepted_as_given():
    assert key_settings.check_secret(SECRET) == SECRET


def test_generated_and_hand_set_secrets_follow_the_standard_form(conn):
    cust, key = new_customer()
    generated = signing_secrets.generate_secret(key.id, cust.id)
    assert Webhook(generated)._whsecret == base64.b64decode(generated[6:])
    assert len(Webhook(generated)._whsecret) == 32
    unpadded = ROTATION_SECRET.rstrip("=")
    key_settings.set_webhook(key.id, cust.id, None, unpadded)  # padding is optional
    with pytest.raises(AccountError, match="whsec_ followed by standard base64"):
        key_settings.issue_key(cust.id, "k", None, "not-a-whsec-secret-0123456789")


def test_a_key_with_a_refused_webhook_is_not_created(conn):
    cust = admin.create_customer("Hooks", "business")
    with pytest.raises(AccountError):
        key_settings.issue_key(cust.id, "k", "ftp://hooks.example.com/x")
    assert ApiKey.select().count() == 0


# Moved from tests/workers/test_webhooks_portal.py (service calls, no worker).

def test_set_webhook_stores_the_url_and_the_secret_encrypted(conn):
    cust, key = new_customer()
    key = key_settings.set_webhook(key.id, cust.id, " https://hooks.example.com/x ", PORTAL_SECRET)
    assert key.webhook_url == "https://hooks.example.com/x"
    assert PORTAL_SECRET not in key.webhook_secret_enc and decrypt_secret(key.webhook_secret_enc) == PORTAL_SECRET

    key = key_settings.set_webhook(key.id, cust.id, "https://hooks.example.com/y")
    assert decrypt_secret(key.webhook_secret_enc) == PORTAL_SECRET  # no secret given: kept
    key = key_settings.set_webhook(key.id, cust.id, "")
    assert key.webhook_url is None


@pytest.mark.parametrize("url, secret, message", [
    ("ftp://hooks.example.com/x", None, "absolute"),
    ("https://hooks.example.com/x", "short", "whsec_ followed by standard base64"),
    ("https://hooks.example.com/x", f" {PORTAL_SECRET}", "whsec_ followed by standard base64"),
    ("https://hooks.example.com/x", "0123456789abcdef0123456789abcdef", "whsec_ followed"),  # no prefix
    ("https://hooks.example.com/x", "whsec_c2VjcmV0X3dpdGhfdXJsc2FmZV9hbHBoYWJldA-_", "standard base64"),
    ("https://hooks.example.com/x", "whsec_c2hvcnQ=", "decode to 16 to 128 bytes, not 5"),
])
def test_set_webhook_refuses_bad_input(conn, url, secret, message):
    cust, key = new_customer()
    with pytest.raises(AccountError, match=message):
        key_settings.set_webhook(key.id, cust.id, url, secret)


