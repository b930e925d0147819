"""Security: secrets never at rest in clear nor in logs or error bodies, tenant isolation on
every route, timing-safe comparisons, SSRF refusals through the portal in production, CSRF and
cookie flags, and revocation that takes effect at once.

Referenced rather than repeated: the SSRF guard's address ranges, DNS rebinding and pinning
(tests.plumbing.test_outbound_urls.py); the portal's login, throttling, open redirects, CSRF on every form and
404 for another customer's key (tests/portal/test_portal.py); keys stored only as digests
(tests/api/test_auth_and_errors.py); idempotency keys scoped per customer
(tests/billing/routes/test_idempotency.py); secrets redacted by the log filter (tests/api/test_operations.py).
"""
from __future__ import annotations

import hmac
import http.client
import io
import json
import logging
import re
import sys
import zlib

import pytest
import requests
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import ApiKey
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.crypto import decrypt_secret
from app.plumbing.logging_setup import ContextFilter, JsonFormatter, RedactFilter
from app.plumbing.models import utcnow
from app.plumbing.signatures import sign, verify_signature
from app.webhooks import key_settings, signing_secrets
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from tests.plumbing.test_outbound_urls import FakeDns

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
PASSWORD = "correct horse battery staple"
CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')
HTTPS = "https://localhost"


# --- helpers -----------------------------------------------------------------------------------

class Portal:
    """A logged-in portal session on the test client (https in production, as browsers would)."""

    def __init__(self, client, email, *, https=False):
        self.client, self.email = client, email
        self.base = HTTPS if https else "http://localhost"
        self.referer = {"Referer": f"{self.base}/app/api-keys"}
        response = self.post("/app/login", {"email": email, "password": PASSWORD}, page="/app/login")
        assert response.status_code == 302, response.get_data(as_text=True)[:300]

    def token(self, page="/app/api-keys") -> str:
        html = self.client.get(page, base_url=self.base).get_data(as_text=True)
        return CSRF_RE.search(html).group(1)

    def get(self, path):
        return self.client.get(path, base_url=self.base)

    def post(self, path, data=None, page="/app/api-keys", headers=None):
        data = dict(data or {}, csrf_token=self.token(page))
        return self.client.post(path, data=data, base_url=self.base, headers=headers or self.referer)


def portal_user(acct, email):
    with db.connection_context():
        admin.create_user(acct.id, email, PASSWORD)
    return email


def receiver(simulator, name, responses=(200,), secret="whsec_cmVjZWl2ZXIgMDEyMzQ1Njc4OWFiY2RlZg=="):
    requests.post(f"{simulator.url}/_sim/receivers/{name}", timeout=5,
                  json={"secret": secret, "responses": list(responses)}).raise_for_status()
    return f"{simulator.url}/_sim/hooks/{name}"


def dump_database() -> str:
    """Every column of every row of every table, as text (tables found in the database itself)."""
    parts = []
    with db.connection_context():
        for table in db.get_tables():
            cursor = db.execute_sql(f'SELECT * FROM "{table}"')
            names = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                parts.append(f"{table}: " + json.dumps(dict(zip(names, row)), default=str, ensure_ascii=False))
    return "\n".join(parts)


def dump_redis() -> str:
    """Every key and value in Redis, RQ's compressed job payloads unpacked."""
    conn, parts = runtime.redis(), []
    for key in conn.scan_iter(count=1000):
        kind = conn.type(key).decode()
        if kind == "string":
            values = [conn.get(key)]
        elif kind == "hash":
            values = [v for pair in conn.hgetall(key).items() for v in pair]
        elif kind == "list":
            values = conn.lrange(key, 0, -1)
        elif kind == "set":
            values = list(conn.smembers(key))
        elif kind == "zset":
            values = [m for m, _ in conn.zrange(key, 0, -1, withscores=True)]
        else:
            values = []
        for value in values:
            try:
                value = zlib.decompress(value)
            except (zlib.error, TypeError):
                pass
            parts.append(f"{key!r} {value!r}")
    return "\n".join(parts)


def secrets_in(text: str, secrets: list[str]) -> list[str]:
    """The secrets (or their random parts) found in ``text``."""
    found = []
    for secret in secrets:
        random_part = secret
        for prefix in ("service_live_", "service_test_", "whsec_"):
            if secret.startswith(prefix):
                random_part = secret[len(prefix):]  # (the random part may itself hold a "_")
        if secret in text or random_part in text:
            found.append(secret[:16] + "...")
    return found


# --- secrets at rest, in logs and in error bodies ------------------------------------------------

@pytest.fixture
def everywhere(app, client, make_customer, simulator, jobs, caplog):
    """A whole flow that touches every secret: keys issued by the service, the CLI and the portal's
    owner; webhook secrets set by the service, the CLI, the portal form and the portal's generator;
    a signed delivery that fails then succeeds; errors of every kind. Returns what it learnt."""
    caplog.set_level(logging.DEBUG)
    pipeline = io.StringIO()  # the production log pipeline (filters + JSON) over the same flow
    handler = logging.StreamHandler(pipeline)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter())
    handler.setFormatter(JsonFormatter())
    logging.getLogger().addHandler(handler)
    try:
        yield _flow(app, client, make_customer, simulator, jobs, pipeline)
    finally:
        logging.getLogger().removeHandler(handler)


def _flow(app, client, make_customer, simulator, jobs, pipeline):
    secrets, bodies = [], []
    hook = receiver(simulator, "secrets", responses=[500, 200], secret="whsec_c2VydmljZSBzZXQgc2VjcmV0IDAxMjM0NTY3ODk=")
    owner = make_customer(tier="business", credits=500, webhook_url=hook,
                          webhook_secret="whsec_c2VydmljZSBzZXQgc2VjcmV0IDAxMjM0NTY3ODk=")
    other = make_customer(tier="pro", credits=0)
    secrets += [owner.api_key, other.api_key, "whsec_c2VydmljZSBzZXQgc2VjcmV0IDAxMjM0NTY3ODk="]

    cli = app.test_cli_runner().invoke(args=["keys", "issue", owner.id, "--webhook-url", hook,
                                             "--webhook-secret", "whsec_Y2xpIHNldCBzZWNyZXQgMDEyMzQ1Njc4OWFi", "--json"])
    assert cli.exit_code == 0, cli.output
    cli_key = json.loads(cli.output)["api_key"]
    secrets += [cli_key, "whsec_Y2xpIHNldCBzZWNyZXQgMDEyMzQ1Njc4OWFi"]
    with db.connection_context():
        key2, plain2 = admin.issue_key(owner.id, "second")
        key_settings.set_webhook(key2.id, owner.id, hook, "whsec_c2V0IHdlYmhvb2sgc2VjcmV0IGFiY2RlZmdo")
        generated = signing_secrets.generate_secret(key2.id, owner.id)
    secrets += [plain2, "whsec_c2V0IHdlYmhvb2sgc2VjcmV0IGFiY2RlZmdo", generated]

    # The portal: set a secret through the form, generate one, reveal it.
    email = portal_user(owner, "owner@secrets.example")
    portal = Portal(client, email)
    page = f"/app/api-keys/{owner.key.id}"
    portal.post(f"{page}/webhook", {"url": hook, "secret": "whsec_cG9ydGFsIGZvcm0gc2VjcmV0IDAxMjM0NTY3ODk="}, page=page)
    generated = portal.post(f"{page}/secret", page=page)  # shown in that response only
    shown = re.search(r'id="revealed-secret">([^<]+)<', generated.get_data(as_text=True)).group(1)
    assert shown in portal.post(f"{page}/secret/reveal", page=page).get_data(as_text=True)  # on request
    secrets += ["whsec_cG9ydGFsIGZvcm0gc2VjcmV0IDAxMjM0NTY3ODk=", shown]
    # The portal's signed receiver expects the current secret: use it from here on.
    receiver(simulator, "secrets", responses=[500, 200], secret=shown)

    # Calls answered with every kind of error, and successes, with every key.
    with freeze_time(utcnow()) as frozen:
        for key in (owner.api_key, cli_key, plain2):
            headers = {"Authorization": f"Bearer {key}"}
            for method, path, body in (("POST", SCAN, {"target": "jane@example.com"}),
                                       ("POST", SCAN, {"target": "ab"}), ("POST", SCAN, {"kind": 7}),
                                       ("GET", f"{SCAN}/scn_unknown", None), ("POST", BULK, {"targets": []}),
                                       ("POST", BULK, {"targets": [{"target": "x"}, 7]}),
                                       ("POST", SCAN, {"target": "jane@example.com", "kind": "fax"})):
                bodies.append(client.open(path, method=method, json=body, headers=headers).get_data(as_text=True))
        bodies.append(client.post(SCAN, json={"target": "jane@example.com"},
                                  headers={"Authorization": f"Bearer {other.api_key}"}).get_data(as_text=True))
        bodies.append(client.post(SCAN, json={"target": "x@example.com"}, headers={
            "Authorization": f"Bearer {owner.api_key}", "Idempotency-Key": "k" * 300}).get_data(as_text=True))
        bodies.append(client.get(f"{SCAN}/x", headers={"Authorization": f"Bearer {owner.api_key}x"}).get_data(
            as_text=True))
        bodies.append(client.get(f"{SCAN}/x", headers={"Authorization": f"Basic {owner.api_key}"}).get_data(
            as_text=True))
        with db.connection_context():
            admin.revoke_key(key2.id)
        bodies.append(client.get(f"{SCAN}/x", headers={"Authorization": f"Bearer {plain2}"}).get_data(as_text=True))
        assert jobs.run(frozen, until=lambda: _deliveries_final())
    with db.connection_context():
        attempts = DeliveryAttempt.select().count()
        deliveries = list(WebhookDelivery.select())
    assert deliveries and attempts > len(deliveries)  # each failed once, then succeeded: signed twice
    assert all(d.status == "succeeded" for d in deliveries)
    return {"secrets": secrets, "bodies": bodies, "pipeline": pipeline, "deliveries": len(deliveries),
            "attempts": attempts, "portal": portal}


def _deliveries_final(expected: int = 1) -> bool:
    with db.connection_context():
        return (WebhookDelivery.select().count() >= expected
                and not WebhookDelivery.select().where(WebhookDelivery.status == "pending").exists())


def test_no_plaintext_key_or_secret_anywhere_in_the_database_or_redis(figures, everywhere):
    secrets = everywhere["secrets"]
    stored = dump_database()
    assert "api_key" in stored and "webhook_secret_enc" in stored  # the dump does see those tables
    assert secrets_in(stored, secrets) == []
    with db.connection_context():  # ...while the encrypted secrets still decrypt to the right ones
        decrypted = {decrypt_secret(k.webhook_secret_enc) for k in ApiKey.select() if k.webhook_secret_enc}
    assert decrypted <= set(secrets) and len(decrypted) >= 2
    queued = dump_redis()
    assert secrets_in(queued, secrets) == []
    figures.update(requests=len(everywhere["bodies"]) + 12, concurrency=1, faults="none",
                   inputs={"secrets": len(secrets), "tables_dumped": len(stored.splitlines()),
                           "redis_values": len(queued.splitlines())}, failures=0)


def test_no_plaintext_key_or_secret_in_logs_or_error_bodies(figures, everywhere, caplog):
    secrets = everywhere["secrets"]
    # The service never logs them: not in any captured record, formatted or raw.
    records = caplog.get_records("setup")  # the flow ran in the fixture
    raw = "\n".join(f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in records)
    assert len(records) > 20
    assert secrets_in(raw, secrets) == []
    # Nor does the production pipeline (context filter, redaction, JSON), over the same flow.
    lines = everywhere["pipeline"].getvalue().splitlines()
    assert lines and all(json.loads(line) for line in lines)
    assert secrets_in("\n".join(lines), secrets) == []
    # Nor any error body (a body may echo what the caller sent as a target, never a key it holds).
    errors = [b for b in everywhere["bodies"] if '"ok":false' in b.replace(" ", "")]
    assert len(errors) >= 10
    assert secrets_in("\n".join(errors), secrets) == []
    figures.update(requests=len(everywhere["bodies"]), concurrency=1, faults="none",
                   inputs={"secrets": len(secrets), "log_records": len(records),
                           "json_log_lines": len(lines), "error_bodies": len(errors)}, failures=0)


def test_a_secret_that_slips_into_a_log_line_is_redacted_by_the_pipeline(app, account, figures):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("tests.security.slip")
    log.addHandler(handler)
    try:
        log.warning("oops %s and whsec_abcdefghijklmnop0123", account.api_key)
        try:
            raise RuntimeError(f"failed with {account.api_key}")
        except RuntimeError:
            log.exception("while calling")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert account.api_key not in text and "whsec_abcdefghijklmnop0123" not in text
    assert text.count("[redacted]") >= 3
    figures.update(requests=0, concurrency=1, faults="none", inputs=3, failures=0)


# --- tenant isolation ----------------------------------------------------------------------------

@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_tenant_isolation_on_every_route(app, client, make_customer, simulator, jobs, figures):
    hook = receiver(simulator, "isolation", responses=[500])
    alice = make_customer(tier="business", credits=200, webhook_url=hook, webhook_secret="whsec_YWxpY2UgMDEyMzQ1Njc4OWFi")
    bob = make_customer(tier="business", credits=200, webhook_url=hook, webhook_secret="whsec_Ym9iIDAxMjM0NTY3ODlhYmNk")
    portal_user(alice, "alice@isolation.example")
    with freeze_time(utcnow()) as frozen:
        bob_scan = client.post(SCAN, json={"target": "bob@example.com"}, headers=bob.headers).json["scan_id"]
        bob_bulk = client.post(BULK, json={"targets": [{"target": "b@example.com"}]}, headers=bob.headers).json
        alice_scan = client.post(SCAN, json={"target": "alice@example.com"}, headers=alice.headers).json["scan_id"]
        assert jobs.run(frozen, until=lambda: _deliveries_final(3))
    with db.connection_context():
        bob_delivery = WebhookDelivery.get(WebhookDelivery.customer == bob.id)
        alice_delivery = WebhookDelivery.get(WebhookDelivery.customer == alice.id)
    assert bob_delivery.status == "failed"  # redeliverable, by Bob only
    checked = 0

    # The API: another customer's scan and batch are 403 (§5.6), charged (D3).
    for path, code in ((f"{SCAN}/{bob_scan}", "forbidden"), (f"{BULK}/{bob_bulk['bulk_id']}", "forbidden"),
                       (f"{SCAN}/{bob_bulk['scans'][0]['scan_id']}", "forbidden")):
        response = client.get(path, headers=alice.headers)
        assert response.status_code == 403 and response.json["error"] == code, path
        assert "bob@example.com" not in response.get_data(as_text=True)
        checked += 1
    assert client.get(f"{SCAN}/{bob_bulk['bulk_id']}", headers=alice.headers).status_code == 404  # not a scan id
    assert client.get(f"{BULK}/{bob_scan}", headers=alice.headers).status_code == 404
    assert client.get(f"{SCAN}/{alice_scan}", headers=alice.headers).status_code == 200
    checked += 3

    # The portal, logged in as Alice: Bob's key page and every POST on it answer 404.
    portal = Portal(client, "alice@isolation.example")
    bob_key = f"/app/api-keys/{bob.key.id}"
    assert portal.get(bob_key).status_code == 404
    for suffix, data in (("webhook", {"url": "https://evil.example/x", "secret": "s" * 20}), ("secret", {}),
                         ("secret/reveal", {}), ("test-event", {}), (f"deliveries/{bob_delivery.id}/redeliver", {}),
                         (f"deliveries/{alice_delivery.id}/redeliver", {})):
        assert portal.post(f"{bob_key}/{suffix}", data).status_code == 404, suffix
        checked += 1
    # Bob's delivery under Alice's own key: 404 too, and nothing moves.
    own = f"/app/api-keys/{alice.key.id}"
    assert portal.post(f"{own}/deliveries/{bob_delivery.id}/redeliver", page=own).status_code == 404
    checked += 2
    with db.connection_context():
        after = WebhookDelivery.get_by_id(bob_delivery.id)
        assert (after.status, after.attempts, after.job_id) == ("failed", bob_delivery.attempts, bob_delivery.job_id)
        bob_key_row = ApiKey.get_by_id(bob.key.id)
        assert bob_key_row.webhook_url == hook and decrypt_secret(bob_key_row.webhook_secret_enc) == \
            "whsec_Ym9iIDAxMjM0NTY3ODlhYmNk"
        assert WebhookDelivery.select().where(WebhookDelivery.customer == bob.id).count() == 2  # no test event
    # Alice's pages never show Bob's key, deliveries, scans or ledger.
    pages = "".join(portal.get(p).get_data(as_text=True) for p in
                    ("/app/api-keys", own, f"{own}?status=failed", "/app/usage"))
    for foreign in (bob.key.id, bob.key.prefix, bob_delivery.id, bob_scan, bob.id):
        assert foreign not in pages
    # /metrics is operators' aggregate: no customer, key or scan ids, no targets.
    metrics = client.get("/metrics").get_data(as_text=True)
    for private in (alice.id, bob.id, bob_scan, "bob@example.com", alice.key.id):
        assert private not in metrics
    figures.update(requests=checked + 12, concurrency=1, faults="none",
                   inputs={"api_routes": 6, "portal_routes": 8}, failures=0)


# --- timing-safe comparisons ----------------------------------------------------------------------

@pytest.fixture
def compare_digest_calls(monkeypatch):
    """Every ``hmac.compare_digest`` call, as the calling module's name."""
    calls, real = [], hmac.compare_digest

    def spy(a, b):
        calls.append(sys._getframe(1).f_globals.get("__name__"))
        return real(a, b)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    return calls


@pytest.mark.config(METRICS_TOKEN="metrics-token-0123456789")
def test_secrets_are_compared_in_constant_time(client, account, make_customer, compare_digest_calls, figures):
    def calls_during(action):
        del compare_digest_calls[:]
        action()
        return set(compare_digest_calls)

    # API keys: looked up by digest, then the digest compared in constant time.
    assert "app.plumbing.crypto" in calls_during(
        lambda: client.get(f"{SCAN}/scn_x", headers=account.headers))
    # Webhook signatures (the module customers copy into their receivers).
    body = b'{"event": "scan.completed"}'
    assert calls_during(lambda: verify_signature("s" * 20, body, sign("s" * 20, body))) == {"app.plumbing.signatures"}
    assert calls_during(lambda: verify_signature("s" * 20, body, "sha256=00")) == {"app.plumbing.signatures"}
    # The metrics token.
    assert "app.plumbing.metrics" in calls_during(lambda: client.get(
        "/metrics", headers={"Authorization": "Bearer metrics-token-0123456789"}))
    assert "app.plumbing.metrics" in calls_during(lambda: client.get("/metrics", headers={"Authorization": "Bearer nope"}))
    # The portal: password hashes, CSRF tokens and the session cookie's signature.
    portal_user(account, "ops@timing.example")
    seen = calls_during(lambda: Portal(client, "ops@timing.example"))
    assert {"werkzeug.security", "flask_wtf.csrf"} <= seen
    assert "itsdangerous.signer" in calls_during(lambda: client.get("/app/api-keys"))
    figures.update(requests=6, concurrency=1, faults="none",
                   inputs=["api key", "webhook signature", "metrics token", "password", "csrf token",
                           "session cookie"], failures=0)


# --- SSRF through the portal, in production ---------------------------------------------------------

@pytest.fixture
def dns(monkeypatch):
    import socket
    fake, real = FakeDns(), socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: fake.getaddrinfo(real, *a, **kw))
    return fake


UNSAFE_URLS = [
    "http://hooks.example/plain-http", "https://127.0.0.1/hook", "https://localhost/hook", "https://[::1]/hook",
    "https://169.254.169.254/latest/meta-data/", "https://[::ffff:127.0.0.1]/hook", "https://2130706433/hook",
    "https://0x7f.1/hook", "https://10.0.0.7/hook", "https://192.168.1.1:8443/hook", "https://[fd00::1]/hook",
    "https://user:pass@hooks.example/hook", "https://private.customer.example/hook",
    "https://rebinding.customer.example/hook", "ftp://hooks.example/x", "javascript:alert(1)",
    "https://hooks.example/a b", "https://hooks.example/\x00",
]


@pytest.mark.config(APP_ENV="production")
def test_the_portal_refuses_ssrf_webhook_urls_in_production(client, account, dns, figures):
    dns.answer("hooks.example", ["93.184.216.34"])
    dns.answer("private.customer.example", ["93.184.216.34", "10.1.2.3"])  # one bad address is enough
    dns.answer("rebinding.customer.example", ["192.168.0.10"])
    portal = Portal(client, portal_user(account, "ops@ssrf.example"), https=True)
    page = f"/app/api-keys/{account.key.id}"
    refused = {}
    for url in UNSAFE_URLS:
        response = portal.post(f"{page}/webhook", {"url": url}, page=page)
        assert response.status_code == 400, url
        html = response.get_data(as_text=True)
        with db.connection_context():
            assert ApiKey.get_by_id(account.key.id).webhook_url is None, url
        refused[url[:40]] = "refused" if "webhook URL" in html or "Webhook URL" in html else "?"
    assert set(refused.values()) == {"refused"}
    # A public https URL is accepted.
    portal.post(f"{page}/webhook", {"url": "https://hooks.example/scans"}, page=page)
    with db.connection_context():
        assert ApiKey.get_by_id(account.key.id).webhook_url == "https://hooks.example/scans"
    # The operator command refuses them too.
    cli = client.application.test_cli_runner().invoke(args=["keys", "issue", account.id, "--webhook-url",
                                                            "https://169.254.169.254/", "--json"])
    assert cli.exit_code != 0
    figures.update(requests=len(UNSAFE_URLS) + 3, concurrency=1, faults="none", inputs=len(UNSAFE_URLS) + 1,
                   failures=0)


# --- CSRF and cookies ----------------------------------------------------------------------------

def test_cross_site_posts_are_refused_and_the_api_ignores_portal_cookies(client, account, make_customer, figures):
    portal = Portal(client, portal_user(account, "ops@csrf.example"))
    page = f"/app/api-keys/{account.key.id}"
    evil = {"Origin": "https://evil.example", "Referer": "https://evil.example/attack.html"}
    attempts = 0
    # A cross-site form post carries the victim's cookie but cannot read the token.
    for suffix, data in (("webhook", {"url": "https://evil.example/steal"}), ("secret", {}), ("secret/reveal", {}),
                         ("test-event", {})):
        response = client.post(f"{page}/{suffix}", data=data, headers=evil)
        assert response.status_code == 400 and response.json["error"] == "csrf_failed", suffix
        attempts += 1
    # A token from another session is no good either.
    other = make_customer()
    portal_user(other, "other@csrf.example")
    with client.application.test_client() as stranger:
        Portal(stranger, "other@csrf.example")
        foreign_token = CSRF_RE.search(stranger.get("/app/api-keys").get_data(as_text=True)).group(1)
    response = client.post(f"{page}/webhook", data={"url": "https://evil.example/steal", "csrf_token": foreign_token},
                           headers=evil)
    assert response.status_code == 400 and response.json["error"] == "csrf_failed"
    attempts += 1
    with db.connection_context():
        assert ApiKey.get_by_id(account.key.id).webhook_url is None
    # No state changes on GET.
    for suffix in ("webhook", "secret", "secret/reveal", "test-event"):
        assert client.get(f"{page}/{suffix}").status_code == 405
        attempts += 1
    assert client.get("/app/logout").status_code == 405
    # The JSON API takes bearer keys only: the portal's session cookie is no credential there.
    response = client.post(SCAN, json={"target": "jane@example.com"}, headers=evil)
    assert response.status_code == 401 and response.json["error"] == "unauthorized"
    with client.application.test_client() as cookieless:  # and it never starts a session of its own
        assert "Set-Cookie" not in cookieless.get(f"{SCAN}/x", headers=account.headers).headers
    attempts += 3
    assert portal.get(page).status_code == 200  # the session itself is still fine
    figures.update(requests=attempts + 4, concurrency=1, faults="none", inputs=attempts, failures=0)


@pytest.mark.config(APP_ENV="production")
def test_production_cookies_and_the_strict_referer_check(client, account, figures):
    email = portal_user(account, "ops@cookies.example")
    token = CSRF_RE.search(client.get("/app/login", base_url=HTTPS).get_data(as_text=True)).group(1)
    login = client.post("/app/login", base_url=HTTPS, headers={"Referer": f"{HTTPS}/app/login"},
                        data={"email": email, "password": PASSWORD, "csrf_token": token})
    assert login.status_code == 302
    cookie = login.headers["Set-Cookie"]
    assert all(flag in cookie for flag in ("Secure", "HttpOnly", "SameSite=Lax", "Path=/"))
    page = f"/app/api-keys/{account.key.id}"
    html = client.get(page, base_url=HTTPS)
    assert html.headers["Cache-Control"] == "no-store" and "frame-ancestors 'none'" in \
        html.headers["Content-Security-Policy"]
    token = CSRF_RE.search(html.get_data(as_text=True)).group(1)
    # Over https a valid token is not enough: the Referer must be this site (flask-wtf's strict check).
    for headers in ({"Referer": "https://evil.example/x"}, {}, {"Referer": "http://localhost/app/api-keys"}):
        response = client.post(f"{page}/test-event", data={"csrf_token": token}, base_url=HTTPS, headers=headers)
        assert response.status_code == 400 and response.json["error"] == "csrf_failed", headers
    with db.connection_context():
        assert WebhookDelivery.select().count() == 0
    same_site = client.post(f"{page}/secret", data={"csrf_token": token}, base_url=HTTPS,
                            headers={"Referer": f"{HTTPS}{page}"})
    assert same_site.status_code == 200 and same_site.headers["Cache-Control"] == "no-store"
    figures.update(requests=7, concurrency=1, faults="none", inputs=["Secure", "HttpOnly", "SameSite=Lax",
                   "referer: evil / none / http"], failures=0)


# --- revocation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("server", ["werkzeug", pytest.param("gunicorn", marks=pytest.mark.processes)])
def test_a_revoked_key_is_refused_at_once_even_on_an_open_keep_alive_connection(request, account, server, figures):
    """Against served_app (werkzeug's server closes every connection, by design) and gunicorn, whose
    keep-alive holds the connection open: the request after the revocation, on the same socket, is 401."""
    url = request.getfixturevalue("served_app" if server == "werkzeug" else "gunicorn").url
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = dict(account.headers, Connection="keep-alive")

    def get(path):
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())

    try:
        assert get(f"{SCAN}/scn_x")[0] == 404
        sock = conn.sock
        if server == "gunicorn":
            assert sock is not None  # the server kept the connection open
        idempotent = requests.post(f"{url}{SCAN}", json={"target": "jane@example.com"},
                                   headers=dict(account.headers, **{"Idempotency-Key": "before-revocation"}),
                                   timeout=10)
        assert idempotent.status_code == 202
        with db.connection_context():
            admin.revoke_key(account.key.id)
        status, body = get(f"{SCAN}/scn_x")
        if server == "gunicorn":
            assert conn.sock is sock  # the very same connection
        assert (status, body["error"]) == (401, "invalid_token")
        # Nor does a stored idempotent answer replay for a revoked key.
        replay = requests.post(f"{url}{SCAN}", json={"target": "jane@example.com"},
                               headers=dict(account.headers, **{"Idempotency-Key": "before-revocation"}), timeout=10)
        assert replay.status_code == 401 and "Idempotent-Replayed" not in replay.headers
    finally:
        conn.close()
    figures.update(requests=4, concurrency=1, faults="key revoked between two requests"
                   + (" on one kept-alive connection" if server == "gunicorn" else ""), inputs=1, failures=0)
