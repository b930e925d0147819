"""The service tests mirror the services: every ``app/services/<domain>/X.py`` has its
``tests/services/<domain>/test_X.py``, which imports ``app.services.<domain>.X`` to call it
directly, and every test module here is named after a service at the same place (this one
apart). A module still flat in ``app/services/`` has its tests flat in ``tests/services/``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "app" / "services"
TESTS = ROOT / "tests" / "services"
NOT_A_SERVICE_TEST = {"test_mirror"}


def services(root: Path = SERVICES) -> set[str]:
    """Each service module as its dotted name under ``app.services`` (``privacy.erasure``)."""
    return {".".join(p.relative_to(root).with_suffix("").parts) for p in root.rglob("*.py")
            if p.stem != "__init__"}


def mirror_of(service: str, tests: Path = TESTS) -> Path:
    """Where the tests of ``service`` (``privacy.erasure``) live: ``tests/privacy/test_erasure.py``."""
    *domain, name = service.split(".")
    return tests.joinpath(*domain, f"test_{name}.py")


def imported_services(path: Path) -> set[str]:
    """The ``app.services`` modules a test module imports, dotted under ``app.services``
    (``from app.services.privacy import erasure``, ``from app.privacy.erasure import x``,
    ``import app.privacy.erasure``; and a flat ``from app.services import x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["app", "services"]:
            package = node.module.split(".")[2:]
            if package:
                found.add(".".join(package))
            found |= {".".join([*package, alias.name]) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("app.services.") for a in node.names if a.name.startswith("app.services.")}
    return found


def test_every_service_has_its_test_module():
    missing = sorted(str(mirror_of(s).relative_to(ROOT)) for s in services() if not mirror_of(s).exists())
    assert missing == [], "services without their test module: " + ", ".join(missing)


def test_every_test_module_here_is_named_after_a_service_at_its_place():
    expected = {mirror_of(s) for s in services()}
    strays = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                    if p.stem not in NOT_A_SERVICE_TEST and p not in expected)
    assert strays == [], "test modules named after no service at their place: " + ", ".join(strays)


def test_every_test_module_imports_the_service_it_is_named_after():
    unrelated = sorted(str(mirror_of(s).relative_to(TESTS)) for s in services()
                       if mirror_of(s).exists() and s not in imported_services(mirror_of(s)))
    assert unrelated == [], "test modules that do not import their service: " + ", ".join(unrelated)


def test_the_import_reader_sees_every_form(tmp_path):
    """The checker itself, so that a broken reader cannot make the test above pass vacuously."""
    sample = tmp_path / "test_x.py"
    sample.write_text("from app.services import a, b as c\nfrom app.services.d import e\nimport app.services.f\n"
                      "from app.services.g import h, i as j\nfrom app.services.k.m import n\n"
                      "import app.services.p.q\nfrom app.tables import r\nimport app\n")
    assert {"a", "b", "d", "f", "g.h", "g.i", "k.m", "p.q"} <= imported_services(sample)
    assert not {"r", "models.r", "app"} & imported_services(sample)


def test_the_mirror_paths_follow_the_domain_folders(tmp_path):
    (tmp_path / "privacy").mkdir()
    for name in ("privacy/erasure.py", "privacy/__init__.py", "errors.py", "__init__.py"):
        (tmp_path / name).write_text("")
    assert services(tmp_path) == {"privacy.erasure", "errors"}
    assert mirror_of("privacy.erasure", tmp_path) == tmp_path / "privacy" / "test_erasure.py"
    assert mirror_of("errors", tmp_path) == tmp_path / "test_errors.py"
