"""Hot statements prepared once per PostgreSQL connection (``app.db.execute_prepared``)."""
import pytest

from app.db import _prepared_texts, execute_prepared
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


def test_a_real_error_is_not_retried(app):
    from peewee import DatabaseError
    with db.connection_context(), pytest.raises(DatabaseError) as raised:
        execute_prepared("SELECT * FROM no_such_table WHERE x = ?", (0,))
    assert "no_such_table" in str(raised.value)
