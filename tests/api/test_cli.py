"""The operator CLI of D10, with --json output."""
import hashlib
import json
import uuid
from datetime import datetime

import pytest
import requests
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import ApiKey, CreditLedger, Customer, PortalUser
from app.billing import charges
from app.extensions import db
from app.plumbing.crypto import decrypt_secret
from app.plumbing.models import utcnow
from app.scans.models import Scan
from app.webhooks import outbox
from app.webhooks.models import WebhookDelivery
from tests.api.helpers import assert_counters_match
from tests.portal.helpers import PASSWORD, login

BIGINT_MAX = 2**63 - 1
SECRET = "whsec_b3BlcmF0b3Igc2VjcmV0IDAxMjM0NTY3ODk="


def run(app, *args, input=None):
    return app.test_cli_runner().invoke(args=list(args), input=input)


def run_json(app, *args, input=None):
    result = run(app, *args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_db_upgrade_is_idempotent(app):
    first = run_json(app, "db", "upgrade")
    second = run_json(app, "db", "upgrade")
    assert first["version"] == second["version"] >= 1
    assert second["applied"] == []


def test_db_upgrade_makes_the_activity_logs_partitions_before_the_service_writes(app):
    """A day's partition made while entries of that day are written refuses them: the upgrade
    makes today's and the coming week's, so the service never meets one being made."""
    from datetime import timedelta

    from app.activity import entries
    from app.activity.statements import entries as store
    from app.extensions import db
    from app.plumbing.models import utcnow

    with db.connection_context():
        for day in store.day_partitions():
            store.drop_day_partition(day)
    run_json(app, "db", "upgrade")
    today = utcnow().date()
    with db.connection_context():
        assert store.day_partitions() == [today + timedelta(days=n) for n in range(entries.PARTITION_DAYS_AHEAD + 1)]


def test_customer_lifecycle(app):
    customer = run_json(app, "customers", "create", "--name", "Acme", "--tier", "pro", "--credits", "50")
    cid = customer["customer_id"]
    assert cid.startswith("cus_") and customer["balance"] == 50 and customer["limits"]["inflight"] == 3
    assert run_json(app, "customers", "credit", cid, "25", "--reason", "goodwill, ticket 4411")["balance"] == 75
    assert run_json(app, "customers", "credit", cid, "-5", "--reason", " granted twice ")["balance"] == 70
    assert run_json(app, "customers", "tier", cid, "enterprise")["limits"] == {"inflight": 25, "hour": 500,
                                                                               "day": 10000, "watches": 10000}
    limits = run_json(app, "customers", "limits", cid, "--inflight", "40", "--day", "20000")
    assert limits["limits"] == {"inflight": 40, "hour": 500, "day": 20000, "watches": 10000}
    assert run_json(app, "customers", "limits", cid, "--watches", "7")["limits"]["watches"] == 7
    listed = run_json(app, "customers", "list")["customers"]
    assert [c["customer_id"] for c in listed] == [cid]
    with db.connection_context():
        assert [(r.delta, r.note) for r in CreditLedger.select().order_by(CreditLedger.id)] == [
            (50, "initial credits"), (25, "goodwill, ticket 4411"), (-5, "granted twice")]
        assert charges.ledger_sum(cid) == charges.balance_of(cid) == 70


def test_credit_without_a_reason_works_and_a_given_reason_reaches_the_customer(app, client):
    """The documented form `customers credit CUSTOMER_ID N` needs no --reason (scripts use it);
    a reason, when given, is shown to the customer beside the movement."""
    cid = run_json(app, "customers", "create", "--name", "Acme", "--tier", "pro", "--credits", "10")["customer_id"]
    plain = run(app, "customers", "credit", cid, "5")
    assert plain.exit_code == 0, plain.output
    assert run_json(app, "customers", "credit", cid, "7")["reason"] is None
    given = run_json(app, "customers", "credit", cid, "-2", "--reason", "refund for ticket 4411")
    assert given["balance"] == 20
    with db.connection_context():
        rows = [(r.delta, r.reason, r.note) for r in CreditLedger.select().order_by(CreditLedger.id)]
        assert charges.ledger_sum(cid) == charges.balance_of(cid) == 20
    # A debit is not called a grant.
    assert rows == [(10, "grant", "initial credits"), (5, "grant", None), (7, "grant", None),
                    (-2, "debit", "refund for ticket 4411")]
    admin.create_user(cid, "ops@acme.example", PASSWORD)
    login(client)
    usage = client.get("/app/usage").get_data(as_text=True)
    assert "Reason: refund for ticket 4411" in usage
    assert "Credits taken back by your account manager" in usage


def test_errors_exit_1_with_a_message(app):
    result = run(app, "customers", "credit", "cus_nope", "5", "--reason", "r", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"] == "no customer cus_nope"
    assert result.stderr == "error: no customer cus_nope\n"
    cid = run_json(app, "customers", "create", "--name", "A", "--tier", "pro")["customer_id"]
    overdraw = run(app, "customers", "credit", cid, "-1", "--reason", "r")
    assert overdraw.exit_code == 1 and "smaller" in overdraw.stderr and overdraw.stdout == ""
    gold = run(app, "customers", "create", "--name", "A", "--tier", "gold")
    assert gold.exit_code == 1 and gold.stderr.startswith("error: Invalid value for '--tier'")


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
    assert result == {"ok": True, "customer_id": account.id, "in_flight": {"was": 3, "now": 1}, "day": 2}
    with db.connection_context():
        assert_counters_match(account.id)
    assert run_json(app, "customers", "recount", account.id)["in_flight"] == {"was": 1, "now": 1}
    missing = app.test_cli_runner().invoke(args=["customers", "recount", "cus_nobody", "--json"])
    assert missing.exit_code == 1 and json.loads(missing.stdout)["error"] == "no customer cus_nobody"


# --- one line and exit 1 for every failure; tables, never a repr ---------------------------------


def assert_one_line_failure(result, as_json=False):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    if as_json:
        answer = json.loads(result.stdout)
        assert answer["ok"] is False and answer["error"] == result.stderr[len("error: "):].strip()
    else:
        assert result.stdout == ""


def state(customer_id):
    with db.connection_context():
        customer = Customer.get_by_id(customer_id)
        return (customer.balance, customer.inflight_limit, customer.hour_limit, customer.day_limit,
                CreditLedger.select().count(), Customer.select().count(), ApiKey.select().count())


@pytest.fixture
def cid(app):
    return run_json(app, "customers", "create", "--name", "Acme", "--tier", "pro", "--credits", "10")["customer_id"]


HUGE = "99999999999999999999"


@pytest.mark.parametrize("args", [
    ["customers", "credit", "{cid}", HUGE, "--reason", "r"],
    ["customers", "credit", "{cid}", f"-{HUGE}", "--reason", "r"],
    ["customers", "credit", "{cid}", str(BIGINT_MAX + 1), "--reason", "r"],
    ["customers", "credit", "{cid}", str(BIGINT_MAX), "--reason", "r"],  # 10 + that overflows the balance
    ["customers", "credit", "{cid}", "0", "--reason", "r"],
    ["customers", "credit", "{cid}", "5", "--reason", "x" * 501],
    ["customers", "credit", "{cid}", "1.5", "--reason", "r"],
    ["customers", "credit", "{cid}", "ten", "--reason", "r"],
    ["customers", "create", "--name", "B", "--tier", "pro", "--credits", HUGE],
    ["customers", "create", "--name", "B", "--tier", "pro", "--credits", "-1"],
    ["customers", "create", "--name", "x" * 201, "--tier", "pro"],
    ["customers", "create", "--name", "  ", "--tier", "pro"],
    ["customers", "limits", "{cid}", "--inflight", str(2**31)],
    ["customers", "limits", "{cid}", "--hour", HUGE],
    ["customers", "limits", "{cid}", "--day", "-1"],
    ["customers", "limits", "cus_nobody", "--day", "5"],
    ["customers", "show", "cus_nobody"],
    ["customers", "show", "cus_\x00"],
    ["customers", "tier", "{cid}", "gold"],
    ["keys", "issue", "{cid}", "--name", "x" * 201],
    ["keys", "issue", "cus_nobody"],
    ["keys", "revoke", "key_nobody"],
    ["keys", "set-webhook", "key_nobody", "--url", "https://hooks.example.com/x"],
    ["keys", "set-webhook", "key_nobody"],
    ["deliveries", "redeliver", "dlv_nobody"],
])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_bad_input_is_one_line_exit_1_and_changes_nothing(app, cid, args, as_json):
    args = [a.replace("{cid}", cid) for a in args]
    before = state(cid)
    result = run(app, *args, *(["--json"] if as_json else []))
    assert_one_line_failure(result, as_json)
    assert state(cid) == before


def test_a_credit_up_to_the_columns_range_is_accepted(app, cid):
    top = run_json(app, "customers", "credit", cid, str(BIGINT_MAX - 10), "--reason", "the most there can be")
    assert top["balance"] == BIGINT_MAX
    assert_one_line_failure(run(app, "customers", "credit", cid, "1", "--reason", "one more"))
    assert run_json(app, "customers", "credit", cid, str(-BIGINT_MAX), "--reason", "all back")["balance"] == 0
    with db.connection_context():
        assert charges.ledger_sum(cid) == charges.balance_of(cid) == 0


def test_human_output_is_tables_never_a_python_repr(app, cid):
    key_id = run_json(app, "keys", "issue", cid, "--name", "prod")["key_id"]
    with db.connection_context():  # a name from before names were checked: shown escaped, not obeyed
        ApiKey.update(name="prod\x1b[31m").where(ApiKey.id == key_id).execute()
    outputs = {
        "create": run(app, "customers", "create", "--name", "B", "--tier", "business"),
        "list": run(app, "customers", "list"),
        "credit": run(app, "customers", "credit", cid, "5", "--reason", "goodwill"),
        "tier": run(app, "customers", "tier", cid, "business"),
        "limits": run(app, "customers", "limits", cid, "--inflight", "7"),
        "show": run(app, "customers", "show", cid),
        "keys list": run(app, "keys", "list", cid),
        "set-webhook": run(app, "keys", "set-webhook", key_id, "--url", "https://hooks.example.com/x"),
        "revoke": run(app, "keys", "revoke", key_id),
        "recover": run(app, "scans", "recover"),
        "upgrade": run(app, "db", "upgrade"),
    }
    for name, result in outputs.items():
        assert result.exit_code == 0 and result.stderr == "", (name, result.output)
        for tell in ("{'", "': ", "None", "True", "False", "[]", "\x1b"):
            assert tell not in result.stdout, (name, tell, result.stdout)
    limits = outputs["limits"].stdout.splitlines()
    assert limits[1].split() == ["limit", "value", "source"]
    assert limits[3].split() == ["in", "flight", "7", "override"]
    assert limits[4].split() == ["per", "hour", "100", "tier", "default"]  # business
    assert "prod\\x1b[31m" in outputs["keys list"].stdout  # a control character is shown escaped


# --- customers credit --reason and customers show --------------------------------------------


def test_customers_show_tells_balance_tier_limits_usage_keys_and_reasons(app, client, make_customer):
    account = make_customer(tier="pro", credits=20)
    for i in range(2):
        assert client.post("/api/v1/scan", json={"target": f"s{i}@example.com"},
                           headers=account.headers).status_code == 202
    run_json(app, "customers", "credit", account.id, "30", "--reason", "refund for incident 77")
    run_json(app, "customers", "limits", account.id, "--hour", "50")
    shown = run_json(app, "customers", "show", account.id)
    assert (shown["balance"], shown["tier"]) == (48, "pro")
    assert shown["limits"] == {"inflight": 3, "hour": 50, "day": 100, "watches": 100}
    assert shown["overrides"] == {"inflight": None, "hour": 50, "day": None, "watches": None}
    assert shown["usage"] == {"in_flight": 2, "hour": 2, "day": 2}
    assert [k["key_id"] for k in shown["keys"]] == [account.key.id]
    newest = shown["ledger"][0]
    assert (newest["delta"], newest["kind"], newest["note"], newest["balance_after"]) == (
        30, "grant", "refund for incident 77", 48)
    assert [r["kind"] for r in shown["ledger"][1:]] == ["scan", "scan", "grant"]

    text = run(app, "customers", "show", account.id).stdout
    for expected in ("balance", "48", "in flight now", "created in the last hour", "refund for incident 77",
                     account.key.id, "(override)"):
        assert expected in text, expected



def test_customers_show_says_how_many_reads_a_summed_row_holds(app, client, make_customer):
    account = make_customer(tier="pro", credits=20)
    with freeze_time(utcnow()):  # one minute: the three reads are one row (D24)
        for path in ("/api/v1/account", "/api/v1/scan/scn_nope", "/api/v1/account"):
            client.get(path, headers=account.headers)
    shown = run_json(app, "customers", "show", account.id)
    reads = [r for r in shown["ledger"] if r["kind"] == "reads"]
    assert sorted((r["note"], r["reads"], r["delta"]) for r in reads) == [
        ("GET /api/v1/account", 2, -2), ("GET /api/v1/scan/{scan_id}", 1, -1)]
    assert shown["balance"] == 17
    text = run(app, "customers", "show", account.id).stdout
    lines = text.splitlines()
    assert [line for line in lines if " 2 reads " in line and "GET /api/v1/account" in line]
    assert [line for line in lines if " 1 read " in line and "GET /api/v1/scan/{scan_id}" in line]


# --- webhook settings: the portal's rules in every entry point ----------------------------------


def key_row(key_id):
    with db.connection_context():
        return ApiKey.get_by_id(key_id)


@pytest.mark.parametrize("secret, message", [
    ("x", "whsec_ followed by standard base64"),
    (f" {SECRET} ", "whsec_ followed by standard base64"),
    ("whsec_" + "s" * 200, "decode to 16 to 128 bytes"),
], ids=["one character", "surrounding spaces", "too long"])
def test_keys_issue_refuses_the_secrets_the_portal_refuses(app, cid, secret, message):
    before = state(cid)
    for args, stdin in ((["--webhook-secret", secret], None), (["--webhook-secret-stdin"], secret + "\n")):
        result = run(app, "keys", "issue", cid, "--webhook-url", "https://hooks.example.com/x", *args, input=stdin)
        assert_one_line_failure(result)
        assert message in result.stderr
    assert state(cid) == before  # no key left behind


def test_keys_issue_takes_the_secret_from_stdin(app, cid):
    issued = run_json(app, "keys", "issue", cid, "--webhook-url", "https://hooks.example.com/x",
                      "--webhook-secret-stdin", input=SECRET + "\n")
    assert decrypt_secret(key_row(issued["key_id"]).webhook_secret_enc) == SECRET
    assert issued["has_webhook_secret"] is True and SECRET not in json.dumps(issued)
    both = run(app, "keys", "issue", cid, "--webhook-secret", SECRET, "--webhook-secret-stdin", input=SECRET)
    assert_one_line_failure(both)
    assert_one_line_failure(run(app, "keys", "issue", cid, "--webhook-secret-stdin", input=""))


def test_keys_set_webhook_sets_and_removes_by_the_portals_rules(app, cid):
    key_id = run_json(app, "keys", "issue", cid)["key_id"]
    data = run_json(app, "keys", "set-webhook", key_id, "--url", " https://hooks.example.com/a ", "--secret-stdin",
                    input=SECRET + "\n")
    assert (data["webhook_url"], data["has_webhook_secret"]) == ("https://hooks.example.com/a", True)
    assert decrypt_secret(key_row(key_id).webhook_secret_enc) == SECRET
    # Without --secret-stdin the secret is kept; a refused input changes nothing.
    assert run_json(app, "keys", "set-webhook", key_id, "--url", "https://hooks.example.com/b")["webhook_url"] \
        == "https://hooks.example.com/b"
    for args, stdin in ((["--url", "https://hooks.example.com/c", "--secret-stdin"], "short\n"),
                        (["--url", "https://127.0.0.1:99999/"], None),
                        (["--url", "ftp://hooks.example.com/"], None),
                        (["--url", "https://hooks.example.com/c", "--secret-stdin"], "")):
        assert_one_line_failure(run(app, "keys", "set-webhook", key_id, *args, input=stdin))
    row = key_row(key_id)
    assert row.webhook_url == "https://hooks.example.com/b" and decrypt_secret(row.webhook_secret_enc) == SECRET
    assert run_json(app, "keys", "set-webhook", key_id, "--url", "")["webhook_url"] is None
    assert decrypt_secret(key_row(key_id).webhook_secret_enc) == SECRET


@pytest.mark.parametrize("url", ["https://127.0.0.1:99999/", "https://93.184.216.34:abc/", "https://[::1/"])
def test_keys_issue_with_a_malformed_url_is_one_line(app, cid, url):
    before = state(cid)
    result = run(app, "keys", "issue", cid, "--webhook-url", url)
    assert_one_line_failure(result)
    assert "webhook URL" in result.stderr
    assert state(cid) == before


@pytest.mark.config(APP_ENV="production")
@pytest.mark.parametrize("url", ["https://127.0.0.1/hook", "https://[::1]/hook", "http://93.184.216.34/hook",
                                 "https://169.254.169.254/latest"])
def test_in_production_the_cli_refuses_what_the_portal_refuses(app, cid, url):
    key_id = run_json(app, "keys", "issue", cid)["key_id"]
    before = state(cid)
    assert_one_line_failure(run(app, "keys", "issue", cid, "--webhook-url", url))
    assert_one_line_failure(run(app, "keys", "set-webhook", key_id, "--url", url))
    assert state(cid) == before and key_row(key_id).webhook_url is None


# --- deliveries redeliver ------------------------------------------------------------------------


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_deliveries_redeliver_sends_a_failed_delivery_again(app, make_customer, simulator, jobs):
    name = f"cli-{uuid.uuid4().hex[:12]}"
    requests.post(f"{simulator.url}/_sim/receivers/{name}", json={"secret": SECRET, "responses": [500, 200]},
                  timeout=5).raise_for_status()
    account = make_customer(webhook_url=f"{simulator.url}/_sim/hooks/{name}", webhook_secret=SECRET)
    with db.connection_context():
        delivery = outbox.send_test_event(account.key.id, account.customer.id)
    pending = run(app, "deliveries", "redeliver", delivery.id)
    assert_one_line_failure(pending)
    assert "pending" in pending.stderr
    jobs.run()
    assert key_status(delivery.id) == ("failed", 1)

    again = run_json(app, "deliveries", "redeliver", delivery.id)
    assert (again["delivery_id"], again["status"], again["attempts_before"]) == (delivery.id, "pending", 1)
    jobs.run()
    assert key_status(delivery.id) == ("succeeded", 2)
    received = requests.get(f"{simulator.url}/_sim/receivers/{name}/deliveries", timeout=5).json()["deliveries"]
    assert [d["response_status"] for d in received] == [500, 200]


def key_status(delivery_id):
    with db.connection_context():
        row = WebhookDelivery.get_by_id(delivery_id)
        return row.status, row.attempts


def test_an_unexpected_failure_is_one_line_too(app, cid, monkeypatch):
    from app.billing import customers

    def broken(customer_id, now=None):
        raise ZeroDivisionError("division by zero\nsecond line")
    monkeypatch.setattr(customers, "customer_overview", broken)
    result = run(app, "customers", "show", cid)
    assert_one_line_failure(result)
    assert result.stderr == "error: unexpected ZeroDivisionError: division by zero\n"


def test_users_create_takes_a_role(app, cid):
    """An owner by default; ``--role`` makes an admin, developer or viewer, and refuses another word."""
    owner = run_json(app, "users", "create", cid, "owner@example.com", "--password-stdin", input="long enough pw\n")
    viewer = run_json(app, "users", "create", cid, "viewer@example.com", "--password-stdin", "--role", "viewer",
                      input="long enough pw\n")
    assert (owner["role"], viewer["role"]) == ("owner", "viewer")
    with db.connection_context():
        assert PortalUser.get(PortalUser.email == "viewer@example.com").role == "viewer"
    refused = run(app, "users", "create", cid, "root@example.com", "--password-stdin", "--role", "root",
                  input="long enough pw\n")
    assert refused.exit_code == 1 and "'root' is not one of 'owner', 'admin', 'developer', 'viewer'" in refused.output
    with db.connection_context():
        assert not PortalUser.select().where(PortalUser.email == "root@example.com").exists()


def test_users_create_without_a_terminal_or_password_is_a_json_error(app, cid):
    """No --password-stdin and no terminal to prompt on: one JSON error, not click's 'Aborted!'."""
    result = run(app, "users", "create", cid, "ops@example.com", "--json", input="")
    assert result.exit_code == 1
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"ok": False, "error": "no password given: use --password-stdin (no terminal to prompt on)"}
    assert "Aborted" not in result.output


@pytest.mark.parametrize("args", [
    ["customers", "list"], ["customers", "show", "{cid}"], ["customers", "credit", "{cid}", "1"],
    ["keys", "list"], ["users", "list"], ["db", "upgrade"],
])
def test_every_json_answer_says_ok(app, cid, args):
    answer = run_json(app, *[a.replace("{cid}", cid) for a in args])
    assert answer["ok"] is True


def test_every_list_is_one_table_style(app, cid):
    """Headers with a rule of dashes under them, columns two spaces apart: the same for every list
    (users list had a style of its own)."""
    admin.create_user(cid, "ops@acme.example", PASSWORD)
    run_json(app, "keys", "issue", cid)
    for args in (["customers", "list"], ["keys", "list"], ["users", "list"]):
        lines = run(app, *args).stdout.splitlines()
        assert set(lines[1].replace(" ", "")) == {"-"}, (args, lines[:3])


def test_rolling_a_key_without_a_secret_says_what_it_did(app, make_customer):
    account = make_customer()  # no webhook secret
    answer = run_json(app, "keys", "roll-secret", account.key.id)
    assert answer["overlap_hours"] == 0  # nothing to overlap with: it signs alone at once
    text = run(app, "keys", "roll-secret", account.key.id, "--overlap-hours", "0").stdout
    assert "replaced the old secret at once" in text
    fresh = make_customer()
    text = run(app, "keys", "roll-secret", fresh.key.id).stdout
    assert "the key had no usable secret" in text


def test_keys_endpoints_and_enable_endpoint(app, make_customer):
    account = make_customer(webhook_url="https://hooks.example.com/a")
    first = outbox.first_endpoint_id(account.key.id)
    with db.connection_context():
        ApiKey.update(webhook_enabled=False, webhook_disabled_at=datetime(2026, 11, 26, 13, 0)).where(
            ApiKey.id == account.key.id).execute()
    listed = run_json(app, "keys", "endpoints", account.key.id)
    assert [(e["endpoint_id"], e["enabled"], e["disabled_at"]) for e in listed["endpoints"]] == [
        (first, False, "2026-11-26T13:00:00Z")]
    enabled = run_json(app, "keys", "enable-endpoint", account.key.id, first)
    assert (enabled["enabled"], enabled["disabled_at"]) == (True, None)
    with db.connection_context():
        assert ApiKey.get_by_id(account.key.id).webhook_enabled is True
    missing = run(app, "keys", "enable-endpoint", account.key.id, "ep_nobody")
    assert missing.exit_code != 0 and "no endpoint ep_nobody" in missing.output


@pytest.mark.config(WEBHOOK_DISABLE_AFTER_HOURS=120)
def test_keys_check_endpoints_judges_auto_disable_with_a_qa_clock(app, make_customer):
    account = make_customer(webhook_url="https://hooks.example.com/a")
    first = outbox.first_endpoint_id(account.key.id)
    with db.connection_context():
        key = ApiKey.get_by_id(account.key.id)
        for _ in range(10):
            body = outbox.sample_event_body()
            outbox._create_delivery(key, body["event"], body, None, status="failed")
    assert run_json(app, "keys", "check-endpoints", account.key.id)["disabled"] == []
    text = run(app, "keys", "check-endpoints", account.key.id).stdout
    assert "no endpoint disabled" in text
    answer = run_json(app, "keys", "check-endpoints", account.key.id, "--hours-ahead", "121")
    assert (answer["key_id"], answer["disabled"]) == (account.key.id, [first])
    with db.connection_context():
        assert ApiKey.get_by_id(account.key.id).webhook_enabled is False


@pytest.mark.config(APP_ENV="production")
def test_keys_check_endpoints_refuses_the_qa_clock_in_production(app, make_customer):
    account = make_customer()
    refused = run(app, "keys", "check-endpoints", account.key.id, "--hours-ahead", "121")
    assert refused.exit_code != 0 and "refused in production" in refused.output
    assert run_json(app, "keys", "check-endpoints", account.key.id)["disabled"] == []


def test_db_check_logging_warns_when_the_server_would_log_statement_text(app):
    """The test server keeps PostgreSQL's default: a failed statement is logged with its text."""
    result = run(app, "db", "check-logging")
    assert result.exit_code == 1
    assert "warning: log_min_error_statement is error" in result.output and "Traceback" not in result.output
    answer = run(app, "db", "check-logging", "--json")
    [document] = [json.loads(line) for line in answer.output.splitlines() if line.startswith("{")]
    assert answer.exit_code == 1 and document["ok"] is False
    assert [risk.split(" ")[0] for risk in document["risks"]] == ["log_min_error_statement"]
