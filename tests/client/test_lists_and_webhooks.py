"""The client's lists (auto-pagination over real pages), test-mode key handling and webhook verification."""
import base64
import hashlib
import hmac
import json
import time

import pytest
from freezegun import freeze_time
from scan_api_client import (
    Scan,
    ScanClient,
    ValidationError,
    WebhookVerificationError,
    verify_signature,
    verify_standard,
    verify_webhook,
)

from tests.api.helpers import balance


def test_iter_scans_walks_every_page_newest_first(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        ids = []
        for i in range(5):
            ids.append(api.create(f"user{i}@example.com").scan_id)
            frozen.tick(1)
    before = balance(account)
    found = list(api.iter_scans(page_size=2))
    assert [s.scan_id for s in found] == ids[::-1] and all(isinstance(s, Scan) for s in found)
    assert found[0].target == "user4@example.com" and found[0].created_at == "2026-11-21T12:00:04Z"
    assert balance(account) == before - 3  # three pages of 2, 2 and 1
    assert [s.scan_id for s in api.iter_scans(page_size=2, max_items=3)] == ids[::-1][:3]
    page = api.list_scans(limit=2, starting_after=ids[2])
    assert [s.scan_id for s in page] == [ids[1], ids[0]] and page.has_more is False
    assert list(api.iter_scans(kind="phone")) == []
    with pytest.raises(ValidationError) as caught:
        api.list_scans(status="done")
    assert caught.value.code == "invalid_request" and caught.value.request_id.startswith("req_")
    with pytest.raises(ValueError):
        api.list_scans(limit=101)


def test_cli_list_prints_every_scan_with_all(served_app, account):
    import io

    from scan_api_client.cli import main
    api = ScanClient(served_app.url, account.api_key)
    ids = {api.create(f"user{i}@example.com").scan_id for i in range(3)}
    out, err = io.StringIO(), io.StringIO()
    code = main(["list", "--all", "--format", "json"], stdout=out, stderr=err,
                env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key})
    assert code == 0, err.getvalue()
    assert {s["scan_id"] for s in json.loads(out.getvalue())} == ids
    out = io.StringIO()
    assert main(["list", "--limit", "1", "--format", "csv"], stdout=out, stderr=err,
                env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key}) == 0
    assert len(out.getvalue().strip().splitlines()) == 2  # header + one row


def test_livemode_follows_the_key_prefix():
    assert ScanClient("http://x", "service_live_abc").livemode is True
    assert ScanClient("http://x", "service_test_abc").livemode is False
    assert Scan.from_dict({"scan_id": "scn_1", "status": "queued", "livemode": False}).livemode is False


# --- webhooks ---------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
NEXT = "whsec_" + base64.b64encode(b"n" * 32).decode()
BODY = json.dumps({"event": "scan.failed", "scan_id": "scn_1", "target": "fail@example.com", "kind": "email",
                   "status": "failed", "failed_at": "2026-11-21T12:01:40Z", "livemode": False,
                   "failure": {"code": "engine_failed", "message": "x"}}, separators=(",", ":")).encode()


def standard_headers(secrets, body=BODY, msg_id="dlv_1", at=None):
    """Signed as the Standard Webhooks specification says, computed here independently of the client."""
    at = str(int(time.time()) if at is None else at)
    entries = []
    for secret in secrets:
        key = base64.b64decode(secret[len("whsec_"):])
        mac = hmac.new(key, f"{msg_id}.{at}.".encode() + body, hashlib.sha256).digest()
        entries.append("v1," + base64.b64encode(mac).decode())
    return {"webhook-id": msg_id, "webhook-timestamp": at, "webhook-signature": " ".join(entries)}


def test_standard_webhooks_verification_with_rotation_and_tolerance():
    event = verify_webhook(BODY, standard_headers([SECRET, NEXT]), NEXT)  # during rotation either secret works
    assert event.event == "scan.failed" and event.delivery_id == "dlv_1" and event.livemode is False
    assert event.scan.failure.code == "engine_failed" and event.scan.status == "failed"
    verify_webhook(BODY, standard_headers([SECRET]), [NEXT, SECRET])  # several secrets on the receiver's side
    with pytest.raises(WebhookVerificationError, match="matches"):
        verify_webhook(BODY, standard_headers([SECRET]), NEXT)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY + b" ", standard_headers([SECRET]), SECRET)
    now = 1795262400
    verify_standard(SECRET, BODY, standard_headers([SECRET], at=now - 299), now=now)
    for off in (-301, 301):
        with pytest.raises(WebhookVerificationError, match="away from now"):
            verify_standard(SECRET, BODY, standard_headers([SECRET], at=now + off), now=now)
    headers = standard_headers([SECRET])
    headers["webhook-id"] = "dlv_2"  # the id is signed: a replay under another id fails
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, headers, SECRET)


def test_x_service_signature_verification_and_header_case():
    header = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    event = verify_webhook(BODY, {"x-service-signature": header, "X-Service-Delivery": "dlv_9"}, [NEXT, SECRET])
    assert event.delivery_id == "dlv_9" and event.scan.scan_id == "scn_1"
    assert verify_signature(SECRET, BODY, header) and not verify_signature(NEXT, BODY, header)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, {"X-Service-Signature": header}, NEXT)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, {}, SECRET)
    with pytest.raises(ValueError):
        verify_webhook(BODY, {"X-Service-Signature": header}, [])
