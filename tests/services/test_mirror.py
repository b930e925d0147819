"""The service tests mirror the services: every ``app/services/X.py`` has its
``tests/services/test_X.py``, which imports ``app.services.X`` to call it directly, and
every test module here is named after a service (this one apart)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "app" / "services"
TESTS = ROOT / "tests" / "services"
NOT_A_SERVICE_TEST = {"test_mirror"}


def services() -> set[str]:
    return {p.stem for p in SERVICES.glob("*.py") if p.stem != "__init__"}


def imported_services(path: Path) -> set[str]:
    """The ``app.services`` modules a test module imports (``from app.services import x``,
    ``from app.services.x import ...``, ``import app.services.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "app.services":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app.services."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("app.services.")}
    return found


def test_every_service_has_its_test_module():
    missing = sorted(f"tests/services/test_{name}.py" for name in services() if not (TESTS / f"test_{name}.py").exists())
    assert missing == [], "services without their test module: " + ", ".join(missing)


def test_every_test_module_here_is_named_after_a_service():
    strays = sorted(p.name for p in TESTS.glob("test_*.py")
                    if p.stem not in NOT_A_SERVICE_TEST and p.stem.removeprefix("test_") not in services())
    assert strays == [], "test modules named after no service: " + ", ".join(strays)


def test_every_test_module_imports_the_service_it_is_named_after():
    unrelated = sorted(f"test_{name}.py" for name in services()
                       if (TESTS / f"test_{name}.py").exists()
                       and name not in imported_services(TESTS / f"test_{name}.py"))
    assert unrelated == [], "test modules that do not import their service: " + ", ".join(unrelated)


def test_the_import_reader_sees_every_form(tmp_path):
    """The checker itself, so that a broken reader cannot make the test above pass vacuously."""
    sample = tmp_path / "test_x.py"
    sample.write_text("from app.services import a, b as c\nfrom app.services.d import e\nimport app.services.f\n"
                      "from app.models import g\nimport app\n")
    assert imported_services(sample) == {"a", "b", "d", "f"}
