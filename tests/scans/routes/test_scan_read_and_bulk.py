"""Reads in every state (D5), aggregate reads (§4.4, D7), ownership. Bulk creation is
``tests/intake/routes/test_bulk_create.py``'s."""
import logging
import re
from contextlib import contextmanager

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.accounts.models import CreditLedger
from app.activity.models import ActivityEntry
from app.billing.statements.served_reads import served_read_sql
from app.extensions import db
from app.pipeline import RULE_NAMES
from app.plumbing import planned
from app.plumbing.models import utcnow
from tests.api.helpers import assert_books_balance, balance, ledger, scans_of, status_of
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


@pytest.mark.config(ENGINE_POLL_SECONDS=1)  # look often enough to see the scan running
def test_read_in_every_state(client, account, jobs):
    with freeze_time("2026-11-21 12:00:00") as frozen:
        scan_id = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
        queued = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json
        assert queued["status"] == "queued"
        assert set(queued) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref",
                               "created_at", "eta_seconds", "progress"}
        assert queued["created_at"] == "2026-11-21T12:00:00Z"
        assert queued["eta_seconds"] > 0 and set(queued["progress"]) == {"recipes_total", "recipes_done"}
        assert jobs.run(frozen, until=lambda: status_of(scan_id) == "running")
        running = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json
        assert running["status"] == "running" and running["eta_seconds"] >= 0
        assert running["progress"]["recipes_total"] > 0
        assert jobs.run(frozen, until=lambda: status_of(scan_id) == "completed")
        done = client.get(f"{SCAN}/{scan_id}", headers=account.headers).json
        assert set(done) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref",
                             "created_at", "completed_at", "result"}
        assert ISO.match(done["completed_at"])
        failed_id = client.post(SCAN, json={"target": "fail.me@example.com"}, headers=account.headers).json["scan_id"]
        assert jobs.run(frozen, until=lambda: status_of(failed_id) == "failed")
        failed = client.get(f"{SCAN}/{failed_id}", headers=account.headers).json
        assert set(failed) == {"ok", "scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref",
                               "created_at", "failed_at", "failure"}
        assert failed["failure"]["code"] == "engine_failed" and ISO.match(failed["failed_at"])


def test_another_customers_scan_is_403_unknown_is_404_both_charged(client, account, make_customer):
    other = make_customer()
    scan_id = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    response = client.get(f"{SCAN}/{scan_id}", headers=other.headers)
    assert_error(response, 403, "forbidden")
    assert_error(client.get(f"{SCAN}/scn_doesnotexist", headers=other.headers), 404, "not_found")
    assert balance(other) == 98
    assert_books_balance(other)


# --- bulk ------------------------------------------------------------------------

def bulk(client, account, targets, **headers):
    return client.post(BULK, json={"targets": targets}, headers={**account.headers, **headers})


def test_aggregate_read_progresses_to_all_done(client, make_customer, jobs):
    acct = make_customer(credits=100)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        body = bulk(client, acct, [{"target": "a.person@example.com"}, {"target": "fail.x@example.com"},
                                   {"target": "+14155552671"}, {"target": "zz"}]).json
        first = client.get(f"{BULK}/{body['bulk_id']}", headers=acct.headers).json
        assert set(first) == {"ok", "bulk_id", "livemode", "total", "queued", "running", "completed", "failed",
                              "rejected_count", "all_done", "scans"}
        assert (first["total"], first["queued"], first["rejected_count"], first["all_done"]) == (4, 3, 1, False)
        assert all(set(s) == {"scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref"}
               for s in first["scans"])
        assert jobs.run(frozen, until=lambda: client.get(f"{BULK}/{body['bulk_id']}",
                                                         headers=acct.headers).json["all_done"])
        final = client.get(f"{BULK}/{body['bulk_id']}", headers=acct.headers).json
    assert (final["queued"], final["running"], final["completed"], final["failed"]) == (0, 0, 2, 1)
    assert final["rejected_count"] == 1
    assert final["total"] == sum(final[k] for k in ("queued", "running", "completed", "failed", "rejected_count"))
    assert [s["target"] for s in final["scans"]] == ["a.person@example.com", "fail.x@example.com", "+14155552671"]
    by_status = {s["status"]: s for s in final["scans"]}
    assert set(by_status["completed"]) == {"scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref",
                                           "completed_at", "result"}
    assert set(by_status["failed"]) == {"scan_id", "livemode", "status", "target", "kind", "purpose", "case_ref",
                                        "failed_at", "failure"}
    assert by_status["failed"]["failure"]["code"] == "engine_failed"
    for scan in final["scans"]:  # the same times as the scan's own read
        own = client.get(f"{SCAN}/{scan['scan_id']}", headers=acct.headers).json
        assert ISO.match(scan.get("completed_at") or scan["failed_at"])
        assert scan.get("completed_at") == own.get("completed_at") and scan.get("failed_at") == own.get("failed_at")
    phone = final["scans"][2]["result"]["phone_profile"]
    assert phone["e164"] == "+14155552671" and phone["country_code"] == 1 and phone["region"] == "US"


def test_another_customers_batch_is_403(client, account, make_customer):
    bulk_id = bulk(client, account, [{"target": "jane@example.com"}]).json["bulk_id"]
    other = make_customer()
    assert_error(client.get(f"{BULK}/{bulk_id}", headers=other.headers), 403, "forbidden")
    assert_error(client.get(f"{BULK}/blk_unknown", headers=other.headers), 404, "not_found")


@contextmanager
def count_queries():
    statements = []

    class Collector(logging.Handler):
        def emit(self, record):
            if record.name == "peewee":  # the statements; not peewee.pool's connection hand-overs
                statements.append(record.getMessage())

    logger = logging.getLogger("peewee")
    handler, level = Collector(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield statements
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.parametrize("size", [10, 100])
def test_bulk_and_aggregate_run_a_constant_number_of_statements(client, make_customer, size):
    acct = make_customer(tier="enterprise", credits=1000, inflight=200)
    targets = [{"target": f"user{i}@example.com"} for i in range(size)]
    with count_queries() as created:
        bulk_id = bulk(client, acct, targets).json["bulk_id"]
    with count_queries() as read:
        assert len(client.get(f"{BULK}/{bulk_id}", headers=acct.headers).json["scans"]) == size
    # Measured counts; the point is that they do not grow with the batch size.
    assert len(created) <= 16, created
    assert len(read) <= 10, read
    test_bulk_and_aggregate_run_a_constant_number_of_statements.counts = getattr(
        test_bulk_and_aggregate_run_a_constant_number_of_statements, "counts", {})
    test_bulk_and_aggregate_run_a_constant_number_of_statements.counts[size] = (len(created), len(read))
    if len(test_bulk_and_aggregate_run_a_constant_number_of_statements.counts) == 2:
        small, large = (test_bulk_and_aggregate_run_a_constant_number_of_statements.counts[s] for s in (10, 100))
        assert small == large


# --- reads authenticate, charge and read in one go (app.scans.reads.serve_*) -------------------

def test_reads_refused_for_balance_report_the_account_and_charge_nothing(client, make_customer):
    poor = make_customer(tier="enterprise", credits=2)
    bulk_id = bulk(client, poor, [{"target": "jane@example.com"}]).json["bulk_id"]
    scan_id = scans_of(poor)[0].id
    assert balance(poor) == 1
    response = client.get(f"{SCAN}/{scan_id}", headers=poor.headers)  # the last credit buys this read
    assert response.status_code == 200 and response.headers["X-Credits-Remaining"] == "0"
    charges = len(ledger(poor))
    for path in (f"{SCAN}/{scan_id}", f"{BULK}/{bulk_id}", f"{SCAN}/scn_unknown", f"{BULK}/blk_unknown"):
        response = client.get(path, headers=poor.headers)
        assert_error(response, 402, "insufficient_balance")
        assert response.headers["X-Credits-Remaining"] == "0"
        assert '"hour";r=' in response.headers["RateLimit"] and "RateLimit-Policy" in response.headers
    assert len(ledger(poor)) == charges
    assert_books_balance(poor)


def test_a_revoked_key_reads_nothing_and_is_not_charged(client, account):
    scan_id = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    bulk_id = bulk(client, account, [{"target": "joe@example.com"}]).json["bulk_id"]
    before = balance(account)
    with db.connection_context():
        admin.revoke_key(account.key.id)
    for path in (f"{SCAN}/{scan_id}", f"{BULK}/{bulk_id}"):
        response = client.get(path, headers=account.headers)
        assert_error(response, 401, "invalid_token")
        assert "X-Credits-Remaining" not in response.headers and "RateLimit" not in response.headers
    assert balance(account) == before


def test_read_answers_carry_the_balance_after_their_own_charge(client, account, make_customer):
    scan_id = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    other = make_customer()
    with freeze_time(utcnow()):  # one minute: the reads of one endpoint are one ledger row (D24)
        for n, (path, status) in enumerate(((f"{SCAN}/{scan_id}", 200), (f"{SCAN}/scn_unknown", 404)), start=1):
            before = balance(account)
            response = client.get(path, headers=account.headers)
            assert response.status_code == status
            assert response.headers["X-Credits-Remaining"] == str(before - 1) == str(balance(account))
            assert ledger(account)[-1] == (-n, "reads")
        response = client.get(f"{SCAN}/{scan_id}", headers=other.headers)
    assert response.status_code == 403 and response.headers["X-Credits-Remaining"] == str(balance(other))
    assert ledger(other)[-1] == (-1, "reads")
    assert_books_balance(account)


@pytest.mark.parametrize("what", ["scan", "bulk"])
def test_a_read_is_one_statement(client, account, what):
    bulk_id = bulk(client, account, [{"target": "jane@example.com"}, {"target": "joe@example.com"}]).json["bulk_id"]
    path = f"{BULK}/{bulk_id}" if what == "bulk" else f"{SCAN}/{scans_of(account)[0].id}"
    charged = served_read_sql(what == "bulk", RULE_NAMES)
    with freeze_time(utcnow()):  # one minute: both reads are summed in one ledger row (D24)
        rows = ledger_rows(account)
        assert client.get(path, headers=account.headers).status_code == 200  # the key's use noted (once a minute)
        with count_queries() as read:
            response = client.get(path, headers=account.headers)
    assert response.status_code == 200 and response.headers["X-Credits-Remaining"] == str(balance(account))
    # The read's one statement, which writes the activity log's entry (D20) too: one round trip,
    # a call of the function made from it (planned once per server connection; no PREPARE a
    # pooler in transaction mode would lose, D19).
    assert len(read) == 1 and planned.function_of(read[0]) is not None, read
    with db.connection_context():
        [(body,)] = db.execute_sql("SELECT prosrc FROM pg_proc WHERE proname = %s",
                                   (planned.function_of(read[0]),)).fetchall()
    assert planned.function_body(charged) in body
    [entry] = activity_entries(account)[-1:]
    assert (entry.action, entry.status, entry.credits, entry.key_id, entry.resource_id) == (
        "bulk.read" if what == "bulk" else "scan.read", 200, 1, account.key.id, path.rsplit("/", 1)[1])
    # The statement added the read to the minute's row that the first read began: no row of its own.
    [row] = ledger_rows(account)[len(rows):]
    assert (row.reason, row.reads, row.delta, row.balance_after) == ("reads", 2, -2, balance(account))
    assert row.note == ("GET /api/v1/scan/bulk/{bulk_id}" if what == "bulk" else "GET /api/v1/scan/{scan_id}")
    assert_books_balance(account)


def activity_entries(account) -> list[ActivityEntry]:
    with db.connection_context():
        return list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
                    .order_by(ActivityEntry.created_at, ActivityEntry.id))


def ledger_rows(account) -> list[CreditLedger]:
    with db.connection_context():
        return list(CreditLedger.select().where(CreditLedger.customer == account.id).order_by(CreditLedger.id))
