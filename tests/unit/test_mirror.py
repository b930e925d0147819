"""A domain's rule tests mirror its rules: every rule module ``app/<domain>/X.py`` (neither its
models, statements, routes, pages nor schemas) has its ``tests/<domain>/test_X.py``, which imports
``app.<domain>.X`` to call it directly, and every test module directly in ``tests/<domain>/`` is
named after a rule of that domain (its routes' and pages' tests are in ``routes/`` and ``pages/``
beside them). The plumbing's tests in ``tests/plumbing/`` are named after its modules too."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_RULES = {"__init__", "models", "audit_models", "schemas", "endpoint_schemas", "routes", "pages", "statements"}


def domain_names(root: Path = ROOT) -> list[str]:
    from tests.unit.test_layers import domains
    return sorted(domains(root))


def rules(root: Path = ROOT) -> set[str]:
    """Each rule module as ``domain.name`` (``privacy.erasure``)."""
    return {f"{domain}.{path.stem}" for domain in domain_names(root)
            for path in (root / "app" / domain).glob("*.py") if path.stem not in NOT_RULES}


def mirror_of(rule: str, root: Path = ROOT) -> Path:
    """Where the tests of ``rule`` (``privacy.erasure``) live: ``tests/privacy/test_erasure.py``."""
    domain, name = rule.split(".")
    return root / "tests" / domain / f"test_{name}.py"


def imported_modules(path: Path) -> set[str]:
    """The ``app`` modules a test module imports, dotted under ``app``
    (``from app.privacy import erasure``, ``from app.privacy.erasure import x``,
    ``import app.privacy.erasure``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "app":
            package = node.module.split(".")[1:]
            if package:
                found.add(".".join(package))
            found |= {".".join([*package, alias.name]) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("app.") for a in node.names if a.name.startswith("app.")}
    return found


def test_every_rule_has_its_test_module():
    missing = sorted(str(mirror_of(r).relative_to(ROOT)) for r in rules() if not mirror_of(r).exists())
    assert missing == [], "rules without their test module: " + ", ".join(missing)


def test_every_test_module_of_a_domain_is_named_after_one_of_its_rules():
    expected = {mirror_of(r) for r in rules()}
    plumbing = {f"test_{p.stem}" for p in (ROOT / "app" / "plumbing").glob("*.py")}
    strays = sorted(str(p.relative_to(ROOT)) for domain in domain_names() for p in (ROOT / "tests" / domain)
                    .glob("test_*.py") if p not in expected)
    strays += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "plumbing").glob("test_*.py")
                     if p.stem not in plumbing)
    assert strays == [], "test modules named after no rule at their place: " + ", ".join(strays)


def test_every_test_module_imports_the_rule_it_is_named_after():
    unrelated = sorted(str(mirror_of(r).relative_to(ROOT)) for r in rules()
                       if mirror_of(r).exists() and r not in imported_modules(mirror_of(r)))
    assert unrelated == [], "test modules that do not import their rule: " + ", ".join(unrelated)


def test_the_import_reader_sees_every_form(tmp_path):
    """The checker itself, so that a broken reader cannot make the test above pass vacuously."""
    sample = tmp_path / "test_x.py"
    sample.write_text("from app.privacy import erasure, subjects as s\nimport app.scans.reads\n"
                      "from app.billing.charges import charge\nfrom tests.domain_fixtures import conn\nimport app\n")
    assert {"privacy.erasure", "privacy.subjects", "scans.reads", "billing.charges"} <= imported_modules(sample)
    assert not {"domain_fixtures", "app", ""} & imported_modules(sample)


def test_the_mirror_follows_the_domain_packages(tmp_path):
    for name in ("app/privacy/__init__.py", "app/privacy/erasure.py", "app/privacy/models.py",
                 "app/privacy/statements.py", "app/privacy/routes/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('"""Privacy."""\nOFFERS = ()\n' if name.endswith("__init__.py") else "")
    assert rules(tmp_path) == {"privacy.erasure"}
    assert mirror_of("privacy.erasure", tmp_path) == tmp_path / "tests" / "privacy" / "test_erasure.py"
