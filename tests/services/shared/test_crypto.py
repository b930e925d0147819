"""crypto: webhook secrets encrypted at rest under SECRET_KEY (D11), API keys only as digests (§5.3)."""
import base64
import hashlib
import re

import pytest

from app import runtime
from app.services.shared import crypto


def test_a_secret_round_trips_and_is_not_stored_in_clear(app):
    token = crypto.encrypt_secret("whsec_abc")
    assert "whsec_abc" not in token
    assert crypto.decrypt_secret(token) == "whsec_abc"
    assert crypto.encrypt_secret("whsec_abc") != token  # a fresh IV every time


@pytest.mark.parametrize("empty", [None, ""])
def test_no_token_decrypts_to_none(app, empty):
    assert crypto.decrypt_secret(empty) is None


def test_a_secret_from_another_secret_key_is_unusable_not_an_error(app, monkeypatch):
    token = crypto.encrypt_secret("whsec_abc")
    monkeypatch.setitem(runtime.config, "SECRET_KEY", "another-secret-key")
    assert crypto.decrypt_secret(token) is None
    assert crypto.decrypt_secret("not a fernet token") is None


def test_the_digest_is_sha256_hex_of_the_key():
    assert crypto.digest("service_live_x") == hashlib.sha256(b"service_live_x").hexdigest()
    assert crypto.digest("a") != crypto.digest("b")


@pytest.mark.parametrize("livemode, prefix", [(True, "service_live_"), (False, "service_test_")])
def test_new_keys_have_their_modes_prefix_and_256_random_bits(livemode, prefix):
    keys = {crypto.new_api_key(livemode) for _ in range(20)}
    assert len(keys) == 20
    for key in keys:
        assert key.startswith(prefix)
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", key.removeprefix(prefix))
    assert crypto.new_api_key().startswith(crypto.KEY_PREFIX)


def test_a_webhook_secret_is_whsec_and_32_bytes_of_standard_base64():
    secret = crypto.new_webhook_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert crypto.new_webhook_secret() != secret


def test_same_compares_exactly():
    assert crypto.same("abc", "abc")
    assert not crypto.same("abc", "abd")
    assert not crypto.same("abc", "abcd")
