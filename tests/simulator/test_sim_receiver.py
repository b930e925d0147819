"""The simulated webhook receivers (E4)."""
import base64
import hashlib
import hmac
import json
import re
import time

import pytest

from app.plumbing.signatures import sign_standard
from simulator.receiver import standard_signed_by, verify_signature

SECRET = "whsec_test"




def sign(secret, raw):
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def configure(client, name="acme", **body):
    return client.post(f"/_sim/receivers/{name}", json={"secret": SECRET, **body})


def deliver(client, name="acme", payload=None, signature=None, **headers):
    raw = json.dumps(payload or {"event": "scan.completed"}).encode()
    if signature is None:
        signature = sign(SECRET, raw)
    return client.post(f"/_sim/hooks/{name}", data=raw, content_type="application/json",
                       headers={"X-Service-Signature": signature, **headers})


def deliveries(client, name="acme"):
    response = client.get(f"/_sim/receivers/{name}/deliveries")
    assert response.status_code == 200
    return response.get_json()["deliveries"]


# --- verify_signature ----------------------------------------------------------------------

def test_verify_signature_accepts_the_right_hmac():
    raw = b'{"a":1}'
    assert verify_signature(SECRET, raw, sign(SECRET, raw))


@pytest.mark.parametrize("header", [
    None, "", sign("other", b'{"a":1}'), sign(SECRET, b'{"a":2}'),
    sign(SECRET, b'{"a":1}').upper().replace("SHA256=", "sha256="),  # hex must be lowercase
    sign(SECRET, b'{"a":1}').removeprefix("sha256="),                # prefix required
    "sha256=é",                                                      # non-ASCII must not raise
])
def test_verify_signature_refuses_anything_else(header):
    assert verify_signature(SECRET, b'{"a":1}', header) is False


# --- configuration -------------------------------------------------------------------------

def test_configure_creates_then_resets(client):
    created = configure(client, responses=[500, 200])
    assert created.status_code == 201
    assert created.get_json() == {"name": "acme", "hook_url": "http://localhost/_sim/hooks/acme",
                                  "responses": [500, 200], "delay_ms": 0, "redirect_to": "acme-redirected"}
    assert deliver(client).status_code == 500
    assert len(deliveries(client)) == 1
    reset = configure(client, responses=[500, 200])
    assert reset.status_code == 200
    assert deliveries(client) == []
    assert deliver(client).status_code == 500  # the sequence starts again


@pytest.mark.parametrize("body", [
    {"secret": 1}, {"responses": []}, {"responses": [200, "ok"]}, {"responses": [99]}, {"responses": [700]},
    {"delay_ms": -1}, {"delay_ms": 1.5}, {"redirect_to": "a/b"},
])
def test_bad_configuration_answers_400_json(client, body):
    response = client.post("/_sim/receivers/acme", json={"secret": SECRET, **body})
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "invalid_request"


def test_unknown_receiver_answers_404_json(client):
    for response in (deliver(client, name="ghost"), client.get("/_sim/receivers/ghost/deliveries")):
        assert response.status_code == 404
        assert response.get_json()["error"]["code"] == "unknown_receiver"


# --- answers -------------------------------------------------------------------------------

def test_responses_are_answered_in_order_the_last_repeated(client):
    configure(client, responses=[500, 503, 200])
    assert [deliver(client).status_code for _ in range(5)] == [500, 503, 200, 200, 200]
    assert [d["response_status"] for d in deliveries(client)] == [500, 503, 200, 200, 200]


def test_default_response_is_200(client):
    client.post("/_sim/receivers/plain", json={"secret": SECRET})
    assert deliver(client, name="plain").status_code == 200


def test_204_has_an_empty_body(client):
    configure(client, responses=[204])
    response = deliver(client)
    assert response.status_code == 204 and response.data == b""


@pytest.mark.parametrize("status", [301, 302, 307])
def test_redirect_answers_point_to_another_hook(client, status):
    configure(client, responses=[status])
    response = deliver(client)
    assert response.status_code == status
    assert response.headers["Location"] == "http://localhost/_sim/hooks/acme-redirected"


def test_redirect_target_can_be_chosen_and_records_what_follows(client):
    configure(client, responses=[302], redirect_to="trap")
    configure(client, name="trap")
    location = deliver(client).headers["Location"]
    assert location == "http://localhost/_sim/hooks/trap"
    deliver(client, name="trap")
    assert len(deliveries(client, "trap")) == 1


def test_delay_is_applied_before_answering(client):
    configure(client, delay_ms=200)
    started = time.monotonic()
    assert deliver(client).status_code == 200
    assert time.monotonic() - started >= 0.2


# --- records -------------------------------------------------------------------------------

def test_deliveries_are_recorded_oldest_first_with_headers_body_and_time(client):
    configure(client)
    before_ms = int(time.time() * 1000)
    for n in range(3):
        deliver(client, payload={"n": n}, **{"X-Service-Event": f"e{n}"})
    recorded = deliveries(client)
    assert [json.loads(d["body"]) for d in recorded] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [d["headers"]["X-Service-Event"] for d in recorded] == ["e0", "e1", "e2"]
    assert all(d["headers"]["Content-Type"] == "application/json" for d in recorded)
    stamps = [d["received_at_ms"] for d in recorded]
    assert stamps == sorted(stamps) and stamps[0] >= before_ms
    for d in recorded:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", d["received_at"])
        assert d["received_at"].endswith(f"{d['received_at_ms'] % 1000:03d}Z")
    assert set(recorded[0]) == {"received_at", "received_at_ms", "headers", "body", "signature_valid",
                                "webhook_signature_valid",
                                "response_status"}


def test_body_is_recorded_raw(client):
    configure(client)
    raw = b'{"b": 2,   "a": "\xc3\xa9"}'
    client.post("/_sim/hooks/acme", data=raw, headers={"X-Service-Signature": sign(SECRET, raw)})
    recorded = deliveries(client)[0]
    assert recorded["body"] == raw.decode("utf-8")
    assert recorded["signature_valid"] is True


def test_signature_validity_is_recorded(client):
    configure(client)
    deliver(client)
    deliver(client, signature=sign("wrong-secret", b"{}"))
    client.post("/_sim/hooks/acme", json={"unsigned": True})
    assert [d["signature_valid"] for d in deliveries(client)] == [True, False, False]


def test_receivers_are_independent(client):
    configure(client, name="one", responses=[500])
    configure(client, name="two", responses=[200])
    assert deliver(client, name="one").status_code == 500
    assert deliver(client, name="two").status_code == 200
    assert len(deliveries(client, "one")) == len(deliveries(client, "two")) == 1


# --- several secrets and the Standard Webhooks check (D16) ----------------------------------

OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
NEW = "whsec_" + base64.b64encode(b"n" * 32).decode()


def deliver_standard(client, secrets, timestamp=None, msg_id="dlv_1", name="acme", xsig_secret=OLD):
    raw = b'{"event":"scan.completed"}'
    timestamp = str(int(time.time()) if timestamp is None else timestamp)
    return client.post(f"/_sim/hooks/{name}", data=raw, content_type="application/json", headers={
        "X-Service-Signature": sign(xsig_secret, raw), "webhook-id": msg_id, "webhook-timestamp": timestamp,
        "webhook-signature": sign_standard(secrets, msg_id, timestamp, raw)})


def test_standard_signature_verifies_with_any_of_the_receivers_secrets(client):
    assert client.post("/_sim/receivers/acme", json={"secrets": [OLD, NEW]}).status_code == 201
    deliver_standard(client, [OLD, NEW])
    deliver_standard(client, [NEW], xsig_secret=NEW)
    deliver_standard(client, [OLD])
    recorded = deliveries(client)
    assert [d["webhook_signature_valid"] for d in recorded] == [True, True, True]
    assert [d["signature_valid"] for d in recorded] == [True, True, True]


def test_standard_signature_refuses_other_secrets_stale_times_and_missing_headers(client):
    client.post("/_sim/receivers/acme", json={"secrets": [NEW]})
    deliver_standard(client, [OLD])                                   # not signed by the receiver's secret
    deliver_standard(client, [NEW], timestamp=int(time.time()) - 301)  # older than 5 minutes
    deliver(client)                                                   # no Standard Webhooks headers
    assert [d["webhook_signature_valid"] for d in deliveries(client)] == [False, False, False]
    assert [d["signature_valid"] for d in deliveries(client)] == [False, False, False]


def test_standard_signed_by_tells_which_secrets_signed():
    raw, headers = b"{}", {"Webhook-Id": "dlv_1", "Webhook-Timestamp": "1700000000"}
    headers["Webhook-Signature"] = sign_standard([OLD, NEW], "dlv_1", "1700000000", raw)
    assert standard_signed_by([OLD, NEW, SECRET], raw, headers) == [True, True, False]
    assert standard_signed_by([OLD], b"{ }", headers) == [False]


@pytest.mark.parametrize("body", [{"secret": OLD, "secrets": [NEW]}, {"secrets": []}, {"secrets": [OLD, 2]},
                                  {"secrets": OLD}])
def test_bad_secrets_answer_400(client, body):
    response = client.post("/_sim/receivers/acme", json=body)
    assert response.status_code == 400
