"""Opt-outs over HTTP and from the operator CLI (D20): a suppressed target is 403
``target_suppressed`` and free; in a bulk call a free ``rejected`` entry; the list holds hashes."""
import json
import unicodedata

import pytest

from app.accounts.models import CreditLedger
from app.billing import charges
from app.extensions import db
from app.plumbing import crypto
from app.privacy import suppressions
from app.privacy.models import Suppression
from app.scans.models import Scan

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"


def opt_out(kind, target):
    with db.connection_context():
        suppressions.add(kind, target)


def cli(app, *args):
    return app.test_cli_runner().invoke(args=list(args))


def test_a_suppressed_target_is_403_and_free(client, account):
    opt_out("email", "jane.doe@example.com")
    refused = client.post(SCAN, json={"target": "jane.doe@EXAMPLE.com"}, headers=account.headers)
    assert refused.status_code == 403
    assert refused.json["error"] == "target_suppressed"
    assert "jane" not in refused.json["message"]
    assert refused.headers["X-Credits-Remaining"] == "100"  # nothing charged, and said so
    with db.connection_context():
        assert Scan.select().count() == 0
        assert charges.balance_of(account.id) == 100
        assert CreditLedger.select().where(CreditLedger.reason == "call").count() == 0
    other = client.post(SCAN, json={"target": "john.doe@example.com"}, headers=account.headers)
    assert other.status_code == 202  # only that person


def test_a_bulk_calls_suppressed_targets_are_free_rejected_entries(client, make_customer):
    acct = make_customer(tier="enterprise", credits=100)
    opt_out("username", "@janedoe")
    targets = [{"target": "john@example.com"}, {"target": "ab"}, {"target": " @janedoe", "kind": "username"},
               {"target": "+44 7700 900123"}]
    answer = client.post(BULK, json={"targets": targets}, headers=acct.headers)
    assert answer.status_code == 202, answer.json
    assert answer.json["queued"] == 2
    assert [(r["index"], r["error"]) for r in answer.json["rejected"]] == [(1, "target_too_short"),
                                                                            (2, "target_suppressed")]
    assert answer.headers["X-Credits-Remaining"] == "98"  # the two queued scans only


def test_the_operator_records_lists_and_withdraws_opt_outs(app):
    added = json.loads(cli(app, "suppressions", "add", "email", "jane.doe@example.com", "--json").output)
    assert added["ok"] is True and added["added"] is True and len(added["target_hash"]) == 64
    listed = cli(app, "suppressions", "list", "--json")
    assert json.loads(listed.output)["suppressions"][0]["target_hash"] == added["target_hash"]
    assert "jane" not in listed.output and "jane" not in cli(app, "suppressions", "list").output
    removed = json.loads(cli(app, "suppressions", "remove", "email", "jane.doe@example.com", "--json").output)
    assert removed["removed"] is True
    with db.connection_context():
        assert Suppression.select().count() == 0


def test_a_target_that_is_not_one_is_one_line_and_exit_1(app):
    result = cli(app, "suppressions", "add", "email", "nobody")
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    not_a_kind = cli(app, "suppressions", "add", "fax", "123456")
    assert not_a_kind.exit_code != 0 and "Traceback" not in not_a_kind.output


def test_purpose_and_case_ref_travel_with_the_scan_and_can_be_required(app, client, account):
    created = client.post(SCAN, json={"target": "jane@example.com", "purpose": "kyc_aml", "case_ref": "C-7"},
                          headers=account.headers)
    assert created.status_code == 202
    read = client.get(f"{SCAN}/{created.json['scan_id']}", headers=account.headers).json
    assert (read["purpose"], read["case_ref"]) == ("kyc_aml", "C-7")
    listed = client.get("/api/v1/scans", headers=account.headers).json["data"][0]
    assert (listed["purpose"], listed["case_ref"]) == ("kyc_aml", "C-7")
    wrong = client.post(SCAN, json={"target": "jane@example.com", "purpose": "curiosity"}, headers=account.headers)
    assert (wrong.status_code, wrong.json["error"]) == (400, "invalid_purpose")
    setting = json.loads(cli(app, "customers", "settings", account.id, "--require-purpose", "on", "--json").output)
    assert setting["settings"]["require_purpose"] is True
    missing = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers)
    assert (missing.status_code, missing.json["error"]) == (400, "purpose_required")
    batch = client.post(BULK, json={"targets": [{"target": "john@example.com"}], "purpose": "other"},
                        headers=account.headers)
    assert batch.status_code == 202
    aggregate = client.get(f"{BULK}/{batch.json['bulk_id']}", headers=account.headers).json
    assert aggregate["scans"][0]["purpose"] == "other" and aggregate["scans"][0]["case_ref"] is None


def test_the_operator_sets_a_keys_payload_and_the_document_shows_thin_bodies(app, client, account):
    thin = json.loads(cli(app, "keys", "set-webhook", account.key.id, "--payload", "thin", "--json").output)
    assert thin["webhook_payload"] == "thin"
    nothing = cli(app, "keys", "set-webhook", account.key.id)
    assert nothing.exit_code == 1 and "--url" in nothing.output
    spec = client.get("/api/v1/openapi.json").get_json()
    thin_body = spec["components"]["schemas"]["WebhookCompletedThin"]["properties"]
    assert set(thin_body) == {"event", "scan_id", "bulk_id", "watch_id", "rerun_of", "livemode", "status", "purpose",
                              "case_ref", "completed_at"}
    assert "WebhookFailedThin" in spec["info"]["description"]


@pytest.mark.parametrize("added, submitted", [
    (("email", "Jane.Doe@Example.com"), {"target": "jane.doe@example.com"}),
    (("email", "jane.doe@example.com"), {"target": "Jane.Doe+promo@EXAMPLE.com"}),
    (("email", "jane.doe@gmail.com"), {"target": "janedoe@gmail.com"}),
    (("email", "janedoe@gmail.com"), {"target": "Jane.Doe@googlemail.com", "kind": "email"}),
    (("username", "@supphandle"), {"target": "SuppHandle"}),
    (("phone", "+1 (415) 555-0199"), {"target": "14155550199"}),
    (("phone", "+1.415.555.0199"), {"target": "+1 (415) 555-0199", "kind": "phone"}),
    (("phone", "+1-415-555-0199"), {"target": "+14155550199"}),
    (("username", "14155550199"), {"target": "+1 415 555 0199"}),
    (("username", "+14155550199"), {"target": "14155550199", "kind": "username"}),
    (("email", "josé.garcía@example.com"), {"target": unicodedata.normalize("NFD", "josé.garcía@example.com")}),
    (("email", unicodedata.normalize("NFD", "José.García@example.com")), {"target": "jose.garcia@example.com".replace(
        "jose.garcia", "josé.garcía")}),
    (("email", "pat@bücher.example"), {"target": "pat@xn--bcher-kva.example"}),
    (("email", "pat@xn--bcher-kva.example"), {"target": "Pat@BÜCHER.example"}),
    (("phone", "+44 20 7946 0958"), {"target": "+44 (0)20 7946 0958"}),
    (("phone", "+44 (0)20 7946 0958"), {"target": "+442079460958"}),
])
def test_an_opt_out_refuses_every_spelling_free_of_charge(app, client, account, added, submitted):
    recorded = cli(app, "suppressions", "add", *added, "--json")
    assert recorded.exit_code == 0, recorded.output
    refused = client.post(SCAN, json=submitted, headers=account.headers)
    assert (refused.status_code, refused.json["error"]) == (403, "target_suppressed")
    assert refused.headers["X-Credits-Remaining"] == "100"
    with db.connection_context():
        assert Scan.select().count() == 0 and CreditLedger.select().count() == 1  # the opening credit only


def test_a_bulk_calls_spellings_of_an_opt_out_are_free_and_the_ledger_holds_the_queued_only(app, client,
                                                                                           make_customer):
    acct = make_customer(tier="enterprise", credits=100)
    cli(app, "suppressions", "add", "email", "Jane.Doe@Example.com")
    cli(app, "suppressions", "add", "phone", "+1 (415) 555-0199")
    with db.connection_context():
        ledger_before = list(CreditLedger.select().where(CreditLedger.customer == acct.id).order_by(CreditLedger.id).dicts())
    targets = [{"target": "jane.doe@example.com"}, {"target": "bob@example.com"}, {"target": "14155550199"},
               {"target": "JANE.DOE+x@example.com", "kind": "email"}]
    answer = client.post(BULK, json={"targets": targets}, headers=acct.headers)
    assert answer.status_code == 202, answer.json
    assert [(r["index"], r["error"]) for r in answer.json["rejected"]] == [
        (0, "target_suppressed"), (2, "target_suppressed"), (3, "target_suppressed")]
    assert answer.json["queued"] == 1 and answer.headers["X-Credits-Remaining"] == "99"
    with db.connection_context():
        rows = list(CreditLedger.select().where(CreditLedger.customer == acct.id).order_by(CreditLedger.id).dicts())
        assert rows[:len(ledger_before)] == ledger_before
        assert [row["delta"] for row in rows[len(ledger_before):]] == [-1]  # the queued scan, nothing else
        assert charges.balance_of(acct.id) == charges.ledger_sum(acct.id) == 99


def test_an_opt_out_stored_before_still_refuses(client, account):
    with db.connection_context():  # as `suppressions add` stored it before: the local part's case kept
        Suppression.insert(target_hash=crypto.target_hash("email", "Jane.Doe@example.com"), kind="email").execute()
    refused = client.post(SCAN, json={"target": "Jane.Doe@EXAMPLE.COM"}, headers=account.headers)
    assert (refused.status_code, refused.json["error"]) == (403, "target_suppressed")


@pytest.mark.parametrize("stored, submitted", [
    (("email", unicodedata.normalize("NFD", "josé.garcía@example.com")), "josé.garcía@example.com"),
    (("email", "pat@bücher.example"), "pat@xn--bcher-kva.example"),
    (("phone", "+4402079460958"), "+44 20 7946 0958"),
])
def test_an_opt_out_stored_under_the_earlier_canonical_rule_still_refuses(client, account, stored, submitted):
    with db.connection_context():  # hashed before NFC, IDNA and trunk prefixes: only the hash is kept
        Suppression.insert(target_hash=crypto.target_hash(*stored), kind=stored[0]).execute()
    refused = client.post(SCAN, json={"target": submitted}, headers=account.headers)
    assert (refused.status_code, refused.json["error"]) == (403, "target_suppressed")


def test_the_operator_lists_and_removes_by_any_spelling(app):
    added = json.loads(cli(app, "suppressions", "add", "email", "Jane.Doe+news@gmail.com", "--json").output)
    cli(app, "suppressions", "add", "username", "@someone")
    found = json.loads(cli(app, "suppressions", "list", "email", "janedoe@GoogleMail.com", "--json").output)
    assert [row["target_hash"] for row in found["suppressions"]] == [added["target_hash"]]
    everything = json.loads(cli(app, "suppressions", "list", "--json").output)["suppressions"]
    assert len(everything) == 2
    half = cli(app, "suppressions", "list", "email")
    assert half.exit_code != 0 and "Traceback" not in half.output
    removed = json.loads(cli(app, "suppressions", "remove", "email", "J.A.N.E.DOE@gmail.com", "--json").output)
    assert removed["removed"] is True
    with db.connection_context():
        assert [row.kind for row in Suppression.select()] == ["username"]
