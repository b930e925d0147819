"""crypto: webhook secrets encrypted at rest under SECRET_KEY (D11), API keys only as digests (§5.3)."""
import base64
import hashlib
import re

import pytest

from app.plumbing import crypto, runtime


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


def test_a_sealed_number_opens_to_itself_and_reveals_neither_it_nor_its_order(app, monkeypatch):
    numbers = [0, 1, 2, 3, 1041, 1042, 2**63, 2**64 - 1]
    sealed = [crypto.seal_number(n) for n in numbers]
    assert all(re.fullmatch(r"[0-9a-f]{32}", text) for text in sealed) and len(set(sealed)) == len(numbers)
    assert [crypto.open_number(text) for text in sealed] == numbers
    run = [crypto.seal_number(n) for n in range(1000, 1020)]
    assert run != sorted(run) and run != sorted(run, reverse=True)  # not in the numbers' order
    assert not any(str(n) in text for n, text in zip(numbers[4:6], sealed[4:6], strict=True))
    altered = sealed[5][:-1] + ("0" if sealed[5][-1] != "0" else "1")
    for made_up in (altered, "0" * 32, sealed[5].upper(), sealed[5][:-2], f" {sealed[5][1:]}", "1042", ""):
        assert crypto.open_number(made_up) is None
    monkeypatch.setitem(runtime.config, "SECRET_KEY", "another-secret-key-of-enough-length-here")
    assert crypto.seal_number(1042) != sealed[5] and crypto.open_number(sealed[5]) is None
