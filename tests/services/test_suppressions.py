"""Data subjects' opt-outs (services.suppressions): keyed hashes only, matched after the same
normalisation as creations (the domain's case does not count, the local part's does), refusing single creations and filtering bulk ones."""
import pytest

from app import runtime
from app.models import Suppression
from app.services import crypto, scans, suppressions
from app.services.errors import InvalidRequest, TargetSuppressed
from tests.services.conftest import books_of, new_customer


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
        scans.create_scan(customer, key.id, " jane.doe@EXAMPLE.com", None, request_id="req_t")
    assert books_of(customer.id) == before
