"""Layers point one way: api, portal, cli -> services -> models/db; workers -> services; the
portal and the API side by side (the portal never imports ``app.api``).

The import graph is read from the source (``ast``, function-level imports included),
never by importing it, so an import hidden in a function counts as much as one at the
top. A service must not reach Flask even through another module (an error class, the
metrics blueprint): the check follows the project's own imports transitively.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers")
FLASK = ("flask", "flask_wtf", "flask_smorest", "flask_limiter")
HTTP_LAYER = ("app.api", "app.portal", "app.cli", "app.errors", "app.metrics_http", "app.extensions")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            modules[module_name(path, root)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, anywhere in the file; ``from pkg import sub`` counts as ``pkg.sub``."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.add(candidate if candidate in modules else source)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def reach(edges: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module reachable from ``start`` through project modules, each with a path to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for target in sorted(edges.get(current, ())):
            if target not in paths:
                paths[target] = paths[current] + [target]
                if target in edges:
                    todo.append(target)
    return paths


def violations(root: Path) -> list[str]:
    edges = graph(root)
    found = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if within(module, ["app"]) and within(target, ["workers"]):
                found.append(f"{module} imports {target}: the app must not depend on the workers")
            if within(module, ["workers"]) and within(target, ["app.api", "app.portal", "app.cli"]):
                found.append(f"{module} imports {target}: workers go through services, not the HTTP layer")
            if within(module, ["app.portal"]) and within(target, ["app.api"]):
                found.append(f"{module} imports {target}: the portal reads services and shared modules, "
                             f"never the API's views")
            if within(module, ["app.tables", "app.plumbing.db", "app.plumbing.jobs"]) and within(
                    target, ["app.services", "app.api", "app.portal", "app.cli"]):
                found.append(f"{module} imports {target}: models, db and jobs sit below the services")
    for module in sorted(m for m in edges if within(m, ["app.services"])):
        for target, path in sorted(reach(edges, module).items()):
            if within(target, FLASK) or within(target, HTTP_LAYER) or within(target, ["workers"]):
                found.append(f"{module} reaches {target} ({' -> '.join(path)}): services stay free of Flask "
                             f"and of the layers above them")
    return found


def test_layers_point_one_way():
    assert violations(ROOT) == []


def test_a_wrong_way_import_hidden_in_a_function_is_found(tmp_path):
    for package in ("app", "app/services", "app/api", "app/portal", "workers"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "app/api/views.py").write_text("from flask import g\nfrom app.services import rules\n")
    (tmp_path / "app/services/rules.py").write_text("def f():\n    from workers.jobs import run\n    return run\n")
    (tmp_path / "app/services/prices.py").write_text("from app.services.rules import f\n"
                                                     "from .money import CENT\n")
    (tmp_path / "app/services/money.py").write_text("from app.api import views\nCENT = 1\n")
    (tmp_path / "workers/jobs.py").write_text("from app.services.rules import f\n")
    (tmp_path / "app/portal/page_modules.py").write_text("def names():\n    from app.api import views\n    return views\n")
    found = violations(tmp_path)
    assert any(v.startswith("app.portal.page_modules imports app.api.views: the portal") for v in found)
    assert "app.services.rules imports workers.jobs: the app must not depend on the workers" in found
    # Transitive: prices -> money -> the API views -> Flask.
    assert any(v.startswith("app.services.prices reaches flask (app.services.prices -> app.services.money -> "
                            "app.api.views -> flask)") for v in found)
    assert not any(v.startswith(("app.api.views", "workers.jobs")) for v in found)


def ungrouped(root: Path) -> list[str]:
    """What breaks the grouping by domain of ``app/services`` and ``app/store``: a module outside a
    domain folder (or two deep), a domain package that holds code (a re-export would give a module
    two names), a store domain no service domain has."""
    found = []
    for layer in ("services", "store"):
        base = root / "app" / layer
        for path in sorted(base.rglob("*.py")):
            depth = len(path.relative_to(base).parts)
            if path.name == "__init__.py" and depth == 2:
                body = ast.parse(path.read_text()).body
                if [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]:
                    found.append(f"{path.relative_to(root)} holds code: a domain package only says what it holds")
            elif depth != 2 and path.relative_to(base) != Path("__init__.py"):
                found.append(f"{path.relative_to(root)} is not in a domain folder (app/{layer}/<domain>/)")
    services = {p.name for p in (root / "app/services").iterdir() if (p / "__init__.py").exists()}
    found += [f"app/store/{p.name}/ is no domain of app/services/" for p in sorted((root / "app/store").iterdir())
              if (p / "__init__.py").exists() and p.name not in services]
    return found


def test_services_and_store_are_grouped_by_domain():
    """docs/architecture.md's "where to find" table is only true while every module sits in its domain."""
    assert ungrouped(ROOT) == []


def test_the_grouping_check_finds_a_flat_module_and_a_re_export(tmp_path):
    for name in ("app/services/__init__.py", "app/services/billing/__init__.py", "app/billing/quotas.py",
                 "app/store/__init__.py", "app/store/billing/__init__.py", "app/store/billing/ledger.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('"""A domain."""\n')
    assert ungrouped(tmp_path) == []
    (tmp_path / "app/services/prices.py").write_text("")
    (tmp_path / "app/services/billing/__init__.py").write_text('"""Billing."""\nfrom . import quotas\n')
    (tmp_path / "app/store/mail").mkdir()
    (tmp_path / "app/store/mail/__init__.py").write_text("")
    assert ungrouped(tmp_path) == [
        "app/services/billing/__init__.py holds code: a domain package only says what it holds",
        "app/services/prices.py is not in a domain folder (app/services/<domain>/)",
        "app/store/mail/ is no domain of app/services/"]
