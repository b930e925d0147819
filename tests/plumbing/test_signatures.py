"""``app.plumbing.signatures`` (§6.3): the service signs, receivers verify."""
import pytest

from app.plumbing.signatures import sign, verify_signature
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


# --- Standard Webhooks (D16) ----------------------------------------------------------------

from datetime import UTC, datetime  # noqa: E402

from standardwebhooks import Webhook  # noqa: E402

from app.plumbing.signatures import decode_secret, secret_key, sign_standard, verify_standard  # noqa: E402

WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER = "whsec_b3RoZXIgc2VjcmV0IDAxMjM0NTY3ODlhYmNkZWY="
NOW = 1_800_000_000


def test_sign_standard_matches_the_standardwebhooks_package():
    moment = datetime.fromtimestamp(NOW, tz=UTC)
    assert sign_standard(WHSEC, "dlv_1", NOW, BODY) == Webhook(WHSEC).sign("dlv_1", moment, BODY.decode())
    both = sign_standard([WHSEC, OTHER], "dlv_1", NOW, BODY).split(" ")
    assert both == [sign_standard(WHSEC, "dlv_1", NOW, BODY), sign_standard(OTHER, "dlv_1", NOW, BODY)]


def test_verify_standard_takes_any_active_secret_and_refuses_the_rest():
    headers = {"webhook-id": "dlv_1", "webhook-timestamp": str(NOW),
               "webhook-signature": sign_standard([WHSEC, OTHER], "dlv_1", NOW, BODY)}
    assert verify_standard(WHSEC, BODY, headers, now=NOW) and verify_standard([OTHER], BODY, headers, now=NOW)
    assert verify_standard(["whsec_bm90IHRoaXMgb25lIDAxMjM0NTY3", WHSEC], BODY, headers, now=NOW)
    assert not verify_standard("whsec_bm90IHRoaXMgb25lIDAxMjM0NTY3", BODY, headers, now=NOW)
    assert not verify_standard(WHSEC, BODY, {**headers, "webhook-timestamp": str(NOW + 1)}, now=NOW)
    assert not verify_standard(WHSEC, BODY, {**headers, "webhook-timestamp": "1e9"}, now=NOW)
    assert not verify_standard(WHSEC, BODY, {k: v for k, v in headers.items() if k != "webhook-id"}, now=NOW)
    assert not verify_standard(WHSEC, BODY, {**headers, "webhook-signature": "v2,é"}, now=NOW)
    assert verify_standard(WHSEC, BODY, {k.title(): v for k, v in headers.items()}, now=NOW)  # any case


@pytest.mark.parametrize("offset, ok", [(0, True), (300, True), (-300, True), (301, False), (-301, False)])
def test_verify_standard_refuses_a_timestamp_more_than_5_minutes_off(offset, ok):
    headers = {"webhook-id": "dlv_1", "webhook-timestamp": str(NOW),
               "webhook-signature": sign_standard(WHSEC, "dlv_1", NOW, BODY)}
    assert verify_standard(WHSEC, BODY, headers, now=NOW + offset) is ok


def test_the_key_is_the_decoded_base64_or_the_utf8_of_an_older_secret():
    assert secret_key(WHSEC) == Webhook(WHSEC)._whsecret
    assert decode_secret(WHSEC.rstrip("=")) == decode_secret(WHSEC)
    assert secret_key("whsec_example") == Webhook("whsec_example")._whsecret  # base64, if short
    for legacy in ("plain-old-secret-0123", "whsec_a-b_c", "whsec_"):
        assert decode_secret(legacy) is None and secret_key(legacy) == legacy.encode()


def test_verify_signature_accepts_several_secrets():
    header = sign(SECRET, BODY)
    assert verify_signature(["another secret", SECRET], BODY, header)
    assert not verify_signature(["another secret"], BODY, header) and not verify_signature([], BODY, header)
