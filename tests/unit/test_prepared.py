"""Hot statements prepared once per PostgreSQL connection (``app.db.execute_prepared``)."""
import pytest

from app.db import _prepared_texts, execute_prepared, execute_prepared_batch
from app.extensions import db


def test_placeholders_become_numbered_parameters_and_the_name_follows_the_text():
    name, prepare, run = _prepared_texts("SELECT a FROM t WHERE x = ? AND y = ?")
    assert prepare == f"PREPARE {name} AS SELECT a FROM t WHERE x = $1 AND y = $2"
    assert run == f"EXECUTE {name} (%s, %s)"
    other, _, run_none = _prepared_texts("SELECT 1")
    assert other != name and run_none == f"EXECUTE {other}"


def test_prepared_once_and_prepared_again_when_the_server_forgot_it(app):
    with db.connection_context():
        assert execute_prepared("SELECT ? + 1", (41,)).fetchone()[0] == 42
        assert execute_prepared("SELECT ? * 2", (1,)).fetchone()[0] == 2
        # The server forgets it (a pooler's reset): prepared again, the caller sees nothing.
        db.execute_sql("DEALLOCATE ALL")
        assert execute_prepared("SELECT ? + 1", (1,)).fetchone()[0] == 2
        assert execute_prepared("SELECT ? + 1", (2,)).fetchone()[0] == 3
        # ... and so is every other statement it had prepared, even inside a transaction.
        with db.atomic():
            assert execute_prepared("SELECT ? * 2", (21,)).fetchone()[0] == 42


def test_a_statement_the_server_has_but_we_forgot_is_taken_as_prepared(app):
    """A PREPARE whose answer was lost (the link cut right after it, then restored): the server
    has the statement, our list does not. It answered 500 'already exists' before."""
    with db.connection_context():
        conn = db.connection()
        name, prepare, _ = _prepared_texts("SELECT ? + 100")
        db.execute_sql(prepare)  # prepared behind the list's back
        assert name not in db._prepared.get(db.conn_key(conn), set())
        assert execute_prepared("SELECT ? + 100", (1,)).fetchone()[0] == 101
        other, other_prepare, _ = _prepared_texts("SELECT ? - 100")
        db.execute_sql(other_prepare)
        rows = execute_prepared_batch([("SELECT ? + 100", (2,)), ("SELECT ? - 100", (200,)), ("SELECT ? * 3", (3,))])
        assert rows.fetchone()[0] == 9  # the last statement's rows
        assert {name, other} <= db._prepared[db.conn_key(conn)]


def test_a_real_error_is_not_retried(app):
    from peewee import DatabaseError
    with db.connection_context(), pytest.raises(DatabaseError) as raised:
        execute_prepared("SELECT * FROM no_such_table WHERE x = ?", (0,))
    assert "no_such_table" in str(raised.value)
