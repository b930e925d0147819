"""D21: a key's scopes, expiry and IP allowlist, checked right after authentication on every
endpoint, free of charge (no ledger row, balance unchanged), on both paths (``hooks.api_call``
and the served reads' one statement).

The endpoints come from the app's url_map at collection, so a new route is covered by every
test here without a line added."""
import logging

import pytest
from freezegun import freeze_time

from app import create_app
from app.accounts import access, admin
from app.accounts.models import ApiKey
from app.api import hooks
from app.blueprints import BLUEPRINTS
from app.extensions import db
from tests.api.helpers import balance, ledger
from tests.factories import Account

# Values for the ids in a route: none of them exists, which a refusal must not care about.
ROUTE_VALUES = {"scan_id": "scn_doesnotexist", "bulk_id": "blk_doesnotexist", "delivery_id": "dlv_doesnotexist"}
KEY_REFUSALS = {"key_expired", "ip_not_allowed", "insufficient_scope"}
OUTSIDE, INSIDE, PROXY = "198.51.100.7", "203.0.113.5", "10.0.0.2"


def _unconnected_app():
    """An app whose configuration is never used to connect: its url_map is all the walk reads."""
    return create_app({"APP_ENV": "test", "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/unused",
                       "REDIS_URL": "redis://127.0.0.1:1/0", "ENGINE_URL": "http://127.0.0.1:1",
                       "ENGINE_TOKEN": "unused", "SECRET_KEY": "unused"})


def _api_operations() -> list[tuple[str, str, str]]:
    """``(method, path, declared scope)`` of every /api/v1 view, read from an app's url_map."""
    app = _unconnected_app()
    operations = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or not getattr(app.view_functions[rule.endpoint], "view_class", None):
            continue
        path = rule.build({a: ROUTE_VALUES.get(a, f"x_{a}") for a in rule.arguments})[1]
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            operations.append((method, path, hooks.declared(app, rule, method, "scope")))
    return operations


OPERATIONS = _api_operations()
SCOPED = [op for op in OPERATIONS if op[2] != access.ANY_SCOPE]
IDS = [f"{method} {path}" for method, path, _ in OPERATIONS]


def test_the_walk_sees_every_endpoint_and_each_declares_a_scope():
    assert len(OPERATIONS) >= 8  # scans, reads, bulk, list, deliveries, account: the walk really saw them
    assert {scope for _, _, scope in OPERATIONS} <= {*access.SCOPES, access.ANY_SCOPE}
    assert ("GET", "/api/v1/account", access.ANY_SCOPE) in OPERATIONS
    assert ("GET", "/api/v1/scan/scn_doesnotexist", access.SCANS_READ) in OPERATIONS


def test_the_api_blueprints_are_the_one_list_and_every_documented_one_is_scoped():
    app = _unconnected_app()
    listed = {mount.blueprint().name: mount for mount in BLUEPRINTS}
    # Beside the list: the portal (its own layer), the document's pages and /metrics.
    assert set(app.blueprints) - set(listed) == {"portal", "api-docs", "metrics"}
    for rule in app.url_map.iter_rules():
        mount = listed.get(rule.endpoint.partition(".")[0])
        if mount is None or not mount.documented:
            continue
        assert rule.rule.startswith("/api/v1/"), rule.rule
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert hooks.declared(app, rule, method, "scope") in {*access.SCOPES, access.ANY_SCOPE}, rule.rule


def issue(account: Account, **access_rules) -> Account:
    with db.connection_context():
        key, plaintext = admin.issue_key(account.id, "restricted", **access_rules)
    return Account(account.customer, key, plaintext)


def call(client, method: str, path: str, key: Account, *, address: str = "127.0.0.1", forwarded: str | None = None):
    headers = dict(key.headers)
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    kwargs = {"json": {}} if method == "POST" else {}
    return client.open(path, method=method, headers=headers, environ_base={"REMOTE_ADDR": address}, **kwargs)


def error_of(response) -> str | None:
    """The error code of an answer; None for one that is not JSON (the events stream's)."""
    return (response.get_json() or {}).get("error")


def assert_refused_free(response, account: Account, before: tuple, status: int, code: str) -> None:
    assert (response.status_code, response.get_json()["error"]) == (status, code), response.get_json()
    assert response.is_json and response.get_json()["ok"] is False and response.get_json()["request_id"]
    assert (balance(account), ledger(account)) == before  # free: no charge, no ledger row
    assert "X-Credits-Remaining" not in response.headers  # nothing was accounted, as for a 401


def books(account: Account) -> tuple:
    return balance(account), ledger(account)


@pytest.mark.parametrize(("method", "path", "scope"), SCOPED, ids=[f"{m} {p}" for m, p, _ in SCOPED])
def test_a_key_without_the_scope_is_refused_free_and_told_which(client, account, method, path, scope):
    lacking = issue(account, scopes=[s for s in access.SCOPES if s != scope])
    before = books(account)
    response = call(client, method, path, lacking)
    assert_refused_free(response, account, before, 403, "insufficient_scope")
    assert scope in response.get_json()["message"]
    # The same call by a key with that scope alone is not refused by D21 (whatever it answers next).
    only = issue(account, scopes=[scope])
    assert error_of(call(client, method, path, only)) not in KEY_REFUSALS


@pytest.mark.parametrize(("method", "path", "scope"), OPERATIONS, ids=IDS)
def test_an_expired_key_is_refused_free_on_every_endpoint(client, account, method, path, scope):
    with freeze_time("2026-11-21 12:00:00") as frozen:
        key = issue(account, expires_in_days=1)
        frozen.move_to("2026-11-22 11:59:59")
        assert error_of(call(client, method, path, key)) != "key_expired"
        before = books(account)
        frozen.move_to("2026-11-22 12:00:00")  # the expiry itself: no longer
        response = call(client, method, path, key)
        assert_refused_free(response, account, before, 401, "key_expired")
        assert 'error="key_expired"' in response.headers["WWW-Authenticate"]


@pytest.mark.parametrize(("method", "path", "scope"), OPERATIONS, ids=IDS)
def test_a_call_from_outside_the_allowlist_is_refused_free_on_every_endpoint(client, account, method, path, scope):
    key = issue(account, allowed_ips="203.0.113.0/24, 2001:db8::/32")
    before = books(account)
    refused = call(client, method, path, key, address=OUTSIDE)
    assert_refused_free(refused, account, before, 403, "ip_not_allowed")
    assert f"used from {OUTSIDE}," in refused.get_json()["message"]  # the address the service saw
    # Without trusted proxies X-Forwarded-For is the client's own say: ignored, the peer's address decides.
    spoofed = call(client, method, path, key, address=OUTSIDE, forwarded=INSIDE)
    assert_refused_free(spoofed, account, before, 403, "ip_not_allowed")
    for address in (INSIDE, "2001:db8::7"):
        assert error_of(call(client, method, path, key, address=address)) not in KEY_REFUSALS


@pytest.mark.config(TRUSTED_PROXIES=1)
@pytest.mark.parametrize(("method", "path", "scope"), OPERATIONS, ids=IDS)
def test_behind_a_trusted_proxy_the_forwarded_address_decides(client, account, method, path, scope):
    key = issue(account, allowed_ips=["203.0.113.0/24"])
    assert error_of(call(client, method, path, key, address=PROXY, forwarded=INSIDE)) not in KEY_REFUSALS
    before = books(account)
    refused = call(client, method, path, key, address=PROXY, forwarded=OUTSIDE)
    assert_refused_free(refused, account, before, 403, "ip_not_allowed")
    assert f"used from {OUTSIDE}," in refused.get_json()["message"] and PROXY not in refused.get_json()["message"]
    # A client that sends its own X-Forwarded-For: the proxy appends the real address, which decides.
    spoofed = call(client, method, path, key, address=PROXY, forwarded=f"{INSIDE}, {OUTSIDE}")
    assert_refused_free(spoofed, account, before, 403, "ip_not_allowed")
    # The proxy's own address is not the client's: a key allowed only from it is refused.
    proxy_only = issue(account, allowed_ips=[PROXY])
    assert_refused_free(call(client, method, path, proxy_only, address=PROXY, forwarded=OUTSIDE), account, before,
                        403, "ip_not_allowed")


def test_the_refusals_come_in_d21s_order(client, account):
    """Expired before everything (a 401), then the allowlist, then the scope."""
    with freeze_time("2026-11-21 12:00:00") as frozen:
        key = issue(account, scopes=[access.WEBHOOKS], expires_in_days=1, allowed_ips="203.0.113.0/24")
        frozen.move_to("2026-11-23 12:00:00")
        assert call(client, "GET", "/api/v1/scans", key, address=OUTSIDE).get_json()["error"] == "key_expired"
    key = issue(account, scopes=[access.WEBHOOKS], allowed_ips="203.0.113.0/24")
    assert call(client, "GET", "/api/v1/scans", key, address=OUTSIDE).get_json()["error"] == "ip_not_allowed"
    assert call(client, "GET", "/api/v1/scans", key, address=INSIDE).get_json()["error"] == "insufficient_scope"
    # A revoked key is unknown before it is anything else.
    with db.connection_context():
        admin.revoke_key(key.key.id)
    assert call(client, "GET", "/api/v1/scans", key, address=OUTSIDE).get_json()["error"] == "invalid_token"


def test_a_served_read_by_an_allowed_key_is_charged_once_and_a_refused_one_not(client, account):
    """The read's one statement charges only a key D21 allows (IPv6 too), and the refusal is named."""
    created = client.post("/api/v1/scan", json={"target": "jane.doe@example.com"}, headers=account.headers)
    scan_id = created.get_json()["scan_id"]
    key = issue(account, scopes=[access.SCANS_READ], allowed_ips="2001:db8::/32")
    before = balance(account)
    read = call(client, "GET", f"/api/v1/scan/{scan_id}", key, address="2001:db8::1:2")
    assert read.status_code == 200 and read.get_json()["scan_id"] == scan_id
    assert balance(account) == before - 1 == int(read.headers["X-Credits-Remaining"])
    for address in ("2001:db9::1", "203.0.113.5", "not-an-address"):
        books_before = books(account)
        refused = call(client, "GET", f"/api/v1/scan/{scan_id}", key, address=address)
        assert_refused_free(refused, account, books_before, 403, "ip_not_allowed")
        named = address if address != "not-an-address" else "could not read your address"
        assert named in refused.get_json()["message"] and "not-an-address" not in refused.get_json()["message"]
    writer = issue(account, scopes=[access.SCANS_WRITE])
    books_before = books(account)
    refused = call(client, "GET", f"/api/v1/scan/{scan_id}", writer)
    assert_refused_free(refused, account, books_before, 403, "insufficient_scope")
    assert "target" not in refused.get_json()  # nothing of the scan


def test_a_refusal_is_in_the_request_log_line_without_the_address(client, account, caplog):
    key = issue(account, scopes=[access.SCANS_READ], allowed_ips="203.0.113.0/24")
    with caplog.at_level(logging.INFO, logger="app.access"):
        call(client, "POST", "/api/v1/scan", key, address=INSIDE)
        call(client, "GET", "/api/v1/scans", key, address=OUTSIDE)
    lines = [r.http for r in caplog.records if r.name == "app.access"]
    assert [(line["status"], line["refused"], line["customer_id"]) for line in lines] == [
        (403, "insufficient_scope", account.id), (403, "ip_not_allowed", account.id)]
    assert not any(INSIDE in r.getMessage() or OUTSIDE in r.getMessage() or INSIDE in str(r.__dict__)
                   or OUTSIDE in str(r.__dict__) for r in caplog.records)


def test_existing_keys_keep_every_scope_no_expiry_and_no_allowlist(client, account):
    with db.connection_context():
        key = ApiKey.get_by_id(account.key.id)
    assert (key.scopes, key.expires_at, key.allowed_ips) == (list(access.SCOPES), None, None)
    assert call(client, "GET", "/api/v1/scans", account, address=OUTSIDE).status_code == 200


def test_every_refusal_is_in_the_activity_log_free(client, account):
    """D20 and D21: the activity log has each refused call, with its status and no credit."""
    from app.activity.models import ActivityEntry
    lacking = issue(account, scopes=[access.SCANS_READ])
    fenced = issue(account, allowed_ips=[f"{INSIDE}/32"])
    call(client, "POST", "/api/v1/scan", lacking)
    call(client, "GET", "/api/v1/scans", fenced, address=OUTSIDE)
    read = call(client, "GET", "/api/v1/scan/scn_doesnotexist", fenced, address=OUTSIDE)  # the served read's path
    assert read.get_json()["error"] == "ip_not_allowed"
    with db.connection_context():
        rows = list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
                    .order_by(ActivityEntry.created_at, ActivityEntry.id))
    assert [(r.key_id, r.action, r.status, r.credits) for r in rows] == [
        (lacking.key.id, "scan.create", 403, 0), (fenced.key.id, "scans.list", 403, 0),
        (fenced.key.id, "scan.read", 403, 0)]
