"""A hot statement run through a server-side function, so that PostgreSQL plans it once per
server connection instead of on every call, behind a transaction pooler too (D19).

Since the hot statements go as their text (no ``PREPARE``: a pooler in transaction mode does
not keep a session's state for its client), PostgreSQL parses and plans each call again; for the
served read that was about two thirds of the server's time (docs/performance.md, round 9 bis).
A PL/pgSQL function's statements are planned once per server connection and kept there by the
server itself, whichever client the pooler lends the connection to, so nothing relies on session
state.

The function is made from the statement the code has now (its text, its parameters' and result
columns' types), named after a digest of all of it, and created the first time a process needs
it if the database does not have it yet. So the statement's SQL stays written once, from its
one source (the served read's rule table), and a change of it ships with the code: the new code
makes a new function under a new name while the old code, still running during a rolling deploy,
keeps calling its own. Not a migration: a migration holds its own values (frozen), which would
freeze the rule table into the database.
"""
from __future__ import annotations

import hashlib
import re
import threading
from datetime import datetime

from peewee import ProgrammingError

from app.plumbing.db import db, execute_named, sqlstate

UNDEFINED_FUNCTION = "42883"  # SQLSTATE of a call of a function the database does not have

_PARAM = re.compile(r"%\((\w+)\)s")
# The call of the function made for (database, statement, parameters' types), in this process.
_made: dict[tuple[str, str, tuple[tuple[str, str], ...]], str] = {}
_lock = threading.Lock()


def _type_of(value) -> str:
    """The PostgreSQL type of a parameter, from its Python value (None: text, the only parameters
    that may be None are texts: addresses, request ids, notes)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, datetime):
        return "timestamp"
    if isinstance(value, list) and all(isinstance(v, bool) for v in value):
        return "boolean[]"
    if value is None or isinstance(value, str):
        return "text"
    raise TypeError(f"no PostgreSQL type for a parameter of type {type(value).__name__}")


def execute_planned(sql: str, params: dict, *, probe: dict):
    """Run ``sql`` (named parameters, as ``execute_named``) as a call of its function; returns
    the cursor. ``probe``: values for which the statement finds nothing and writes nothing,
    run once per process to learn its result columns' types when the function is made."""
    names = tuple(sorted(set(_PARAM.findall(sql))))
    signature = tuple((name, _type_of(params[name])) for name in names)
    made = (getattr(db.obj, "_bound_url", ""), sql, signature)
    call = _made.get(made)
    if call is None:
        call = _made[made] = _make(sql, signature, probe)
    if db.in_transaction():  # an error would end the caller's transaction: no second try here
        return execute_named(call, params)
    try:
        return execute_named(call, params)
    except ProgrammingError as exc:
        # The function is gone since this process made it (a restored or reset database): made
        # again, once. Any other error is the statement's own.
        if sqlstate(exc) != UNDEFINED_FUNCTION:
            raise
        call = _made[made] = _make(sql, signature, probe)
        return execute_named(call, params)


def _make(sql: str, signature, probe: dict) -> str:
    """Make ``sql``'s function unless the database has it; the statement that calls it."""
    with _lock, db.atomic():
        columns = _result_types(sql, dict(signature), probe)
        body = function_body(sql)
        arguments = ", ".join(f"p_{name} {kind}" for name, kind in signature)
        results = ", ".join(f"c{i} {kind}" for i, kind in enumerate(columns))
        digest = hashlib.sha256(f"{arguments}\n{results}\n{body}".encode()).hexdigest()[:16]
        name = f"planned_{digest}"
        # Two processes making the same function at once: the second waits, then finds it.
        execute_named("SELECT pg_advisory_xact_lock(hashtext(%(name)s))", {"name": name})
        exists = execute_named("SELECT 1 FROM pg_proc WHERE proname = %(name)s", {"name": name}).fetchone()
        if exists is None:
            execute_named(f"CREATE FUNCTION {name}({arguments}) RETURNS TABLE ({results}) LANGUAGE plpgsql "
                          f"AS $planned$ BEGIN RETURN QUERY {body}; END $planned$", {})
    passed = ", ".join(f"p_{name} => %({name})s::{kind}" for name, kind in signature)
    return f"SELECT * FROM {name}({passed})"


def function_body(sql: str) -> str:
    """The function's statement: ``sql`` with each parameter ``%(name)s`` its argument ``p_name``."""
    return _PARAM.sub(lambda m: f"p_{m.group(1)}", sql)


def function_of(call: str) -> str | None:
    """The name of the function a statement sent by ``execute_planned`` calls (None: not such a call)."""
    found = re.match(r"SELECT \* FROM (planned_[0-9a-f]{16})\(", call)
    return found.group(1) if found else None


def _result_types(sql: str, types: dict[str, str], probe: dict) -> list[str]:
    """The types of ``sql``'s result columns, as PostgreSQL names them (run with ``probe``, each
    parameter of its type in the function: an integer literal alone would be an ``integer``)."""
    cursor = execute_named(_PARAM.sub(lambda m: f"(%({m.group(1)})s::{types[m.group(1)]})", sql), probe)
    oids = [column.type_code for column in cursor.description]
    cursor.fetchall()
    rows = execute_named("SELECT format_type(o, NULL) FROM unnest(%(oids)s::oid[]) WITH ORDINALITY AS t(o, i) "
                         "ORDER BY i", {"oids": oids}).fetchall()
    return [row[0] for row in rows]
