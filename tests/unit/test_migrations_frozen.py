"""A migration holds the values it used: ``app/migrations.py`` imports no live rule.

An old migration must mean what it meant when it was written. If it imported a service's
constant or function (the scopes, the quota counting, the result normaliser), a later change of
that rule would silently change what upgrading an old database does. Read from the source
(``ast``, imports inside functions included), as the layer test reads imports.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a migration may import: the standard library, the connection and the tables (each domain's
# models, the schema version's, the list of all), and the frozen copies made for it (which import
# nothing of the project).
ALLOWED = ("app.plumbing.db", "app.plumbing.models", "app.tables", "app.schema_version", "app.frozen",
           # The scopes declared now: what ``grant_declared_scopes``, which is no migration, gives the keys.
           "app.accounts.scopes")
MODELS = ("models", "audit_models")


def project_imports(path: Path) -> list[str]:
    """Every module ``path`` imports that is not the standard library's (``from x import y`` as x)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return [m for m in found if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"]


def allowed(module: str) -> bool:
    return (any(module == a or module.startswith(a + ".") for a in ALLOWED)
            or (module.startswith("app.") and module.rsplit(".", maxsplit=1)[-1] in MODELS))


def test_the_migrations_import_no_live_rule():
    wrong = [m for m in project_imports(ROOT / "app" / "migrations.py") if not allowed(m)]
    assert wrong == [], f"app/migrations.py imports live code: {wrong}; copy the values into the migration"


def test_the_frozen_copies_import_nothing_of_the_project():
    for path in sorted((ROOT / "app" / "frozen").glob("*.py")):
        assert project_imports(path) == [], f"{path.name} imports {project_imports(path)}"


def test_the_reader_sees_imports_inside_functions(tmp_path):
    """The checker itself, so that a broken reader cannot pass vacuously."""
    sample = tmp_path / "m.py"
    sample.write_text("import json\nfrom app.plumbing.db import db\ndef f():\n    from app.accounts.access import SCOPES\n"
                      "    import app.billing.quotas\n    from . import x\n")
    assert [m for m in project_imports(sample) if not allowed(m)] == [
        "app.accounts.access", "app.billing.quotas", "."]
