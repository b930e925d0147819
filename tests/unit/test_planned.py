"""planned: a hot statement run through a function made from it, planned once per server
connection (no PREPARE, which a pooler in transaction mode loses: D19), on the real PostgreSQL."""
from __future__ import annotations

from datetime import datetime

import pytest

from app.plumbing import planned
from app.plumbing.db import db, execute_named

STATEMENT = ("SELECT %(word)s::text || '%%' AS said, %(n)s + 1 AS next, %(at)s::timestamp AS at, "
             "%(nothing)s::text IS NULL AS empty FROM generate_series(1, %(rows)s) ORDER BY 1")
VALUES = {"word": "ok", "n": 41, "at": datetime(2026, 11, 22, 12, 0), "nothing": None, "rows": 2}


@pytest.fixture
def conn(app):
    with db.connection_context():
        yield


def functions(name: str) -> int:
    return db.execute_sql("SELECT count(*) FROM pg_proc WHERE proname = %s", (name,)).fetchone()[0]


def test_the_call_answers_what_the_statement_answers(conn):
    cursor = planned.execute_planned(STATEMENT, VALUES, probe={**VALUES, "rows": 0})
    assert cursor.fetchall() == execute_named(STATEMENT, VALUES).fetchall() == [
        ("ok%", 42, datetime(2026, 11, 22, 12, 0), True)] * 2


def test_a_changed_statement_ships_as_a_function_of_its_own_and_an_existing_one_is_reused(conn, monkeypatch):
    """A later rule change is a new statement: a new function beside the old one, which the old
    code still calls during a rolling deploy; another process finds the one already made."""
    first = planned.function_of(planned.execute_planned(STATEMENT, VALUES, probe=VALUES).query.decode())
    changed = STATEMENT.replace("+ 1", "+ 2")
    second = planned.function_of(planned.execute_planned(changed, VALUES, probe=VALUES).query.decode())
    assert first and second and first != second
    assert functions(first) == functions(second) == 1
    monkeypatch.setattr(planned, "_made", {})  # a new process
    assert planned.execute_planned(changed, VALUES, probe=VALUES).fetchall()[0][1] == 43
    assert functions(second) == 1


def test_a_function_dropped_since_it_was_made_is_made_again(conn):
    """A restored or reset database no longer has the function this process made: the call makes
    it again, once, instead of failing every read until a restart."""
    statement = STATEMENT + " LIMIT 5"
    planned.execute_planned(statement, VALUES, probe={**VALUES, "rows": 0}).fetchall()
    [name] = [planned.function_of(call) for (_, sql, _), call in planned._made.items() if sql == statement]
    db.execute_sql(f"DROP FUNCTION {name}")
    cursor = planned.execute_planned(statement, VALUES, probe={**VALUES, "rows": 0})
    assert cursor.fetchall() == [("ok%", 42, datetime(2026, 11, 22, 12, 0), True)] * 2
    assert functions(name) == 1
