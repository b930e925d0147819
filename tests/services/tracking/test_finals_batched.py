"""A batch look's finals are written in a number of statements that does not grow with the scans
or with the customers they belong to (issue 49: with 100 customers a batch of 100 finals was 702
statements, each parsed and planned, which made PostgreSQL the cost of many customers)."""
from collections import Counter

import pytest

from app.db import transaction
from app.extensions import db
from app.models import Customer, Event, Scan
from app.services.tracking import tracking
from tests.api.helpers import assert_counters_match
from tests.services.conftest import new_customer, new_scan

RESULT = {"profiles": [], "contacts": [], "breaches": []}


@pytest.fixture
def statements(monkeypatch):
    """The statements the database object runs from now on (their first words)."""
    calls = []
    database = db.obj
    execute_sql = database.execute_sql
    monkeypatch.setattr(database, "execute_sql",
                        lambda sql, *a, **k: calls.append(" ".join(sql.split()[:3])) or execute_sql(sql, *a, **k))
    return calls


def _scans(customers: int, n: int):
    owners = [new_customer(credits=100, inflight=100, hour=1000, day=1000) for _ in range(customers)]
    return [new_scan(*owners[i % customers], target=f"batch{i}@example.com") for i in range(n)]


def _finish_all(scans, statements) -> int:
    finals = [tracking.completed(s.id, RESULT) if i % 3 else tracking.failed(s.id, "engine_failed", "no")
              for i, s in enumerate(scans)]
    statements.clear()
    with transaction():
        assert len(tracking.record_finals(finals)) == len(scans)
    return len(statements)


def test_finals_take_as_many_statements_for_one_customer_as_for_many(conn, simulator, statements):
    one = _finish_all(_scans(1, 24), statements)
    many_scans = _scans(12, 24)
    many = _finish_all(many_scans, statements)
    assert one == many <= 12, Counter(statements)
    # And each was written as one at a time wrote it: final, out of flight, its events stored.
    rows = {s.id: s for s in Scan.select().where(Scan.id.in_([s.id for s in many_scans]))}
    assert Counter(s.status for s in rows.values()) == {"completed": 16, "failed": 8}
    assert all(s.completed_at and s.recipes_done == s.recipes_total for s in rows.values() if s.status == "completed")
    assert all(s.failure_code == "engine_failed" and s.failure_message == "no" and s.completed_at is None
               for s in rows.values() if s.status == "failed")
    for customer_id in {s.customer_id for s in rows.values()}:
        assert Customer.get_by_id(customer_id).in_flight == 0
        assert_counters_match(customer_id)
    kinds = Counter(e.kind for e in Event.select().where(Event.scan_id.in_(list(rows))))
    assert kinds["scan.completed"] == 16 and kinds["scan.failed"] == 8 and kinds["scan.running"] == 24


def test_a_scan_final_already_is_left_as_it_is_by_a_batch(conn, simulator):
    first, second = _scans(1, 2)
    assert tracking.finish([tracking.failed(first.id, "engine_failed", "first")]) == 1
    assert tracking.finish([tracking.completed(first.id, RESULT), tracking.completed(second.id, RESULT)]) == 1
    first, second = Scan.get_by_id(first.id), Scan.get_by_id(second.id)
    assert (first.status, first.failure_message, first.completed_at) == ("failed", "first", None)
    assert second.status == "completed"
    assert Customer.get_by_id(first.customer_id).in_flight == 0
