"""SQL lives in ``app/store/`` only: no service builds or runs a statement.

Read from the source (``ast``), as the layer test reads imports. A service may use
``app.plumbing.db``'s transactions (services own them) and the models' constants and row classes,
but not ``app.plumbing.db``'s statement helpers, not peewee, not a model's query methods, not a
row's ``save``, and no string that reads as SQL.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "app" / "services"

SQL_TEXT = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|RETURNING|ON\s+CONFLICT)\b",
                      re.DOTALL | re.IGNORECASE)
QUERY_METHODS = {"select", "update", "insert", "insert_many", "delete", "get_or_none", "get_by_id", "get", "create",
                 "raw", "bulk_create", "bulk_update", "replace", "insert_from", "get_or_create", "delete_by_id",
                 "count", "exists", "where"}
ROW_WRITES = {"save", "delete_instance"}
STATEMENT_HELPERS = {"db", "execute", "execute_batch", "columns", "table", "instance",
                     "insert_rows_statement", "repr_column"}

# Service modules still being moved behind the store (issue 27); empty when the move is done.
NOT_YET_MOVED: set[str] = set()


def _text_of(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        # a placeholder reads as a name: f"UPDATE {table} SET ..." is SQL
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return None


def sql_in(source: str) -> list[str]:
    """Each place in ``source`` that builds or runs a statement, as 'line: what'."""
    tree = ast.parse(source)
    models, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("app.tables"):
                models.update(a.asname or a.name for a in node.names if a.name[:1].isupper() and not a.name.isupper())
            if node.module == "app.plumbing.db":
                found += [f"{node.lineno}: app.plumbing.db.{a.name}" for a in node.names if a.name in STATEMENT_HELPERS]
            if node.module.split(".")[0] == "peewee":
                found.append(f"{node.lineno}: peewee")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: peewee" for a in node.names if a.name.split(".")[0] == "peewee"]
    for node in ast.walk(tree):
        text = _text_of(node)
        if text is not None and SQL_TEXT.search(text):
            found.append(f"{node.lineno}: SQL text")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base, method = node.func.value, node.func.attr
            if isinstance(base, ast.Name) and base.id in models and method in QUERY_METHODS:
                found.append(f"{node.lineno}: {base.id}.{method}()")
            elif method in ROW_WRITES:
                found.append(f"{node.lineno}: .{method}()")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def test_the_scanner_finds_what_it_must():
    """The scanner itself, so that a broken one cannot pass the services vacuously."""
    source = '''
from app.plumbing.db import execute, transaction
from app.scans.models import Scan
from app.tables import COMPLETED
import peewee
A = "SELECT id FROM scans WHERE x = 1"
B = f"UPDATE {t} SET balance = 1"
def f(scan):
    Scan.select().where(Scan.id == 1)
    scan.save()
    {}.get("x")
    return COMPLETED
'''
    found = sql_in(source)
    assert [f.split(": ")[1] for f in found] == [
        "app.plumbing.db.execute", "peewee", "SQL text", "SQL text", "Scan.select()", ".save()"]
    assert sql_in("from app.plumbing.db import transaction\nx = {'a': 1}.get('a')\nnote = 'selected from the list'\n") == []


def test_no_service_holds_sql():
    offenders = {}
    for path in sorted(SERVICES.rglob("*.py")):  # every domain's folder
        if path.stem in NOT_YET_MOVED:
            continue
        found = sql_in(path.read_text(encoding="utf-8"))
        if found:
            offenders[path.stem] = found
    assert not offenders, f"SQL outside app/store/: {offenders}"


def test_the_list_of_modules_not_yet_moved_only_shrinks():
    """A module listed as not yet moved that holds no SQL any more must leave the list."""
    paths = {path.stem: path for path in SERVICES.rglob("*.py")}
    moved = [name for name in sorted(NOT_YET_MOVED) if not sql_in(paths[name].read_text())]
    assert not moved, f"these hold no SQL now: remove them from NOT_YET_MOVED: {moved}"


def test_the_store_imports_no_service():
    for path in sorted((ROOT / "app" / "store").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("app.services"), f"{path.name} imports {node.module}"


def replaced_text(source: str) -> list[int]:
    """The lines of ``source`` that rewrite a text with ``str.replace`` of one string by another
    (``datetime.replace(second=0)`` takes keywords: not one of them)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "replace" and len(node.args) >= 2
                  and any(isinstance(arg, (ast.Constant, ast.JoinedStr)) for arg in node.args[:2]))


def test_no_statement_in_the_store_is_rewritten_by_string_replacement():
    """A statement is built whole from its parts (named parameters, SQL given as arguments), never
    by replacing a piece of another statement's text, which breaks silently when that text changes."""
    assert replaced_text('W = COLUMNS.replace("livemode = ?", f"livemode = {mode}")\n'
                         'm = moment.replace(second=0, microsecond=0)\n') == [1]
    found = {path.name: lines for path in (ROOT / "app" / "store").rglob("*.py")
             if (lines := replaced_text(path.read_text()))}
    assert found == {}
