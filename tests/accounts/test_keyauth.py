"""keyauth: an API key found by its digest, live or test, refused when unknown, revoked or
malformed, its use noted at most once a minute (§5, D2, D10)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin, keyauth
from app.accounts.models import ApiKey
from app.billing import customers
from app.plumbing.crypto import digest
from app.plumbing.errors import NotAuthenticated

NOW = datetime(2026, 11, 22, 12, 0, 0)


@pytest.fixture
def issued(conn):
    cust = customers.create_customer("Keys", "business", 5)
    key, plaintext = admin.issue_key(cust.id, "k")
    return cust, key, plaintext


def test_a_live_key_authenticates_with_its_customer_loaded(issued):
    cust, key, plaintext = issued
    found = keyauth.authenticate(plaintext)
    assert found.id == key.id
    assert found.livemode is True
    assert (found.customer.id, found.customer.balance) == (cust.id, 5)


def test_a_test_key_authenticates_as_test_mode(issued):
    cust, _, _ = issued
    test_key, plaintext = admin.issue_key(cust.id, "sandbox", livemode=False)
    found = keyauth.authenticate(plaintext)
    assert (found.id, found.livemode) == (test_key.id, False)


@pytest.mark.parametrize("token", [
    "service_live_" + "x" * 43,        # well formed, unknown
    "sk_live_abc",                     # another prefix
    "Bearer service_live_abc",
    "service_live_" + "x" * 200,       # longer than any key
    "",
])
def test_what_is_not_a_known_key_is_an_invalid_token(issued, token):
    with pytest.raises(NotAuthenticated) as refused:
        keyauth.authenticate(token)
    assert refused.value.code == "invalid_token"


def test_a_key_differing_in_one_character_is_refused(issued):
    _, _, plaintext = issued
    with pytest.raises(NotAuthenticated):
        keyauth.authenticate(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B"))


def test_a_revoked_key_is_refused(issued):
    _, key, plaintext = issued
    admin.revoke_key(key.id)
    with pytest.raises(NotAuthenticated) as refused:
        keyauth.authenticate(plaintext)
    assert refused.value.code == "invalid_token"


def test_digest_of_refuses_what_cannot_be_a_key_and_digests_the_rest():
    assert keyauth.digest_of("service_test_abc") == digest("service_test_abc")
    with pytest.raises(NotAuthenticated):
        keyauth.digest_of("service_abc")


def test_a_missing_key_and_an_invalid_key_have_their_codes():
    assert keyauth.missing_key().code == "unauthorized"
    assert "Authorization: Bearer" in keyauth.missing_key().message
    assert keyauth.invalid_key().code == "invalid_token"


def test_last_used_is_written_at_most_once_a_minute(conn):
    with freeze_time(NOW) as frozen:
        cust = admin.create_customer("Touch", "business")
        key, plaintext = admin.issue_key(cust.id, "k")
        assert ApiKey.get_by_id(key.id).last_used_at is None
        keyauth.authenticate(plaintext)
        assert ApiKey.get_by_id(key.id).last_used_at == NOW
        frozen.tick(timedelta(seconds=60))
        keyauth.authenticate(plaintext)
        assert ApiKey.get_by_id(key.id).last_used_at == NOW  # exactly a minute: not yet
        frozen.tick(timedelta(seconds=1))
        keyauth.authenticate(plaintext)
        assert ApiKey.get_by_id(key.id).last_used_at == NOW + timedelta(seconds=61)
