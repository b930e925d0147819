"""The operator CLI of D10, with --json output."""
import hashlib
import json

from app.extensions import db
from app.models import ApiKey, CreditLedger, Customer, PortalUser, Scan
from app.services import billing
from tests.api.helpers import assert_counters_match


def run(app, *args, input=None):
    result = app.test_cli_runner().invoke(args=list(args), input=input)
    return result


def run_json(app, *args, input=None):
    result = run(app, *args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_db_upgrade_is_idempotent(app):
    first = run_json(app, "db", "upgrade")
    second = run_json(app, "db", "upgrade")
    assert first["version"] == second["version"] >= 1
    assert second["applied"] == []


def test_customer_lifecycle(app):
    customer = run_json(app, "customers", "create", "--name", "Acme", "--tier", "pro", "--credits", "50")
    cid = customer["customer_id"]
    assert cid.startswith("cus_") and customer["balance"] == 50 and customer["limits"]["inflight"] == 3
    assert run_json(app, "customers", "credit", cid, "25")["balance"] == 75
    assert run_json(app, "customers", "credit", cid, "-5")["balance"] == 70
    assert run_json(app, "customers", "tier", cid, "enterprise")["limits"] == {"inflight": 25, "hour": 500,
                                                                               "day": 10000}
    limits = run_json(app, "customers", "limits", cid, "--inflight", "40", "--day", "20000")
    assert limits["limits"] == {"inflight": 40, "hour": 500, "day": 20000}
    listed = run_json(app, "customers", "list")["customers"]
    assert [c["customer_id"] for c in listed] == [cid]
    with db.connection_context():
        assert [r.delta for r in CreditLedger.select().order_by(CreditLedger.id)] == [50, 25, -5]
        assert billing.ledger_sum(cid) == billing.balance_of(cid) == 70


def test_errors_exit_1_with_a_message(app):
    result = run(app, "customers", "credit", "cus_nope", "5", "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["error"] == "no customer cus_nope"
    cid = run_json(app, "customers", "create", "--name", "A", "--tier", "pro")["customer_id"]
    overdraw = run(app, "customers", "credit", cid, "-1")
    assert overdraw.exit_code == 1 and "smaller" in overdraw.output
    assert run(app, "customers", "create", "--name", "A", "--tier", "gold").exit_code == 2


def test_key_plaintext_is_printed_once_and_never_stored(app):
    cid = run_json(app, "customers", "create", "--name", "A", "--tier", "business")["customer_id"]
    issued = run_json(app, "keys", "issue", cid, "--name", "prod", "--webhook-url", "https://hooks.example.com/x",
                      "--webhook-secret", "whsec_dG9wc2VjcmV0Li4uLi4uLg==")
    plaintext = issued["api_key"]
    assert plaintext.startswith("service_live_") and issued["key_id"].startswith("key_")
    listed = run(app, "keys", "list", cid, "--json").output
    assert plaintext not in listed and "whsec_dG9wc2VjcmV0Li4uLi4uLg==" not in listed
    with db.connection_context():
        key = ApiKey.get_by_id(issued["key_id"])
        stored = json.dumps({k: str(v) for k, v in key.__data__.items()})
    assert plaintext not in stored and "whsec_dG9wc2VjcmV0Li4uLi4uLg==" not in stored
    assert key.digest == hashlib.sha256(plaintext.encode()).hexdigest()
    revoked = run_json(app, "keys", "revoke", issued["key_id"])
    assert revoked["status"] == "revoked"


def test_portal_user_password_from_stdin_is_hashed(app):
    cid = run_json(app, "customers", "create", "--name", "A", "--tier", "pro")["customer_id"]
    user = run_json(app, "users", "create", cid, "Ops@Example.com", "--password-stdin",
                    input="correct horse battery\n")
    assert user["email"] == "ops@example.com"
    with db.connection_context():
        stored = PortalUser.get_by_id(user["user_id"]).password_hash
    assert "correct horse" not in stored and stored.startswith("scrypt:")
    short = run(app, "users", "create", cid, "b@example.com", "--password-stdin", "--json", input="short\n")
    assert short.exit_code == 1


def test_recount_rebuilds_quota_counters_after_scans_were_edited_by_hand(app, client, make_customer):
    account = make_customer(tier="business", credits=100)
    for i in range(3):
        answer = client.post("/api/v1/scan", json={"target": f"r{i}@example.com"}, headers=account.headers)
        assert answer.status_code == 202
    with db.connection_context():
        # By hand, behind the service's back: one scan finished, one gone, the counters not told.
        first, second, _ = Scan.select().where(Scan.customer == account.id).order_by(Scan.created_at)
        Scan.update(status="completed", result_json="{}").where(Scan.id == first.id).execute()
        Scan.delete().where(Scan.id == second.id).execute()
        assert Customer.get_by_id(account.id).in_flight == 3
    result = run_json(app, "customers", "recount", account.id)
    assert result == {"customer_id": account.id, "in_flight": {"was": 3, "now": 1}, "day": 2}
    with db.connection_context():
        assert_counters_match(account.id)
    assert run_json(app, "customers", "recount", account.id)["in_flight"] == {"was": 1, "now": 1}
    missing = app.test_cli_runner().invoke(args=["customers", "recount", "cus_nobody", "--json"])
    assert missing.exit_code == 1 and json.loads(missing.output)["error"] == "no customer cus_nobody"
