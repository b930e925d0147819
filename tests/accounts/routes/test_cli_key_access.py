"""D21 in the operator CLI: ``keys issue --scopes --expires-in-days --allowed-ips``, ``keys
set-access`` and ``keys show``/``list``; a refused value is one clear line and exit 1, nothing changed."""
import pytest
from freezegun import freeze_time

from app.accounts import access
from app.accounts.models import ApiKey
from app.extensions import db
from tests.api.test_cli import cid, run, run_json  # noqa: F401 - cid is a fixture

FROZEN = "2026-11-21 12:00:00"


def test_keys_issue_takes_scopes_expiry_and_allowlist(app, cid):  # noqa: F811
    with freeze_time(FROZEN):
        data = run_json(app, "keys", "issue", cid, "--scopes", "scans:read,scans:write", "--expires-in-days", "30",
                        "--allowed-ips", "203.0.113.0/24,2001:db8::/32")
    assert data["scopes"] == ["scans:write", "scans:read"]
    assert data["expires_at"] == "2026-12-21T12:00:00Z"
    assert data["allowed_ips"] == ["203.0.113.0/24", "2001:db8::/32"]
    plain = run_json(app, "keys", "issue", cid)
    assert (plain["scopes"], plain["expires_at"], plain["allowed_ips"]) == (list(access.SCOPES), None, None)
    listed = run(app, "keys", "list", cid)
    assert listed.exit_code == 0
    assert "scans:write,scans:read" in listed.output and "2026-12-21T12:00:00Z" in listed.output
    assert "203.0.113.0/24,2001:db8::/32" in listed.output and "anywhere" in listed.output
    shown = run(app, "keys", "show", data["key_id"])
    assert shown.exit_code == 0 and "scopes" in shown.output and "allowed IPs" in shown.output
    assert [k["scopes"] for k in run_json(app, "keys", "list", cid)["keys"]] == [data["scopes"], list(access.SCOPES)]


@pytest.mark.parametrize("args, message", [
    (["--scopes", "scans:read,admin"], "unknown scope 'admin'"),
    (["--scopes", ""], "give at least one scope"),
    (["--expires-in-days", "0"], "from 1 to 3650"),
    (["--expires-in-days", "-3"], "from 1 to 3650"),
    (["--expires-in-days", "soon"], "'soon' is not a valid integer"),
    (["--allowed-ips", "10.0.0.0/33"], "is not an IP address or CIDR block"),
    (["--allowed-ips", ",".join(f"10.0.{n}.0/24" for n in range(51))], "at most 50 blocks, not 51"),
    # An argument that would widen access must say so: only 'none' means anywhere.
    (["--allowed-ips", ""], "the allowlist is empty: give IP addresses or CIDR blocks, or 'none'"),
    (["--allowed-ips", "10.0.0.1/8"], "has host bits set, so it is not a block: did you mean 10.0.0.0/8?"),
    (["--allowed-ips", "fe80::1%eth0"], "carries an IPv6 zone id (%...), which says nothing about where a call "
                                        "comes from: did you mean fe80::1?"),
])
def test_keys_issue_refuses_bad_access_in_one_line_and_issues_nothing(app, cid, args, message):  # noqa: F811
    result = run(app, "keys", "issue", cid, *args)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and message in line
    as_json = run(app, "keys", "issue", cid, *args, "--json")
    assert as_json.exit_code == 1 and '"ok": false' in as_json.output
    with db.connection_context():
        assert ApiKey.select().where(ApiKey.customer == cid).count() == 0


def test_keys_set_access_changes_only_what_is_given(app, cid):  # noqa: F811
    key_id = run_json(app, "keys", "issue", cid, "--allowed-ips", "203.0.113.0/24")["key_id"]
    with freeze_time(FROZEN):
        data = run_json(app, "keys", "set-access", key_id, "--scopes", "webhooks", "--expires-in-days", "7")
    assert (data["scopes"], data["expires_at"], data["allowed_ips"]) == (
        ["webhooks"], "2026-11-28T12:00:00Z", ["203.0.113.0/24"])
    data = run_json(app, "keys", "set-access", key_id, "--allowed-ips", "none")
    assert (data["scopes"], data["allowed_ips"]) == (["webhooks"], None)
    refused = run(app, "keys", "set-access", key_id, "--scopes", "scans:read", "--allowed-ips", "nonsense")
    assert refused.exit_code == 1 and "'nonsense' is not an IP address" in refused.output
    assert run_json(app, "keys", "show", key_id)["scopes"] == ["webhooks"]  # nothing of the refused change
    emptied = run(app, "keys", "set-access", key_id, "--allowed-ips", "203.0.113.0/24")
    assert emptied.exit_code == 0
    for empty in ("", " "):
        refused = run(app, "keys", "set-access", key_id, "--allowed-ips", empty)
        assert refused.exit_code == 1 and "the allowlist is empty" in refused.output
        assert run_json(app, "keys", "show", key_id)["allowed_ips"] == ["203.0.113.0/24"]  # not widened
    nothing = run(app, "keys", "set-access", key_id)
    assert nothing.exit_code == 1 and "give --scopes, --expires-in-days or --allowed-ips" in nothing.output
    unknown = run(app, "keys", "set-access", "key_nope", "--scopes", "webhooks")
    assert unknown.exit_code == 1 and "no key key_nope" in unknown.output


def test_an_expired_key_shows_as_expired(app, cid):  # noqa: F811
    with freeze_time(FROZEN) as frozen:
        key_id = run_json(app, "keys", "issue", cid, "--expires-in-days", "1")["key_id"]
        assert run_json(app, "keys", "show", key_id)["status"] == "active"
        frozen.move_to("2026-11-22 12:00:00")
        assert run_json(app, "keys", "show", key_id)["status"] == "expired"
