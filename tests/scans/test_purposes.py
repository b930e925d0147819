"""Purpose and case reference (app.scans.purposes): the fixed list, the customer's requirement,
the reference's shape; and a creation stores them with every scan it makes (D20)."""
import pytest

from app.accounts import admin
from app.intake import creation
from app.plumbing.errors import InvalidRequest
from app.scans import purposes
from app.scans.models import BulkBatch, Scan
from tests.domain_fixtures import books_of, new_customer


def test_every_listed_purpose_and_none_pass():
    for purpose in purposes.PURPOSES:
        assert purposes.check(purpose, "CASE-1", required=True) == (purpose, "CASE-1")
    assert purposes.check(None, None, required=False) == (None, None)


@pytest.mark.parametrize(("purpose", "case_ref", "required", "code"), [
    ("curiosity", None, False, "invalid_purpose"),
    ("FRAUD_PREVENTION", None, False, "invalid_purpose"),
    (7, None, False, "invalid_purpose"),
    (None, None, True, "purpose_required"),
    ("other", "", False, "invalid_request"),
    ("other", "x" * 129, False, "invalid_request"),
    ("other", "line\nbreak", False, "invalid_request"),
    ("other", 42, False, "invalid_request"),
])
def test_refusals_name_their_reason(purpose, case_ref, required, code):
    with pytest.raises(InvalidRequest) as refused:
        purposes.check(purpose, case_ref, required=required)
    assert refused.value.code == code


def test_a_creation_stores_them_and_a_required_purpose_is_enforced(conn):
    customer, key = new_customer(tier="enterprise", credits=10)
    creation.create_scan(customer, key.id, "jane@example.com", None, request_id="r1", purpose="kyc_aml",
                      case_ref="C-1")
    batch = creation.create_bulk(customer, key.id, [{"target": "john@example.com"}, {"target": "+447700900123"}],
                              request_id="r2", purpose="due_diligence", case_ref="C-2").body
    assert {(s.purpose, s.case_ref) for s in Scan.select()} == {("kyc_aml", "C-1"), ("due_diligence", "C-2")}
    assert (BulkBatch.get_by_id(batch["bulk_id"]).purpose, BulkBatch.get_by_id(batch["bulk_id"]).case_ref) \
        == ("due_diligence", "C-2")
    admin.set_settings(customer.id, require_purpose=True)
    customer = admin.get_customer(customer.id)
    before = books_of(customer.id)
    with pytest.raises(InvalidRequest) as refused:
        creation.create_scan(customer, key.id, "jane@example.com", None, request_id="r3")
    assert refused.value.code == "purpose_required"
    assert books_of(customer.id) == before  # refused before anything was reserved
