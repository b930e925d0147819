"""Data subjects' opt-outs (app.privacy.suppressions): keyed hashes only, matched by every spelling of
the identifier (case, an e-mail's +tag, Gmail's dots, a phone number's separators or a number written
as a username), opt-outs stored before still matching, refusing single creations and filtering bulk ones."""
from datetime import datetime

import pytest

from app.intake import creation
from app.plumbing import crypto, runtime
from app.plumbing.errors import InvalidRequest, TargetSuppressed
from app.privacy import suppressions
from app.privacy.models import Suppression
from app.privacy.statements import suppressions as suppression_store
from app.targets.identity import normalize_or_refuse
from tests.domain_fixtures import books_of, new_customer


def test_an_opt_out_is_stored_as_a_keyed_hash_only(conn):
    added = suppressions.add("email", "jane.doe@Example.COM")
    assert added["added"] is True and added["kind"] == "email"
    rows = list(Suppression.select().dicts())
    assert len(rows) == 1
    assert "jane" not in repr(rows).lower()  # nothing of the target itself
    assert rows[0]["target_hash"] == crypto.target_hash("email", "jane.doe@example.com")
    assert suppressions.add("email", "  jane.doe@example.com ")["added"] is False  # the same person


def test_the_hash_is_keyed_by_the_secret_and_the_kind(conn):
    one = crypto.target_hash("username", "janedoe")
    assert one != crypto.target_hash("email", "janedoe")
    saved = runtime.config["SECRET_KEY"]
    runtime.config["SECRET_KEY"] = "another-secret-key-of-at-least-32-characters"
    try:
        assert crypto.target_hash("username", "janedoe") != one  # without the key, no guessing
    finally:
        runtime.config["SECRET_KEY"] = saved


def test_remove_and_list(conn):
    suppressions.add("phone", "+44 7700 900123")
    suppressions.add("username", "@janedoe")
    listed = suppressions.list_all()
    assert [row["kind"] for row in listed] in (["username", "phone"], ["phone", "username"])
    assert suppressions.remove("phone", "+447700900123")["removed"] is True
    assert suppressions.remove("phone", "+447700900123")["removed"] is False
    assert [row["kind"] for row in suppressions.list_all()] == ["username"]


def test_a_target_that_is_not_one_is_refused_with_its_reason(conn):
    with pytest.raises(InvalidRequest) as refused:
        suppressions.add("email", "not-an-address")
    assert refused.value.code == "invalid_target"
    assert Suppression.select().count() == 0


def test_check_refuses_only_the_suppressed(conn):
    suppressions.add("email", "jane.doe@example.com")
    with pytest.raises(TargetSuppressed) as refused:
        suppressions.check("email", "jane.doe@example.com")
    assert refused.value.code == "target_suppressed" and "jane" not in refused.value.message
    suppressions.check("email", "john.doe@example.com")  # no opt-out: nothing raised


def test_a_bulk_calls_suppressed_targets_become_free_rejected_entries(conn):
    suppressions.add("email", "jane.doe@example.com")
    accepted = [(0, ("email", "john.doe@example.com")), (2, ("email", "jane.doe@example.com"))]
    kept, rejected = suppressions.split_suppressed(accepted)
    assert kept == [(0, ("email", "john.doe@example.com"))]
    assert rejected == [{"index": 2, "target": "jane.doe@example.com", "kind": "email",
                         "error": "target_suppressed", "message": suppressions.SUPPRESSED_MESSAGE}]
    assert suppressions.split_suppressed([]) == ([], [])


def test_a_creation_for_a_suppressed_target_reserves_and_charges_nothing(conn):
    customer, key = new_customer(credits=10)
    suppressions.add("email", "jane.doe@example.com")
    before = books_of(customer.id)
    with pytest.raises(TargetSuppressed):
        creation.create_scan(customer, key.id, " jane.doe@EXAMPLE.com", None, request_id="req_t")
    assert books_of(customer.id) == before


def refused(kind, target) -> bool:
    """Whether a creation of ``target`` (as a scan would store it) is refused by an opt-out."""
    kind, stored = normalize_or_refuse(target, kind)
    try:
        suppressions.check(kind, stored)
    except TargetSuppressed:
        return True
    return False


@pytest.mark.parametrize("added, candidates", [
    (("email", "Jane.Doe@Example.com"), [(None, "jane.doe@example.com"), (None, "JANE.DOE@example.com"),
                                         (None, "jane.doe+news@example.com"), ("email", "Jane.Doe+x@EXAMPLE.com")]),
    (("email", "jane.doe+news@example.com"), [(None, "jane.doe@example.com"), (None, "Jane.Doe+other@example.com")]),
    (("email", "jane.doe@gmail.com"), [(None, "janedoe@gmail.com"), (None, "J.A.N.E.Doe@gmail.com"),
                                       (None, "jane.doe@googlemail.com"), (None, "JaneDoe+spam@GoogleMail.com")]),
    (("email", "janedoe@googlemail.com"), [(None, "jane.doe@gmail.com")]),
    (("username", "@supphandle"), [(None, "SuppHandle"), (None, "@SUPPHANDLE"), ("username", "supphandle")]),
    (("phone", "+1 (415) 555-0199"), [(None, "14155550199"), ("username", "14155550199"), (None, "+1 415-555-0199"),
                                      ("phone", "+1 (415) 555 0199"), (None, "1-415-555-0199")]),
    (("phone", "+1.415.555.0199"), [(None, "+14155550199")]),
    (("username", "14155550199"), [(None, "+14155550199"), ("phone", "+1 (415) 555-0199"), (None, "14155550199")]),
    (("username", "+14155550199"), [(None, "+1 415 555 0199"), (None, "14155550199")]),
])
def test_an_opt_out_refuses_every_spelling_of_the_identifier(conn, added, candidates):
    suppressions.add(*added)
    for kind, target in candidates:
        assert refused(kind, target), target


@pytest.mark.parametrize("added, others", [
    (("email", "jane.doe@example.com"), [(None, "janedoe@example.com"), (None, "jane.doe@example.org")]),
    (("email", "jane.doe+news@example.com"), [(None, "john.doe+news@example.com")]),
    (("username", "1234567"), [(None, "+1234567")]),  # 7 digits: a handle, not the number
    (("phone", "+14155550199"), [(None, "14155550198"), (None, "4155550199")]),
])
def test_an_opt_out_refuses_nobody_else(conn, added, others):
    suppressions.add(*added)
    for kind, target in others:
        assert not refused(kind, target), target


@pytest.mark.parametrize("old_form, matched, not_matched", [
    # What the hash of the target as a creation stored it matched before keeps being refused.
    (("email", "Jane.Doe@example.com"), [(None, "Jane.Doe@EXAMPLE.com")], [(None, "john@example.com")]),
    (("username", "SuppHandle"), [(None, "@SuppHandle")], [(None, "OtherHandle")]),
    (("email", "jane.doe@gmail.com"), [(None, "jane.doe@gmail.com")], []),
])
def test_an_opt_out_stored_before_keeps_refusing_what_it_refused(conn, old_form, matched, not_matched):
    suppression_store.add(crypto.target_hash(*old_form), kind=old_form[0], now=datetime(2031, 1, 1))
    for kind, target in matched:
        assert refused(kind, target), target
    for kind, target in not_matched:
        assert not refused(kind, target), target
    # Removing it by the spelling it was added with withdraws it.
    assert suppressions.remove(*old_form)["removed"] is True
    assert Suppression.select().count() == 0


def test_adding_again_stores_the_key_every_spelling_matches(conn):
    suppression_store.add(crypto.target_hash("username", "SuppHandle"), kind="username", now=datetime(2031, 1, 1))
    assert not refused(None, "supphandle")  # the old entry: this spelling was never refused
    again = suppressions.add("username", "SuppHandle")
    assert again["added"] is True and again["target_hash"] == crypto.target_hash("username", "supphandle")
    assert refused(None, "supphandle") and refused(None, "SUPPHANDLE")


def test_one_opt_out_per_person_whatever_the_spelling(conn):
    first = suppressions.add("email", "Jane.Doe+news@GoogleMail.com")
    assert (first["kind"], first["added"]) == ("email", True)
    assert first["target_hash"] == crypto.target_hash("email", "janedoe@gmail.com")
    assert suppressions.add("email", "janedoe@gmail.com")["added"] is False
    assert suppressions.add("phone", "+1.415.555.0199")["target_hash"] == crypto.target_hash("phone", "+14155550199")
    number = suppressions.add("username", "14155550199")  # a number written as a handle: kept as the number
    assert (number["kind"], number["added"]) == ("phone", False)
    assert Suppression.select().count() == 2


def test_list_and_remove_take_any_spelling(conn):
    suppressions.add("email", "jane.doe@gmail.com")
    suppressions.add("phone", "+1 (415) 555-0199")
    assert len(suppressions.list_all()) == 2
    [row] = suppressions.list_all("email", "J.A.N.E.DOE+x@googlemail.com")
    assert row["target_hash"] == crypto.target_hash("email", "janedoe@gmail.com")
    assert [r["kind"] for r in suppressions.list_all("username", "14155550199")] == ["phone"]
    assert suppressions.list_all("email", "john@example.com") == []
    assert suppressions.remove("email", "JaneDoe@GMAIL.com")["removed"] is True
    assert suppressions.remove("phone", "+1.415.555.0199")["removed"] is True
    assert Suppression.select().count() == 0
    assert not refused(None, "jane.doe@gmail.com") and not refused(None, "+14155550199")


def test_a_bulk_calls_variant_spellings_are_free_rejected_entries(conn):
    customer, key = new_customer(tier="enterprise", credits=10)
    suppressions.add("email", "Jane.Doe@Example.com")
    suppressions.add("phone", "+1 (415) 555-0199")
    before = books_of(customer.id)
    outcome = creation.create_bulk(customer, key.id, [
        {"target": "jane.doe+x@example.com"}, {"target": "john@example.com"}, {"target": "14155550199"},
        {"target": "JANE.DOE@example.com"}], request_id="req_b")
    assert [(r["index"], r["error"]) for r in outcome.body["rejected"]] == [
        (0, "target_suppressed"), (2, "target_suppressed"), (3, "target_suppressed")]
    assert outcome.body["queued"] == 1
    after = books_of(customer.id)
    assert before.balance - after.balance == 1  # the one queued scan, nothing for the refused ones
    assert (after.scans - before.scans, after.ledger_sum) == (1, after.balance)
