"""reads: the bodies of a scan and a batch in every state (D5, D7), the scans list by cursor
(D17), the portal's pages, and the served reads that authenticate, charge and read at once
(D3: 200, 403 and 404 charged; 402 not), test and live data apart (D15)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app import pipeline
from app.accounts import access, admin
from app.activity import entries
from app.billing import charges
from app.intake import creation
from app.plumbing.errors import (
    Forbidden,
    InsufficientBalance,
    InsufficientScope,
    InvalidRequest,
    IpNotAllowed,
    KeyExpired,
    NotAuthenticated,
    NotFound,
)
from app.plumbing.rawjson import parsed
from app.scans import reads
from app.scans.models import Scan
from app.tracking import states
from tests.domain_fixtures import books_of, new_customer, new_scan

NOW = datetime(2026, 11, 22, 12, 0, 0)
NOTES = {200: "GET /scan/x", 403: "GET /scan/x (403)", 404: "GET /scan/x (404)"}
CALLER = pipeline.Caller(access.SCANS_READ, "192.0.2.1")


def entry() -> entries.ReadEntry:
    return entries.read_entry(action="scan.read", resource_id="scn_x", client_address="192.0.2.1",
                               request_id="req_r", statuses=(404, 200, 403, 402))
RESULT = {"risk": {"score": 10, "band": "low"}}


def body(read: dict) -> dict:
    """A read body with its RawJSON result parsed."""
    return parsed(read)


def test_a_scan_in_flight_shows_its_eta_and_progress_and_a_final_one_its_outcome(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)
        Scan.update(eta_at=NOW + timedelta(seconds=12.2), recipes_total=6, recipes_done=2).where(
            Scan.id == scan.id).execute()
        frozen.tick(2)
        view = body(reads.read_scan(cust.id, scan.id))
        assert (view["status"], view["eta_seconds"], view["progress"]) == (
            "queued", 11, {"recipes_total": 6, "recipes_done": 2})
        assert "result" not in view and "failure" not in view
        frozen.tick(60)
        assert body(reads.read_scan(cust.id, scan.id))["eta_seconds"] == 0  # never negative
        states.complete(scan.id, RESULT)
        view = body(reads.read_scan(cust.id, scan.id))
        assert (view["status"], view["result"], view["completed_at"]) == ("completed", RESULT, "2026-11-22T12:01:02Z")
        assert "eta_seconds" not in view and "progress" not in view


def test_a_failed_scan_shows_its_failure(conn):
    cust, key = new_customer()
    scan = new_scan(cust, key)
    states.fail(scan.id, "engine_failed", "recipe 3 failed")
    view = body(reads.read_scan(cust.id, scan.id))
    assert view["failure"] == {"code": "engine_failed", "message": "recipe 3 failed"}
    assert view["failed_at"]


def test_another_customers_scan_is_forbidden_and_an_unknown_or_other_mode_one_not_found(conn):
    cust, key = new_customer()
    other, _ = new_customer()
    scan = new_scan(cust, key)
    with pytest.raises(Forbidden):
        reads.read_scan(other.id, scan.id)
    with pytest.raises(NotFound):
        reads.read_scan(cust.id, "scn_unknown")
    with pytest.raises(NotFound):
        reads.read_scan(cust.id, scan.id, livemode=False)  # a test key never sees live data


def test_a_batch_counts_its_scans_and_its_rejected_targets(conn):
    cust, key = new_customer(credits=10)
    outcome = creation.create_bulk(cust, key.id, [{"target": "a@example.com"}, {"target": "no"},
                                               {"target": "b@example.com"}], request_id="req_b")
    first, second = (s["scan_id"] for s in outcome.body["scans"])
    states.complete(first, RESULT)
    batch = body(reads.read_bulk(cust.id, outcome.body["bulk_id"]))
    assert (batch["total"], batch["queued"], batch["completed"], batch["rejected_count"], batch["all_done"]) == (
        3, 1, 1, 1, False)
    assert [s["scan_id"] for s in batch["scans"]] == [first, second]  # request order
    assert batch["scans"][0]["result"] == RESULT
    states.fail(second, "engine_failed", "no")
    assert body(reads.read_bulk(cust.id, outcome.body["bulk_id"]))["all_done"] is True
    with pytest.raises(Forbidden):
        reads.read_bulk(new_customer()[0].id, outcome.body["bulk_id"])


def test_the_list_pages_newest_first_by_an_exact_cursor(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(credits=20)
        ids = []
        for n in range(5):
            ids.append(new_scan(cust, key, f"user{n}@example.com").id)
            frozen.tick(1)
        first = reads.list_scans(cust.id, limit=2)
        assert [e["scan_id"] for e in first["data"]] == ids[:-3:-1] and first["has_more"] is True
        rest = reads.list_scans(cust.id, limit=10, starting_after=first["data"][-1]["scan_id"])
        assert [e["scan_id"] for e in rest["data"]] == ids[2::-1] and rest["has_more"] is False
        window = reads.list_scans(cust.id, created_after=NOW, created_before=NOW + timedelta(seconds=3))
        assert [e["scan_id"] for e in window["data"]] == [ids[2], ids[1]]  # both bounds exclusive
        states.complete(ids[0], RESULT)
        assert [e["scan_id"] for e in reads.list_scans(cust.id, status="completed")["data"]] == [ids[0]]
        assert reads.list_scans(cust.id, livemode=False)["data"] == []
        assert len(reads.list_scans(cust.id, limit=0)["data"]) == 1  # the limit is clamped to 1..100


def test_a_cursor_that_is_not_the_customers_is_refused(conn):
    cust, key = new_customer()
    other, other_key = new_customer()
    theirs = new_scan(other, other_key)
    for cursor in ("scn_unknown", theirs.id):
        with pytest.raises(InvalidRequest):
            reads.list_scans(cust.id, starting_after=cursor)


def test_portal_pages_filter_search_and_hide_other_customers(conn):
    cust, key = new_customer(credits=20)
    other, other_key = new_customer()
    mine = [new_scan(cust, key, t).id for t in ("alice@example.com", "bob@example.com", "+14155552671")]
    new_scan(other, other_key, "alice@example.com")
    page = reads.portal_scans(cust.id, search="alice", per_page=10)
    assert [s["scan_id"] for s in page.items] == [mine[0]] and page.total == 1
    assert reads.portal_scans(cust.id, kind="phone").total == 1
    assert reads.portal_scans(cust.id, search="%").total == 0  # LIKE wildcards are literal
    paged = reads.portal_scans(cust.id, page=2, per_page=2)
    assert (paged.total, paged.pages, len(paged.items)) == (3, 2, 1)
    with pytest.raises(InvalidRequest):
        reads.portal_scans(cust.id, search="a\x00b")
    detail = reads.scan_detail(cust.id, mine[0])
    assert detail["key"]["key_id"] == key.id and detail["target"] == "alice@example.com"
    with pytest.raises(NotFound):  # another customer's scan is not told apart from none
        reads.scan_detail(other.id, mine[0])


def test_the_portal_batch_page_counts_and_orders_its_scans(conn):
    cust, key = new_customer(credits=10)
    outcome = creation.create_bulk(cust, key.id, [{"target": "a@example.com"}, {"target": "b@example.com"},
                                               {"target": "x"}], request_id="req_b")
    states.complete(outcome.body["scans"][1]["scan_id"], RESULT)
    detail = reads.batch_detail(cust.id, outcome.body["bulk_id"])
    assert detail["counts"] == {"queued": 1, "running": 0, "completed": 1, "failed": 0}
    assert (detail["rejected_count"], detail["all_done"]) == (1, False)
    assert [s["target"] for s in detail["scans"]] == ["a@example.com", "b@example.com"]
    with pytest.raises(NotFound):
        reads.batch_detail(new_customer()[0].id, outcome.body["bulk_id"])


def test_the_portal_batch_page_says_where_in_the_request_each_refused_target_was(conn):
    """Refused targets are not kept: their places are the indexes no scan took, as the creation's
    ``rejected`` entries numbered them."""
    cust, key = new_customer(credits=10)
    outcome = creation.create_bulk(cust, key.id, [{"target": "x"}, {"target": "a@example.com"}, {"target": "y"},
                                               {"target": "b@example.com"}], request_id="req_b")
    detail = reads.batch_detail(cust.id, outcome.body["bulk_id"])
    assert detail["rejected_indexes"] == [entry["index"] for entry in outcome.body["rejected"]] == [0, 2]
    assert detail["rejected_count"] == 2


def _with_token(credits=10, livemode=True):
    cust, _ = new_customer(credits=credits)
    key, token = admin.issue_key(cust.id, "reader", livemode=livemode)
    return cust, key, token


def test_a_served_read_charges_one_credit_with_its_note(conn):
    cust, key, token = _with_token()
    scan = new_scan(cust, key)
    before = books_of(cust.id)
    served = pipeline.serve_scan_read(token, scan.id, "req_r", NOTES, caller=CALLER, entry=entry())
    assert served.error is None and served.body["scan_id"] == scan.id
    assert served.balance == before.balance - 1 == charges.balance_of(cust.id)
    assert served.usage.hour == 1
    assert books_of(cust.id).ledger_rows == before.ledger_rows + 1
    assert books_of(cust.id).ledger_sum == served.balance


@pytest.mark.parametrize("whose, error", [("other", Forbidden), ("none", NotFound)])
def test_a_refused_read_is_still_charged(conn, whose, error):
    cust, key, token = _with_token()
    other, other_key = new_customer()
    scan_id = new_scan(other, other_key).id if whose == "other" else "scn_unknown"
    served = pipeline.serve_scan_read(token, scan_id, "req_r", NOTES, caller=CALLER, entry=entry())
    assert isinstance(served.error, error) and served.body is None
    assert served.balance == charges.balance_of(cust.id) == 9


def test_a_read_without_credit_is_refused_uncharged(conn):
    cust, key, token = _with_token(credits=1)
    scan = new_scan(cust, key)  # spends the only credit
    served = pipeline.serve_scan_read(token, scan.id, "req_r", NOTES, caller=CALLER, entry=entry())
    assert isinstance(served.error, InsufficientBalance)
    assert served.balance is None and charges.balance_of(cust.id) == 0


def test_a_read_by_a_revoked_or_unknown_key_is_not_authenticated(conn):
    cust, key, token = _with_token()
    scan = new_scan(cust, key)
    admin.revoke_key(key.id)
    with pytest.raises(NotAuthenticated):
        pipeline.serve_scan_read(token, scan.id, "req_r", NOTES, caller=CALLER, entry=entry())
    with pytest.raises(NotAuthenticated):
        pipeline.serve_scan_read("service_live_nope", scan.id, "req_r", NOTES, caller=CALLER, entry=entry())
    assert charges.balance_of(cust.id) == 9


@pytest.mark.parametrize("rules, caller, error", [
    ({"scopes": [access.SCANS_WRITE]}, CALLER, InsufficientScope),
    ({"allowed_ips": "203.0.113.0/24"}, CALLER, IpNotAllowed),
    ({"allowed_ips": "203.0.113.0/24"}, pipeline.Caller(access.SCANS_READ, None), IpNotAllowed),
    ({"expires_in_days": 1}, CALLER, KeyExpired),
])
def test_a_read_by_a_key_d21_refuses_raises_its_refusal_and_charges_nothing(conn, rules, caller, error):
    cust, _ = new_customer(credits=10)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        key, token = admin.issue_key(cust.id, "restricted", **rules)
        scan = new_scan(cust, key)
        before = books_of(cust.id)
        frozen.move_to("2026-11-22 12:00:00")
        with pytest.raises(error) as refused:
            pipeline.serve_scan_read(token, scan.id, "req_r", NOTES, caller=caller, entry=entry())
        assert refused.value.key.id == key.id  # for the request's log line
        assert books_of(cust.id) == before


def test_a_test_key_reads_its_test_scans_free_and_never_live_ones(conn):
    cust, test_key, token = _with_token(livemode=False)
    live_key, _ = admin.issue_key(cust.id, "live")
    test_scan = new_scan(cust, test_key)
    live_scan = new_scan(cust, live_key)
    balance = charges.balance_of(cust.id)
    served = pipeline.serve_scan_read(token, test_scan.id, "req_r", NOTES, caller=CALLER, entry=entry())
    assert served.error is None and served.body["livemode"] is False
    assert isinstance(pipeline.serve_scan_read(token, live_scan.id, "req_r", NOTES, caller=CALLER,
                                            entry=entry()).error, NotFound)
    assert charges.balance_of(cust.id) == balance


def test_a_served_bulk_read_is_the_batch_body(conn):
    cust, key, token = _with_token()
    outcome = creation.create_bulk(cust, key.id, [{"target": "a@example.com"}, {"target": "b@example.com"}],
                                request_id="req_b")
    served = pipeline.serve_bulk_read(token, outcome.body["bulk_id"], "req_r", NOTES, caller=CALLER, entry=entry())
    assert served.error is None
    assert body(served.body) == body(reads.read_bulk(cust.id, outcome.body["bulk_id"]))
    assert served.balance == 10 - 2 - 1
