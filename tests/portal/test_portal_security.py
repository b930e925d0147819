"""Portal hardening: revealed secrets stay out of the cookie, sessions are revocable
server-side (logout, password reset, disabled users, the operator's ``users`` commands),
login throttling per account and per (address, account) that holds under parallel
requests, X-Forwarded-For only through trusted proxies, unsafe ``next`` values, and
malformed webhook URLs answered as form errors."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from datetime import timedelta

import pytest
import requests
from freezegun import freeze_time

from app.accounts import admin, login_throttle, portal_users
from app.accounts.models import ApiKey, PortalSession
from app.extensions import db
from app.plumbing.crypto import encrypt_secret
from app.plumbing.models import utcnow
from tests.portal.helpers import CSRF_RE, PASSWORD, csrf, login

LIMIT = login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT


@pytest.fixture
def portal_account(portal_account):
    """The portal's account with a second owner, dev@acme.example (sessions per user and per browser)."""
    with db.connection_context():
        admin.create_user(portal_account.id, "dev@acme.example", PASSWORD)
    return portal_account


def decoded_session(app, client) -> dict:
    cookie = client.get_cookie("session")
    if cookie is None:
        return {}
    return app.session_interface.get_signing_serializer(app).loads(cookie.value)


def cli(app, *args, input=None):
    return app.test_cli_runner().invoke(args=list(args), input=input)


# --- 6. a revealed secret lives in its one response only -------------------------------------

def test_a_revealed_or_generated_secret_is_never_in_the_cookie(app, client, portal_account):
    secret = "whsec_reveal_me_0123456789abcdef"
    with db.connection_context():
        ApiKey.update(webhook_secret_enc=encrypt_secret(secret)).where(
            ApiKey.id == portal_account.key.id).execute()
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"

    revealed = client.post(f"{page}/secret/reveal", data={"csrf_token": csrf(client, page)})
    assert revealed.status_code == 200 and revealed.headers["Cache-Control"] == "no-store"
    assert re.search(r'id="revealed-secret">([^<]+)<', revealed.get_data(as_text=True)).group(1) == secret
    assert secret not in json.dumps(decoded_session(app, client))
    assert all(secret not in v for v in revealed.headers.getlist("Set-Cookie"))
    assert secret not in client.get(page).get_data(as_text=True)  # a later GET does not show it

    generated = client.post(f"{page}/secret", data={"csrf_token": csrf(client, page)})
    assert generated.status_code == 200 and generated.headers["Cache-Control"] == "no-store"
    new = re.search(r'id="revealed-secret">([^<]+)<', generated.get_data(as_text=True)).group(1)
    assert new != secret and "A new signing secret is in force" in generated.get_data(as_text=True)
    assert new not in json.dumps(decoded_session(app, client))
    later = client.get(page).get_data(as_text=True)
    assert new not in later and 'id="revealed-secret"' not in later


def test_reveal_without_a_secret_says_so(client, portal_account):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    response = client.post(f"{page}/secret/reveal", data={"csrf_token": csrf(client, page)}, follow_redirects=True)
    assert "no signing secret to show" in response.get_data(as_text=True)
    assert 'id="revealed-secret"' not in response.get_data(as_text=True)


# --- 7. sessions end server-side ---------------------------------------------------------------

def test_a_cookie_saved_before_logout_is_refused_after_it(app, client, portal_account):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    token = csrf(client, page)
    saved = client.get_cookie("session").value
    replay = app.test_client()
    replay.set_cookie("session", saved)
    assert replay.get("/app/api-keys").status_code == 200  # the copy works while the session lives

    assert client.post("/app/logout", data={"csrf_token": token}).status_code == 302
    with db.connection_context():
        assert PortalSession.select().count() == 0

    replay = app.test_client()
    replay.set_cookie("session", saved)
    for path in ("/app/api-keys", page, "/app/usage"):
        response = replay.get(path)
        assert response.status_code == 302 and "/app/login" in response.headers["Location"], path
    replay.set_cookie("session", saved)
    response = replay.post(f"{page}/webhook", data={"csrf_token": token, "url": "https://evil.example/hook"})
    assert response.status_code == 302 and "/app/login" in response.headers["Location"]
    replay.set_cookie("session", saved)
    response = replay.post(f"{page}/secret", data={"csrf_token": token})
    assert response.status_code == 302 and "/app/login" in response.headers["Location"]
    with db.connection_context():
        key = ApiKey.get_by_id(portal_account.key.id)
        assert key.webhook_url is None and key.webhook_secret_enc is None


def test_the_database_holds_only_the_digest_of_the_session_token(app, client, portal_account):
    login(client)
    token = decoded_session(app, client)["sid"]
    assert set(decoded_session(app, client)) <= {"sid", "_permanent", "csrf_token", "_flashes"}
    with db.connection_context():
        row = PortalSession.get()
    assert row.id == hashlib.sha256(token.encode()).hexdigest() and token not in row.id
    assert timedelta(hours=7, minutes=59) < row.expires_at - row.created_at <= timedelta(hours=8)


def test_a_session_ends_eight_hours_after_login_on_the_server(app, client, portal_account):
    app.permanent_session_lifetime = timedelta(days=30)  # the cookie alone would still be good
    with freeze_time(utcnow()) as frozen:
        login(client)
        frozen.tick(timedelta(hours=7, minutes=59))
        assert client.get("/app/api-keys").status_code == 200
        frozen.tick(timedelta(minutes=2))
        response = client.get("/app/api-keys")
        assert response.status_code == 302 and "/app/login" in response.headers["Location"]


def test_a_new_login_replaces_the_session_and_sessions_are_per_browser(app, client, portal_account):
    login(client)
    first = decoded_session(app, client)["sid"]
    other = app.test_client()
    login(other)
    login(client)  # logging in again replaces this browser's session
    assert decoded_session(app, client)["sid"] != first
    with db.connection_context():
        assert portal_users.session_user(first) is None and PortalSession.select().count() == 2
    other_token = csrf(other, "/app/api-keys")
    other.post("/app/logout", data={"csrf_token": other_token})
    assert client.get("/app/api-keys").status_code == 200  # one browser's logout leaves the other's session


def test_password_reset_ends_every_session_of_the_user(app, client, portal_account):
    login(client)
    colleague = app.test_client()
    login(colleague, email="dev@acme.example")
    result = cli(app, "users", "reset-password", "OPS@acme.example", "--password-stdin", "--json",
                 input="a brand new password\n")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] is True and out["email"] == "ops@acme.example" and out["sessions_ended"] == 1
    assert client.get("/app/api-keys").status_code == 302
    assert colleague.get("/app/api-keys").status_code == 200  # another user's session is untouched
    assert login(app.test_client()).status_code == 401  # the old password is gone
    assert login(app.test_client(), password="a brand new password").status_code == 302


def test_password_reset_from_the_prompt_and_its_refusals(app, portal_account):
    result = cli(app, "users", "reset-password", "ops@acme.example", input="another password!\nanother password!\n")
    assert result.exit_code == 0 and "password of ops@acme.example reset; 0 session(s) ended" in result.output
    assert "another password!" not in result.output
    short = cli(app, "users", "reset-password", "ops@acme.example", "--password-stdin", input="short\n")
    assert short.exit_code == 1 and short.stderr.strip() == "error: password must have at least 10 characters"
    unknown = cli(app, "users", "reset-password", "who@acme.example", "--password-stdin", "--json",
                  input="long enough password\n")
    assert unknown.exit_code == 1 and json.loads(unknown.stdout) == {"ok": False, "error": "no user who@acme.example"}
    assert login(app.test_client(), password="another password!").status_code == 302


def test_a_disabled_user_cannot_log_in_and_loses_their_sessions(app, client, portal_account):
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    token = csrf(client, page)
    result = cli(app, "users", "disable", "ops@acme.example", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["disabled"] is True and out["sessions_ended"] == 1
    response = client.post(f"{page}/webhook", data={"csrf_token": token, "url": "https://hooks.example/x"})
    assert response.status_code == 302 and "/app/login" in response.headers["Location"]
    refused = login(app.test_client())  # the right password, refused like a wrong one
    assert refused.status_code == 401 and "E-mail or password is wrong." in refused.get_data(as_text=True)
    with db.connection_context():
        assert PortalSession.select().count() == 0
        assert ApiKey.get_by_id(portal_account.key.id).webhook_url is None
    enabled = cli(app, "users", "enable", "ops@acme.example")
    assert enabled.exit_code == 0 and enabled.output.strip() == "ops@acme.example enabled"
    assert login(app.test_client()).status_code == 302


def test_users_list_as_json_and_as_a_table(app, client, portal_account, make_customer):
    other = make_customer()
    with db.connection_context():
        admin.create_user(other.id, "someone@other.example", PASSWORD)
    login(client)
    cli(app, "users", "disable", "dev@acme.example")
    result = cli(app, "users", "list", portal_account.id, "--json")
    assert result.exit_code == 0, result.output
    users = {u["email"]: u for u in json.loads(result.output)["users"]}
    assert set(users) == {"ops@acme.example", "dev@acme.example"}
    assert users["ops@acme.example"]["sessions"] == 1 and users["ops@acme.example"]["last_login_at"]
    assert users["dev@acme.example"]["disabled"] is True and users["dev@acme.example"]["last_login_at"] is None
    assert users["dev@acme.example"]["role"] == "owner" and users["dev@acme.example"]["two_factor"] is False
    assert all("password" not in key for u in users.values() for key in u)
    table = cli(app, "users", "list").output.splitlines()
    assert table[0].split() == ["user", "customer", "role", "state", "2fa", "sessions", "last", "login", "email"]
    assert set(table[1].replace(" ", "")) == {"-"}  # the rule under the headers, as every CLI table
    assert len(table) == 5 and any("disabled" in line and "dev@acme.example" in line for line in table)
    missing = cli(app, "users", "list", "cus_nope")
    assert missing.exit_code == 1 and missing.output.strip() == "error: no customer cus_nope"
    assert cli(app, "users", "disable", "nobody@acme.example").output.strip() == "error: no user nobody@acme.example"


# --- 8. login throttling ---------------------------------------------------------------------------

def test_parallel_wrong_passwords_check_at_most_the_limit(app, served_app, portal_account):
    attempts = 40
    sessions, tokens = [], []
    for _ in range(attempts):  # each its own browser: a cookie and a CSRF token
        browser = requests.Session()
        page = browser.get(f"{served_app.url}/app/login", timeout=10).text
        sessions.append(browser)
        tokens.append(CSRF_RE.search(page).group(1))
    barrier = threading.Barrier(attempts)
    codes = [None] * attempts

    def attempt(i):
        barrier.wait()
        codes[i] = sessions[i].post(f"{served_app.url}/app/login", allow_redirects=False, timeout=60,
                                    data={"email": "ops@acme.example", "password": f"wrong password {i}",
                                          "csrf_token": tokens[i]}).status_code

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes.count(401) == LIMIT  # checked, and wrong
    assert codes.count(429) == attempts - LIMIT  # refused without a check
    # The account is locked for this address, even with the right password...
    assert login_via(served_app, "ops@acme.example", PASSWORD).status_code == 429
    # ...but a colleague behind the same address logs in.
    assert login_via(served_app, "dev@acme.example", PASSWORD).status_code == 302


def login_via(server, email, password):
    browser = requests.Session()
    token = CSRF_RE.search(browser.get(f"{server.url}/app/login", timeout=10).text).group(1)
    return browser.post(f"{server.url}/app/login", allow_redirects=False, timeout=30,
                        data={"email": email, "password": password, "csrf_token": token})


def from_address(client, address, **kwargs):
    client.environ_base["REMOTE_ADDR"] = address
    return login(client, **kwargs)


def test_a_locked_account_does_not_lock_other_users_or_other_addresses(app, portal_account):
    client = app.test_client()
    for _ in range(LIMIT):
        assert from_address(client, "198.51.100.7", password="wrong password").status_code == 401
    blocked = from_address(client, "198.51.100.7")
    assert blocked.status_code == 429 and "Too many failed attempts" in blocked.get_data(as_text=True)
    assert 0 < int(blocked.headers["Retry-After"]) <= login_throttle.WINDOW_SECONDS
    assert from_address(app.test_client(), "198.51.100.7", email="dev@acme.example").status_code == 302
    assert from_address(app.test_client(), "198.51.100.8").status_code == 302  # the owner, elsewhere


def test_the_account_limit_holds_across_many_addresses(app, portal_account):
    client = app.test_client()
    per_address = LIMIT - 1
    failures = 0
    for n in range(100):
        for _ in range(per_address):
            code = from_address(client, f"203.0.113.{n}", password="wrong password").status_code
            if code == 429:
                break
            assert code == 401
            failures += 1
        else:
            continue
        break
    assert failures == login_throttle.MAX_PER_ACCOUNT
    assert from_address(client, "192.0.2.200").status_code == 429  # the right password, from a new address
    assert from_address(app.test_client(), "192.0.2.200", email="dev@acme.example").status_code == 302


def test_a_successful_login_gives_this_client_its_attempts_back(app, portal_account):
    client = app.test_client()
    for _ in range(LIMIT - 1):
        assert from_address(client, "198.51.100.9", password="wrong password").status_code == 401
    assert from_address(client, "198.51.100.9").status_code == 302
    for _ in range(LIMIT):
        assert from_address(client, "198.51.100.9", password="wrong password").status_code == 401
    assert from_address(client, "198.51.100.9").status_code == 429


def test_the_throttle_window_ends(app, portal_account):
    client = app.test_client()
    for _ in range(LIMIT):
        from_address(client, "198.51.100.10", password="wrong password")
    assert from_address(client, "198.51.100.10").status_code == 429
    conn = login_throttle.runtime.redis()
    for key in login_throttle.keys_for("ops@acme.example", "198.51.100.10"):
        assert 0 < conn.ttl(key) <= login_throttle.WINDOW_SECONDS
        conn.delete(key)  # what Redis does when the window's TTL runs out
    assert from_address(client, "198.51.100.10").status_code == 302


def test_a_password_reset_lifts_the_lockout(app, portal_account):
    client = app.test_client()
    for _ in range(LIMIT):
        from_address(client, "198.51.100.11", password="wrong password")
    assert from_address(client, "198.51.100.11").status_code == 429
    cli(app, "users", "reset-password", "ops@acme.example", "--password-stdin", input="fresh password 123\n")
    assert from_address(client, "198.51.100.11", password="fresh password 123").status_code == 302


def test_x_forwarded_for_is_ignored_without_trusted_proxies(app, portal_account):
    client = app.test_client()
    for n in range(LIMIT):
        response = client.post("/app/login", headers={"X-Forwarded-For": f"192.0.2.{n}"},
                               data={"email": "ops@acme.example", "password": "wrong password",
                                     "csrf_token": csrf(client, "/app/login")})
        assert response.status_code == 401
    response = client.post("/app/login", headers={"X-Forwarded-For": "192.0.2.99"},
                           data={"email": "ops@acme.example", "password": PASSWORD,
                                 "csrf_token": csrf(client, "/app/login")})
    assert response.status_code == 429  # a made-up header does not buy a fresh address


@pytest.mark.config(TRUSTED_PROXIES=1)
def test_x_forwarded_for_is_honoured_through_one_trusted_proxy(app, portal_account):
    client = app.test_client()  # the proxy itself is 127.0.0.1, the client address comes from its header

    def attempt(client_address, password):
        return client.post("/app/login", headers={"X-Forwarded-For": f"10.9.9.9, {client_address}"},
                           data={"email": "ops@acme.example", "password": password,
                                 "csrf_token": csrf(client, "/app/login")})

    for _ in range(LIMIT):
        assert attempt("192.0.2.1", "wrong password").status_code == 401
    assert attempt("192.0.2.1", PASSWORD).status_code == 429
    assert attempt("192.0.2.2", PASSWORD).status_code == 302  # another client behind the same proxy
    # Only the last hop is trusted: the spoofable first entry (10.9.9.9) is never the address.
    assert login_throttle.runtime.redis().exists(login_throttle.keys_for("ops@acme.example", "192.0.2.1")[1])
    assert not login_throttle.runtime.redis().exists(login_throttle.keys_for("ops@acme.example", "10.9.9.9")[1])


@pytest.mark.parametrize("raw, message", [("-1", "from 0 to 10"), ("two", "must be a whole number"), ("11", "from 0 to 10")])
def test_trusted_proxies_setting_is_checked(raw, message):
    from app.plumbing.config import ConfigError, load_settings
    with pytest.raises(ConfigError, match=message):
        load_settings({"TRUSTED_PROXIES": raw})
    assert load_settings({})["TRUSTED_PROXIES"] == 0 and load_settings({"TRUSTED_PROXIES": "2"})[
        "TRUSTED_PROXIES"] == 2


# --- 10. unsafe next and malformed webhook URLs -----------------------------------------------------

UNSAFE_NEXT = ["/app/usage\r\nSet-Cookie: stolen=1", "/app/usage\nX: y", "/app/\rusage", "https://evil.example/app/",
               "//evil.example/app/", "/\\evil.example", "/app/ usage", "http:/app/usage", "/login", "javascript:x",
               "/app/\x00", "/app/" + "a" * 3000]


@pytest.mark.parametrize("next_path", UNSAFE_NEXT)
def test_an_unsafe_next_is_ignored_never_500(app, portal_account, next_path):
    client = app.test_client()
    form = client.get("/app/login", query_string={"next": next_path})
    assert form.status_code == 200 and 'name="next" type="hidden" value=""' in form.get_data(as_text=True)
    response = login(client, next_path=next_path)
    assert response.status_code == 302 and response.headers["Location"] == "/app/api-keys"


def test_a_safe_next_is_followed(app, portal_account):
    client = app.test_client()
    assert 'value="/app/usage?x=1"' in client.get("/app/login?next=/app/usage%3Fx%3D1").get_data(as_text=True)
    assert login(client, next_path="/app/usage?x=1").headers["Location"] == "/app/usage?x=1"


@pytest.mark.parametrize("url", ["https://127.0.0.1:99999/", "https://93.184.216.34:abc/", "https://[::1/hook"])
def test_a_malformed_webhook_url_is_a_form_error(client, portal_account, url):
    """Needs the webhook URL parser to refuse these with its usual validation error."""
    login(client)
    page = f"/app/api-keys/{portal_account.key.id}"
    response = client.post(f"{page}/webhook", data={"csrf_token": csrf(client, page), "url": url,
                                                    "secret": "whsec_YSB0eXBlZCBzZWNyZXQgMDEyMzQ1Njc4OQ=="})
    html = response.get_data(as_text=True)
    assert response.status_code == 400 and "webhook URL" in html and 'class="flash error"' in html
    assert "whsec_YSB0eXBlZCBzZWNyZXQgMDEyMzQ1Njc4OQ==" not in html  # a typed secret is not echoed back
    with db.connection_context():
        key = ApiKey.get_by_id(portal_account.key.id)
        assert key.webhook_url is None and key.webhook_secret_enc is None


@pytest.mark.parametrize("filters", [{"q": "\x00"}, {"bulk": "\x00"}, {"q": "a\x00b", "bulk": "x"}])
def test_a_nul_byte_in_a_portal_scan_filter_is_a_clear_400(client, portal_account, filters):
    login(client)
    answer = client.post("/app/scans", data={"csrf_token": csrf(client, "/app/scans"), **filters})
    assert answer.status_code == 400, answer.get_data(as_text=True)[:300]
    body = answer.get_json()
    assert body["error"] == "invalid_request"
    assert "NUL" in body["message"]


# Moved from the SSRF tests (now tests/plumbing/test_outbound_urls.py, which call the service only).
@pytest.mark.parametrize("url", ["https://127.0.0.1:99999/", "https://93.184.216.34:abc/", "https://[::1/"])
def test_the_portal_answers_a_malformed_url_with_its_form_message(app, client, make_customer, url):
    account = make_customer(webhook_url="https://hooks.example.com/before")
    with db.connection_context():
        admin.create_user(account.id, "ops@acme.example", PASSWORD)
    login(client)
    page = f"/app/api-keys/{account.key.id}"
    saved = client.post(f"{page}/webhook", data={"url": url, "csrf_token": csrf(client, page)})
    assert saved.status_code == 400  # the key's page with the message, not a 500
    html = saved.get_data(as_text=True)
    assert "webhook URL" in html and ("port must be a number" in html or "malformed" in html)
    with db.connection_context():
        assert ApiKey.get_by_id(account.key.id).webhook_url == "https://hooks.example.com/before"
