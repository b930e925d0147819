"""SQL lives in a domain's statements only (``app/<domain>/statements``): no rule, route or page of
a domain, and neither the call pipeline nor the periodic schedule, builds or runs a statement.

Read from the source (``ast``), as the layer test reads imports. A rule may use
``app.plumbing.db``'s transactions (rules own them) and the models' constants and row classes,
but not ``app.plumbing.db``'s statement helpers, not peewee, not a model's query methods, not a
row's ``save``, and no string that reads as SQL.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABOVE_THE_STATEMENTS = ("pipeline.py", "periodic.py", "recovery.py")  # the floor above's modules that call rules

SQL_TEXT = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|RETURNING|ON\s+CONFLICT)\b",
                      re.DOTALL | re.IGNORECASE)
QUERY_METHODS = {"select", "update", "insert", "insert_many", "delete", "get_or_none", "get_by_id", "get", "create",
                 "raw", "bulk_create", "bulk_update", "replace", "insert_from", "get_or_create", "delete_by_id",
                 "count", "exists", "where"}
ROW_WRITES = {"save", "delete_instance"}
STATEMENT_HELPERS = {"db", "execute", "execute_batch", "columns", "table", "instance",
                     "insert_rows_statement", "repr_column"}



def statements(path: Path) -> bool:
    return "statements" in path.parts or path.stem == "statements"


def models(path: Path) -> bool:
    return path.stem in ("models", "audit_models")


def above_the_statements() -> list[Path]:
    """Every module of every domain but its statements and models, and the floor above's callers of rules."""
    from tests.unit.test_layers import domains
    found = [p for d in domains(ROOT) for p in sorted((ROOT / "app" / d).rglob("*.py"))
             if not statements(p) and not models(p)]
    return found + [ROOT / "app" / name for name in ABOVE_THE_STATEMENTS]


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
            if node.module.split(".")[-1] in ("models", "audit_models"):
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
    """The scanner itself, so that a broken one cannot pass the rules vacuously."""
    source = '''
from app.plumbing.db import execute, transaction
from app.scans.models import COMPLETED, Scan
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


def test_no_rule_route_or_page_holds_sql():
    modules = above_the_statements()
    assert len(modules) > 50  # every domain's, not none
    offenders = {str(path.relative_to(ROOT)): found for path in modules
                 if (found := sql_in(path.read_text(encoding="utf-8")))}
    assert not offenders, f"SQL outside the statements: {offenders}"


def test_the_statements_import_no_rule():
    """A statement module imports models, the plumbing and other statements: never a rule, which
    would turn the layers upside down."""
    from tests.unit.test_layers import domains
    rule_modules = {f"app.{d}.{p.stem}" for d in domains(ROOT) for p in (ROOT / "app" / d).glob("*.py")
                    if not statements(p) and not models(p) and p.stem != "__init__"}
    for path in sorted((ROOT / "app").rglob("*.py")):
        if not statements(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
                assert not names & rule_modules, f"{path.relative_to(ROOT)} imports {names & rule_modules}"


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
    found = {path.name: lines for path in (ROOT / "app").rglob("*.py")
             if statements(path) and (lines := replaced_text(path.read_text()))}
    assert found == {}
