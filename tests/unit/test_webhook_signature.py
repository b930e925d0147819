"""``app.webhook_signature`` (§6.3): the service signs, receivers verify."""
import pytest

from app.webhook_signature import sign, verify_signature
from simulator.receiver import verify_signature as simulator_verify

SECRET = "whsec_example"
BODY = b'{"event":"scan.completed","scan_id":"scn_1"}'


def test_sign_is_lowercase_hex_hmac_sha256_with_prefix():
    # RFC 4231-style known answer: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
    assert sign("key", b"The quick brown fox jumps over the lazy dog") == (
        "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8")


def test_verify_accepts_the_signature_and_agrees_with_the_simulator():
    header = sign(SECRET, BODY)
    assert verify_signature(SECRET, BODY, header) is True
    assert simulator_verify(SECRET, BODY, header) is True


@pytest.mark.parametrize("header", [
    None, "",
    sign("another secret", BODY),
    sign(SECRET, BODY + b" "),                        # the raw bytes, not the parsed JSON, are signed
    sign(SECRET, BODY).upper().replace("SHA256=", "sha256="),
    sign(SECRET, BODY).removeprefix("sha256="),
    "sha256=é",                                       # non-ASCII must not raise
])
def test_verify_refuses_anything_else(header):
    assert verify_signature(SECRET, BODY, header) is False
