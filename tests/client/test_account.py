"""The client's ``account()`` and ``scan-api account`` (D21), and how it reports the refusals of a key."""
import io
import json

import pytest
from freezegun import freeze_time
from scan_api_client import Account, AuthenticationError, Forbidden, KeyAccess, ScanClient, Windows
from scan_api_client.cli import main

from app.accounts import access, admin
from app.extensions import db
from tests.api.helpers import balance


def _key(account, **rules) -> str:
    with db.connection_context():
        return admin.issue_key(account.id, "client", **rules)[1]


def test_account_returns_the_account_and_the_keys_access(served_app, account):
    api = ScanClient(served_app.url, _key(account, scopes="scans:read", allowed_ips="127.0.0.0/8"))
    before = balance(account)
    found = api.account()
    assert isinstance(found, Account) and isinstance(found.limits, Windows) and isinstance(found.key, KeyAccess)
    assert (found.customer_id, found.tier, found.balance) == (account.id, "business", before - 1)
    assert found.balance == balance(account) == api.last_credits
    assert (found.limits.inflight, found.usage.hour) == (10, 0)
    assert (found.key.scopes, found.key.expires_at, found.key.allowed_ips) == (["scans:read"], None, ["127.0.0.0/8"])
    assert found.raw["key"]["livemode"] is True


def test_the_refusals_of_a_key_are_typed_errors_that_say_why(served_app, account):
    writer = ScanClient(served_app.url, _key(account, scopes=[access.SCANS_WRITE]))
    with pytest.raises(Forbidden) as refused:
        writer.list_scans()
    assert refused.value.code == "insufficient_scope" and "scans:read" in refused.value.message
    elsewhere = ScanClient(served_app.url, _key(account, allowed_ips="203.0.113.0/24"))
    with pytest.raises(Forbidden) as refused:
        elsewhere.account()
    assert refused.value.code == "ip_not_allowed"


def _cli(served_app, key, *args):
    out, err = io.StringIO(), io.StringIO()
    code = main(["account", *args], stdout=out, stderr=err, env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": key})
    return code, out.getvalue(), err.getvalue()


def test_cli_account_prints_json_and_csv(served_app, account):
    key = _key(account, scopes="webhooks,scans:read")
    code, out, err = _cli(served_app, key)
    assert code == 0, err
    document = json.loads(out)
    assert document["key"]["scopes"] == ["scans:read", "webhooks"] and document["balance"] == balance(account)
    code, out, err = _cli(served_app, key, "--format", "csv")
    header, row = out.strip().splitlines()
    assert header.startswith("customer_id,tier,balance,usage_inflight") and "scans:read webhooks" in row


def test_cli_says_what_an_expired_key_or_a_missing_scope_means(served_app, account):
    with freeze_time("2026-11-21 12:00:00") as frozen:
        expiring = _key(account, expires_in_days=1)
        frozen.move_to("2026-11-22 12:00:00")
        code, _, err = _cli(served_app, expiring)
        assert code == 1 and "the API key has expired" in err and "key_expired, HTTP 401" in err
        with pytest.raises(AuthenticationError):
            ScanClient(served_app.url, expiring).account()
    out, err = io.StringIO(), io.StringIO()
    code = main(["list"], stdout=out, stderr=err,
                env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": _key(account, scopes="webhooks")})
    assert code == 1 and "lacks the scope scans:read" in err.getvalue()
