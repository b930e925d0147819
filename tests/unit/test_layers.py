"""The house: floors, one package per domain, layers inside each, and no arrow back up.

- The floor below, ``app/plumbing/``: the database and its transactions, settings, Redis, jobs,
  logging, metrics, domain errors. It imports no domain and nothing above it.
- The domains, ``app/<domain>/``, each one package: its models, statements, rules, and its HTTP
  parts (routes, pages, schemas). Inside one: routes/pages/schemas -> rules -> statements -> models.
  Another domain imports only what a domain lists in its ``OFFERS``.
- The floor above (``FLOOR_ABOVE``): what spans the domains (the call pipeline, the periodic schedule,
  the tables and their migrations, the actions table), then the HTTP shells and entry points (the app
  factory, ``app/api/``, ``app/portal/``, the CLI, the workers).

Drawn with each folder as one room (each package and each module of ``app``, and ``workers``,
``simulator``, ``bench``), the rooms stand on floors too: no circle of rooms but for the arrows
``ROOMS_BACK_UP`` names, each with why.

The import graph is read from the source (``ast``, function-level imports included), never by
importing it, so an import hidden in a function counts as much as one at the top. Domain rules
must not reach Flask even through another module: that check follows imports transitively.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers", "simulator", "bench")
FLASK = ("flask", "flask_wtf", "flask_smorest", "flask_limiter")
PLUMBING = "app.plumbing"
# What spans the domains: they may use every domain; no domain uses them.
FLOOR_ABOVE = ("app.declared", "app.pipeline", "app.periodic", "app.tables", "app.schema_version", "app.migrations", "app.frozen",
               "app.request_ids", "app.recovery")
# The HTTP shells and the entry points, on top of everything.
SHELLS = ("app", "app.api", "app.portal", "app.api_calls", "app.blueprints", "app.cli", "app.errors", "app.metrics_http",
          "app.extensions", "app.dev", "app.gunicorn_hooks", "workers")
MODELS = ("models", "audit_models")
HTTP_PARTS = ("routes", "pages", "schemas", "endpoint_schemas")


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


def imports_of(name: str, path: Path, modules: dict[str, Path], *, packages: bool = False) -> set[str]:
    """Every module ``name`` imports, anywhere in the file; ``from pkg import sub`` counts as ``pkg.sub``
    (and as ``pkg`` too with ``packages``: Python runs ``pkg/__init__.py`` first)."""
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
            if packages and source:
                found.add(source)
    return found


def graph(root: Path, *, packages: bool = False) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imports_of(name, path, modules, packages=packages) for name, path in modules.items()}


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def domains(root: Path) -> dict[str, tuple[str, ...]]:
    """Each domain package of ``app/`` with what it offers (its ``OFFERS``)."""
    found = {}
    for init in sorted((root / "app").glob("*/__init__.py")):
        name = init.parent.name
        if f"app.{name}" in (PLUMBING, *FLOOR_ABOVE, *SHELLS):
            continue
        offers: tuple[str, ...] = ()
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["OFFERS"]:
                offers = tuple(ast.literal_eval(node.value))
        found[name] = offers
    return found


def domain_of(module: str, known: dict) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "app" and parts[1] in known else None


def floor(module: str, known: dict) -> int:
    """0 plumbing; a domain's 1 models, 2 statements, 3 rules, 5 HTTP parts; 4 the floor above; 5 shells."""
    if within(module, [PLUMBING]):
        return 0
    domain = domain_of(module, known)
    if domain is not None:
        part = module.split(".")[2] if module.count(".") >= 2 else ""
        return {**dict.fromkeys(MODELS, 1), "statements": 2, **dict.fromkeys(HTTP_PARTS, 5)}.get(part, 3)
    if within(module, FLOOR_ABOVE):
        return 4
    return 5


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
    known = domains(root)
    http = ["app.api", "app.portal", "app.cli"]
    found = []
    for module, targets in sorted(edges.items()):
        if not within(module, ["app", "workers"]):
            continue
        for target in sorted(t for t in targets if t in edges):
            if within(module, ["app"]) and within(target, ["workers"]):
                found.append(f"{module} imports {target}: the app must not depend on the workers")
            if within(target, ["app"]) and floor(target, known) > floor(module, known):
                found.append(f"{module} imports {target}: an arrow back up (floor {floor(module, known)} to "
                             f"{floor(target, known)})")
            target_part = target.split(".")[2] if domain_of(target, known) and target.count(".") >= 2 else ""
            if within(module, ["workers"]) and (within(target, http) or target_part in ("routes", "pages")):
                found.append(f"{module} imports {target}: workers go through the rules, not the HTTP layer")
            module_part = module.split(".")[2] if domain_of(module, known) and module.count(".") >= 2 else ""
            if (within(module, ["app.portal"]) or module_part == "pages") and (
                    within(target, ["app.api"]) or target_part == "routes"):
                found.append(f"{module} imports {target}: the portal reads rules and shared modules, never the "
                             f"API's views")
    for module in sorted(m for m in edges if floor(m, known) in (1, 2, 3)):
        for target, path in sorted(reach(edges, module).items()):
            if within(target, FLASK):
                found.append(f"{module} reaches {target} ({' -> '.join(path)}): a domain's rules stay free of "
                             f"Flask")
    return found


def crossings(root: Path) -> list[str]:
    """Imports from one domain into another that the other does not offer."""
    edges, known = graph(root), domains(root)
    found = []
    for module, targets in sorted(edges.items()):
        source = domain_of(module, known)
        for target in sorted(targets):
            domain = domain_of(target, known)
            if source is None or domain is None or domain == source or target not in edges:
                continue
            offered = [f"app.{domain}.{name}" for name in known[domain]]
            if not within(target, offered):
                found.append(f"{module} imports {target}, which {domain} does not offer")
    return found


def misplaced(root: Path) -> list[str]:
    """A module outside every floor, a domain package holding code beside its ``OFFERS``, an offer
    of nothing, a module named after its own package or domain."""
    known = domains(root)
    found = []
    for name, path in sorted(project_modules(root).items()):
        if not within(name, ["app"]):
            continue
        parts = name.split(".")
        if not (within(name, [PLUMBING, *FLOOR_ABOVE]) or domain_of(name, known) or within(name, SHELLS[1:])
                or name == "app"):
            found.append(f"{name} is on no floor: plumbing, a domain or the floor above")
        if path.name != "__init__.py" and parts[-1] in (parts[-2], domain_of(name, known)):
            found.append(f"{name} is named after its own package")
    for domain, offers in known.items():
        init = root / "app" / domain / "__init__.py"
        for node in ast.parse(init.read_text()).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            offers_line = isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["OFFERS"]
            if not (docstring or offers_line):
                found.append(f"app/{domain}/__init__.py holds code: a domain package says what it holds and offers")
        for offer in offers:
            base = root / "app" / domain / offer.replace(".", "/")
            if not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()):
                found.append(f"app.{domain} offers {offer}, which it does not hold")
    return found


def circles(root: Path) -> list[list[str]]:
    """Every circle of imports between modules (strongly connected components of two or more)."""
    edges = graph(root)
    return strongly_connected({name: {t for t in targets if t in edges} for name, targets in edges.items()})


def room_of(module: str) -> str:
    """The room a module stands in, drawn with each folder as one room: each package of ``app`` (a
    domain, the plumbing, the toolkits) and each module of ``app`` (the app factory, ``app``, included)
    is a room; ``workers``, ``simulator`` and ``bench`` are one room each."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "app" else parts[0]


# The arrows between rooms that may run back up, each on purpose until it is moved, and why: none
# now. The domains' order is targets, accounts, events, activity, scans, billing, webhooks, sources,
# tracking, privacy, intake, watches (each uses only those before it). A new one fails the test; one
# no longer drawn fails it too, until it leaves this table.
ROOMS_BACK_UP: dict[tuple[str, str], str] = {}


def room_arrows(root: Path) -> dict[tuple[str, str], list[str]]:
    """Every arrow between two rooms, with the imports that draw it (``module -> module``)."""
    arrows: dict[tuple[str, str], list[str]] = {}
    edges = graph(root, packages=True)
    for module, targets in sorted(edges.items()):
        for target in sorted(t for t in targets if t in edges):
            if room_of(module) != room_of(target):
                arrows.setdefault((room_of(module), room_of(target)), []).append(f"{module} -> {target}")
    return arrows


def room_circles(root: Path, allowed=()) -> list[str]:
    """The arrows of every circle of rooms (strongly connected components of two or more), ``allowed``
    arrows left out, each with the imports that draw it."""
    arrows = {pair: why for pair, why in room_arrows(root).items() if pair not in allowed}
    rooms: dict[str, set[str]] = {}
    for source, target in arrows:
        rooms.setdefault(source, set()).add(target)
        rooms.setdefault(target, set())
    found = []
    for component in strongly_connected(rooms):
        for (source, target), imports in sorted(arrows.items()):
            if source in component and target in component:
                found.append(f"{source} -> {target} ({'; '.join(imports)})")
    return found


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more nodes (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_layers_point_one_way():
    assert violations(ROOT) == []


def test_a_domain_reaches_another_only_through_what_it_offers():
    assert crossings(ROOT) == []


def test_every_module_sits_on_a_floor_and_no_module_is_named_after_its_package():
    assert misplaced(ROOT) == []


def test_no_circle_of_imports():
    assert circles(ROOT) == []


def test_no_circle_of_rooms():
    """Drawn with each folder as one room, the rooms stand on floors: no arrow runs back up but the
    ones ``ROOMS_BACK_UP`` names, and each of those is still drawn (a move that ends one ends its line)."""
    assert room_circles(ROOT, allowed=ROOMS_BACK_UP) == []
    arrows = room_arrows(ROOT)
    assert [pair for pair in ROOMS_BACK_UP if pair not in arrows] == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for package in ("app", "workers", "simulator", "bench"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()


def test_the_checks_find_what_they_must(tmp_path):
    """The checks themselves, on a small house of their own, so that a broken one cannot pass vacuously."""
    _write(tmp_path, {
        "app/plumbing/__init__.py": "",
        "app/plumbing/db.py": "from app.billing import charges\n",
        "app/api/__init__.py": "",
        "app/api/views.py": "from flask import g\n",
        "app/pipeline.py": "from app.billing import charges\n",
        "app/billing/__init__.py": '"""Billing."""\nOFFERS = ("charges", "refunds")\n',
        "app/billing/charges.py": "def f():\n    from workers.jobs import run\n    return run\n",
        "app/billing/prices.py": "from app.billing.money import CENT\n",
        "app/billing/money.py": "from app.api import views\nfrom app import pipeline\nCENT = 1\n",
        "app/billing/billing.py": "",
        "app/billing/pages.py": "def names():\n    from app.billing import routes\n    return routes\n",
        "app/billing/routes.py": "",
        "app/scans/__init__.py": '"""Scans."""\nOFFERS = ()\nimport os\n',
        "app/scans/creation.py": "from app.billing import prices\nfrom app.billing import charges\n",
        "app/stray.py": "",
        "workers/jobs.py": "from app.billing import routes\n",
        "bench/a.py": "def f():\n    from bench import b\n",
        "bench/b.py": "from bench import a\n",
        # ``from app import`` reaches the app's factory, a room of its own.
        "app/tables.py": "from app import pipeline\n",
    })
    found = violations(tmp_path)
    assert "app.billing.charges imports workers.jobs: the app must not depend on the workers" in found
    assert "app.plumbing.db imports app.billing.charges: an arrow back up (floor 0 to 3)" in found
    assert "app.billing.money imports app.pipeline: an arrow back up (floor 3 to 4)" in found
    assert "workers.jobs imports app.billing.routes: workers go through the rules, not the HTTP layer" in found
    assert any(v.startswith("app.billing.pages imports app.billing.routes: the portal") for v in found)
    # Transitive: prices -> money -> the API views -> Flask.
    assert any(v.startswith("app.billing.prices reaches flask (app.billing.prices -> app.billing.money -> "
                            "app.api.views -> flask)") for v in found)
    assert not any(v.startswith(("app.api.views", "app.pipeline ")) for v in found)
    assert crossings(tmp_path) == ["app.scans.creation imports app.billing.prices, which billing does not offer"]
    assert sorted(misplaced(tmp_path)) == [
        "app.billing offers refunds, which it does not hold",
        "app.billing.billing is named after its own package",
        "app.stray is on no floor: plumbing, a domain or the floor above",
        "app/scans/__init__.py holds code: a domain package says what it holds and offers",
    ]
    assert circles(tmp_path) == [["bench.a", "bench.b"]]
    # Rooms: no circle of modules, but two of folders (billing's money uses the pipeline, which uses
    # billing's charges; billing's charges use the workers, which use billing's routes).
    assert room_circles(tmp_path) == [
        "app.billing -> app.pipeline (app.billing.money -> app.pipeline)",
        "app.billing -> workers (app.billing.charges -> workers.jobs)",
        "app.pipeline -> app.billing (app.pipeline -> app.billing; app.pipeline -> app.billing.charges)",
        "workers -> app.billing (workers.jobs -> app.billing; workers.jobs -> app.billing.routes)",
    ]
    assert ("app.tables", "app") in room_arrows(tmp_path)  # ``from app import``: the factory's room
    assert room_circles(tmp_path, allowed=[("app.billing", "app.pipeline"), ("app.billing", "workers")]) == []
