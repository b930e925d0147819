"""``GET /api/v1/account`` (D21): the account, its limits and usage, and what the calling key may
do; one credit like every call, the balance shown being the one after it."""
from freezegun import freeze_time

from app.accounts import access, admin
from app.accounts.models import CreditLedger
from app.extensions import db
from tests.api.helpers import assert_books_balance, balance
from tests.factories import Account, sandbox_key


def test_the_account_call_shows_the_account_and_the_key_and_costs_one_credit(client, account):
    with freeze_time("2026-11-21 12:00:00"):
        client.post("/api/v1/scan", json={"target": "jane.doe@example.com"}, headers=account.headers)
        with db.connection_context():
            key, plaintext = admin.issue_key(account.id, "reporting", scopes=[access.WEBHOOKS],
                                                expires_in_days=30, allowed_ips="203.0.113.0/24")
        reader = Account(account.customer, key, plaintext)
        before = balance(account)
        response = client.get("/api/v1/account", headers=reader.headers,
                              environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert response.status_code == 200
    body = response.get_json()
    assert body == {
        "ok": True, "customer_id": account.id, "tier": "business", "balance": before - 1,
        "limits": {"inflight": 10, "hour": 100, "day": 1000}, "usage": {"inflight": 1, "hour": 1, "day": 1},
        "key": {"key_id": key.id, "livemode": True, "scopes": ["webhooks"], "expires_at": "2026-12-21T12:00:00Z",
                "allowed_ips": ["203.0.113.0/24"]}}
    assert response.headers["X-Credits-Remaining"] == str(before - 1) == str(balance(account))
    with db.connection_context():
        last = CreditLedger.select().where(CreditLedger.customer == account.id).order_by(CreditLedger.id.desc()).get()
    assert (last.delta, last.reason, last.note, last.reads) == (-1, "reads", "GET /api/v1/account", 1)
    assert_books_balance(account)


def test_any_scope_may_read_the_account_but_not_from_outside_the_allowlist(client, account):
    for scope in access.SCOPES:
        with db.connection_context():
            key, plaintext = admin.issue_key(account.id, scope, scopes=[scope], allowed_ips="203.0.113.0/24")
        headers = {"Authorization": f"Bearer {plaintext}"}
        assert client.get("/api/v1/account", headers=headers, environ_base={"REMOTE_ADDR": "203.0.113.1"}
                          ).get_json()["key"]["scopes"] == [scope]
        before = balance(account)
        refused = client.get("/api/v1/account", headers=headers, environ_base={"REMOTE_ADDR": "198.51.100.1"})
        assert refused.status_code == 403 and refused.get_json()["error"] == "ip_not_allowed"
        assert balance(account) == before


def test_a_test_key_reads_the_account_free_with_its_own_usage(client, account):
    client.post("/api/v1/scan", json={"target": "jane.doe@example.com"}, headers=account.headers)
    test = sandbox_key(account)
    before = balance(account)
    body = client.get("/api/v1/account", headers=test.headers).get_json()
    assert body["balance"] == before == balance(account)  # nothing charged (test mode)
    assert body["usage"] == {"inflight": 0, "hour": 0, "day": 0}  # the live scan is not the test key's
    assert body["key"]["livemode"] is False and body["key"]["scopes"] == list(access.SCOPES)


def test_an_empty_balance_cannot_read_the_account(client, make_customer):
    poor = make_customer(credits=0)
    response = client.get("/api/v1/account", headers=poor.headers)
    assert response.status_code == 402 and response.get_json()["error"] == "insufficient_balance"


def test_the_activity_log_says_what_reading_the_account_cost(client, account):
    """The entry of ``account.read`` carries its credit, as every charged call's does (a test key's: 0)."""
    from app.activity.models import ActivityEntry
    test = sandbox_key(account)
    before = balance(account)
    assert client.get("/api/v1/account", headers=account.headers).status_code == 200
    assert client.get("/api/v1/account", headers=test.headers).status_code == 200
    with db.connection_context():
        rows = list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
                    .order_by(ActivityEntry.created_at, ActivityEntry.id))
    assert [(r.key_id, r.action, r.status, r.credits) for r in rows] == [
        (account.key.id, "account.read", 200, 1), (test.key.id, "account.read", 200, 0)]
    assert balance(account) == before - 1
