"""The portal (D12): login, CSRF, cookie flags, tenant isolation, webhook settings, usage."""
import re

import pytest

from app.accounts.models import ApiKey
from app.extensions import db
from app.plumbing.crypto import decrypt_secret
from app.webhooks.models import WebhookDelivery
from tests.portal.helpers import PASSWORD, csrf, login


def test_pages_need_a_login(client, portal_account):
    for path in ("/app/api-keys", f"/app/api-keys/{portal_account.key.id}", "/app/usage"):
        response = client.get(path)
        assert response.status_code == 302 and "/app/login" in response.headers["Location"]


def test_login_sets_a_safe_session_cookie_and_lists_keys(client, portal_account):
    response = login(client)
    assert response.status_code == 302 and response.headers["Location"].endswith("/app/api-keys")
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    page = client.get("/app/api-keys").get_data(as_text=True)
    assert portal_account.key.prefix in page and portal_account.key.last4 in page
    assert portal_account.api_key not in page


@pytest.mark.config(APP_ENV="production")
def test_session_cookie_is_secure_outside_development(client, portal_account):
    assert "Secure" in login(client).headers["Set-Cookie"]


def test_wrong_password_and_unknown_user_look_the_same(client, portal_account):
    wrong = login(client, password="nope nope nope")
    unknown = login(client, email="who@acme.example")
    assert wrong.status_code == unknown.status_code == 401
    assert "E-mail or password is wrong." in wrong.get_data(as_text=True)
    assert client.get("/app/api-keys").status_code == 302


def test_login_is_throttled_after_five_failures(client, portal_account):
    for _ in range(5):
        assert login(client, password="wrong password!").status_code == 401
    blocked = login(client)  # even the right password, for the window
    assert blocked.status_code == 429 and "Too many failed attempts" in blocked.get_data(as_text=True)


def test_open_redirects_are_refused(client, portal_account):
    assert login(client, next_path="https://evil.example/").headers["Location"].endswith("/app/api-keys")
    client.post("/app/logout", data={"csrf_token": csrf(client, "/app/api-keys")})
    assert login(client, next_path="/app/usage").headers["Location"].endswith("/app/usage")


def test_forms_without_csrf_token_are_refused(client, portal_account):
    login(client)
    key_id = portal_account.key.id
    for path in (f"/app/api-keys/{key_id}/webhook", f"/app/api-keys/{key_id}/secret",
                 f"/app/api-keys/{key_id}/test-event", "/app/logout"):
        response = client.post(path, data={"url": "https://evil.example/hook"})
        assert response.status_code == 400 and response.get_json()["error"] == "csrf_failed"
    with db.connection_context():
        assert ApiKey.get_by_id(key_id).webhook_url is None
    assert client.post("/app/login", data={"email": "ops@acme.example", "password": PASSWORD}).status_code == 400


def test_another_customers_key_is_404_everywhere(client, portal_account, make_customer):
    other = make_customer()
    login(client)
    token = csrf(client, "/app/api-keys")
    assert client.get(f"/app/api-keys/{other.key.id}").status_code == 404
    assert client.get("/app/api-keys/key_doesnotexist").status_code == 404
    for suffix in ("webhook", "secret", "secret/reveal", "test-event", "deliveries/dlv_x/redeliver"):
        response = client.post(f"/app/api-keys/{other.key.id}/{suffix}",
                               data={"csrf_token": token, "url": "https://evil.example"})
        assert response.status_code == 404, suffix
    page = client.get("/app/api-keys").get_data(as_text=True)
    assert other.key.id not in page


def test_security_headers(client, portal_account):
    login(client)
    response = client.get("/app/api-keys")
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_the_key_page_sets_thin_bodies(client, portal_account):
    login(client)
    key_id = portal_account.key.id
    page = f"/app/api-keys/{key_id}"
    response = client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page),
                                                    "url": "https://hooks.acme.example/scans", "payload": "thin"})
    assert response.status_code == 302
    with db.connection_context():
        assert ApiKey.get_by_id(key_id).webhook_payload == "thin"
    assert '<option selected value="thin">' in client.get(page).get_data(as_text=True)
    refused = client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page),
                                                   "url": "https://hooks.acme.example/scans", "payload": "fat"})
    assert refused.status_code == 400
    with db.connection_context():
        assert ApiKey.get_by_id(key_id).webhook_payload == "thin"


def test_set_webhook_generate_and_reveal_secret(client, portal_account):
    login(client)
    key_id = portal_account.key.id
    page = f"/app/api-keys/{key_id}"
    response = client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page),
                                                    "url": "https://hooks.acme.example/scans",
                                                    "secret": "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw=="})
    assert response.status_code == 302
    with db.connection_context():
        key = ApiKey.get_by_id(key_id)
        assert key.webhook_url == "https://hooks.acme.example/scans"
        assert decrypt_secret(key.webhook_secret_enc) == "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw=="
        assert "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw==" not in key.webhook_secret_enc
    body = client.get(page).get_data(as_text=True)
    assert "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw==" not in body  # shown only on request
    revealed = client.post(f"{page}/secret/reveal", data={"csrf_token": csrf(client, page)})
    assert revealed.status_code == 200 and "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw==" in revealed.get_data(as_text=True)
    assert "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw==" not in client.get(page).get_data(as_text=True)  # once
    generated = client.post(f"{page}/secret", data={"csrf_token": csrf(client, page)})
    shown = re.search(r'id="revealed-secret">([^<]+)<', generated.get_data(as_text=True)).group(1)
    with db.connection_context():
        assert decrypt_secret(ApiKey.get_by_id(key_id).webhook_secret_enc) == shown != "whsec_YSB2ZXJ5IGxvbmcgc2VjcmV0IDEyMw=="


def test_bad_webhook_url_is_explained(client, portal_account):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    response = client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page), "url": "ftp://x"})
    assert response.status_code == 400 and "webhook URL must be" in response.get_data(as_text=True)
    assert 'value="ftp://x"' in response.get_data(as_text=True)  # the input stays in the form, to correct


def test_empty_log_says_what_to_do_and_test_event_is_logged(client, portal_account, simulator, jobs):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    assert "No deliveries yet: set a webhook URL" in client.get(page).get_data(as_text=True)
    client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page),
                                         "url": f"{simulator.url}/_sim/hooks/portal-test",
                                         "secret": "whsec_cG9ydGFsIHNlY3JldCAwMTIzNDU2Nzg5"})
    import requests
    requests.post(f"{simulator.url}/_sim/receivers/portal-test", json={"secret": "whsec_cG9ydGFsIHNlY3JldCAwMTIzNDU2Nzg5",
                                                                      "responses": [200]}, timeout=5)
    assert "No deliveries yet: send a test event" in client.get(page).get_data(as_text=True)
    client.post(f"{page}/test-event", data={"csrf_token": csrf(client, page)})
    jobs.run()
    html = client.get(page).get_data(as_text=True)
    assert "HTTP 200" in html and "test" in html
    with db.connection_context():
        delivery = WebhookDelivery.get()
    assert delivery.id in html and delivery.status == "succeeded"
    filtered = client.get(f"{page}?status=failed").get_data(as_text=True)
    assert delivery.id not in filtered and "No deliveries match this filter." in filtered


def test_usage_page(client, portal_account):
    client.get("/api/v1/scan/scn_x", headers=portal_account.headers)  # one charged call
    login(client)
    html = client.get("/app/usage").get_data(as_text=True)
    assert '<p class="big">99 <small>credits' in html and "Business" in html and "-1" in html and "In flight now" in html


def test_test_keys_and_their_deliveries_are_marked_and_usage_counts_live_only(client, portal_account):
    """D15: the portal marks test keys and test deliveries; a test key's scans count in no live figure."""
    from app.webhooks import key_settings, outbox
    from tests import factories

    with db.connection_context():
        test = factories.sandbox_key(portal_account, name="ci sandbox")
        key_settings.set_webhook(test.key.id, portal_account.id, "https://hooks.example.com/scan")
        delivery = outbox.send_test_event(test.key.id, portal_account.id)
    assert client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=test.headers).status_code == 202
    login(client)
    keys = client.get("/app/api-keys").get_data(as_text=True)
    test_row = keys[keys.index("ci sandbox"):].split("</tr>")[0]
    live_row = keys[keys.index(portal_account.key.id):].split("</tr>")[0]
    assert "test mode" in test_row and "test mode" not in live_row
    page = client.get(f"/app/api-keys/{test.key.id}").get_data(as_text=True)
    assert page.count("badge test-mode") == 2  # the key, and its one delivery
    row = page[page.index(f'data-delivery="{delivery.id}"'):].split("</tr>")[0]
    assert "test mode" in row
    assert "test mode" not in client.get(f"/app/api-keys/{portal_account.key.id}").get_data(as_text=True)
    usage = client.get("/app/usage").get_data(as_text=True)
    assert "<td>In flight now</td><td>0</td>" in usage and "<td>Created in the last hour</td><td>0</td>" in usage
    assert "0 scans created and 0 credits spent" in usage  # the charts count live scans only
    assert '<p class="big">100 <small>credits' in usage  # the balance: the test key's call cost nothing
    # The scans list shows both modes, the test scan marked; its page and its batch's too.
    live_scan = client.post("/api/v1/scan", json={"target": "live@example.com"},
                            headers=portal_account.headers).json["scan_id"]
    test_bulk = client.post("/api/v1/scan/bulk", json={"targets": [{"target": "bulk@example.com"}]},
                            headers=test.headers).json["bulk_id"]
    scans = client.get("/app/scans").get_data(as_text=True)
    assert "test mode" in scans[scans.index("jane@example.com"):].split("</tr>")[0]
    assert "test mode" not in scans[scans.index("live@example.com"):].split("</tr>")[0]
    assert "test mode" not in client.get(f"/app/scans/{live_scan}").get_data(as_text=True)
    assert "badge test-mode" in client.get(f"/app/batches/{test_bulk}").get_data(as_text=True)
    assert "1 scans created and 1 credits spent" in client.get("/app/usage").get_data(as_text=True)
