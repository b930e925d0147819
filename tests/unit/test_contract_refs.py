"""Every rule id that the code, the tests and the internal docs cite resolves to a heading of
docs/contract.md; no citation points at a contract file outside the repository; and the texts
customers read cite no internal id at all."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "contract.md"
SCANNED_DIRS = ("app", "workers", "simulator", "tests", "bench", "docs")
SCANNED_FILES = ("README.md", "Makefile")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".lua", ".html", ".txt", ".cfg", ".toml"}
SKIPPED_PARTS = {"__pycache__", "results", "static"}  # raw bench outputs, vendored assets

# A section of the specification (§4.3), a decision (D13, D10a) or an engine clause (E2).
RULE_ID = re.compile(r"§\d+(?:\.\d+)*|\bD\d{1,2}a?\b|\bE\d\b")
HEADING = re.compile(r"^#{1,6}\s+(§\d+(?:\.\d+)*|D\d{1,2}a?|E\d)\b", re.MULTILINE)
# The contract's files as they exist outside this repository.
OUTSIDE = re.compile(r"\b(?:engine|decisions|public-scan-api)\.md\b|\bspec(?:ification)?:?\s*§")

CUSTOMER_DOCS = ("docs/client.md", "docs/webhooks.md")
CUSTOMER_README_SECTIONS = ("Calling the API", "Keys and access", "Webhooks", "Python client and command line")


def _cited_ids(text: str) -> set[str]:
    return {m.group(0).rstrip(".") for m in RULE_ID.finditer(text)}


def _scanned_files():
    for name in SCANNED_FILES:
        yield ROOT / name
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if (path.is_file() and path.suffix in SUFFIXES and path != CONTRACT
                    and not SKIPPED_PARTS & set(rel.parts) and path != Path(__file__).resolve()):
                yield path


def _headings() -> set[str]:
    return set(HEADING.findall(CONTRACT.read_text(encoding="utf-8")))


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def test_the_id_patterns_find_what_they_must():
    """The patterns themselves, so that a broken one cannot make the other tests pass vacuously."""
    assert _cited_ids("spec §4.3, D10a and D13; engine E2. End of §8.") == {"§4.3", "D10a", "D13", "E2", "§8"}
    assert _cited_ids("DD13 D130 E12 xE2 1E5 0xD1") == set()
    assert HEADING.findall("### §5.3 Keys\n## D10a. Config\n### E4. Receiver\nD9 in text\n") == ["§5.3", "D10a", "E4"]
    assert OUTSIDE.search("see engine.md E1") and OUTSIDE.search("(spec §8)") and OUTSIDE.search("decisions.md")
    assert not OUTSIDE.search('salt=b"public-scan-api"') and not OUTSIDE.search("§8 defaults")


def test_the_contract_has_every_rule_of_the_three_sources():
    headings = _headings()
    expected = {f"D{n}" for n in range(1, 19)} | {"D10a"} | {f"E{n}" for n in range(1, 6)}
    expected |= {f"§{n}" for n in range(1, 10)} | {"§2.1", "§2.2", "§2.3", "§4.1", "§4.2", "§4.3", "§4.4"}
    expected |= {f"§5.{n}" for n in range(1, 8)} | {f"§6.{n}" for n in range(1, 6)}
    assert expected <= headings, f"missing headings in docs/contract.md: {sorted(expected - headings)}"


def test_every_cited_rule_id_is_a_heading_of_the_contract():
    headings = _headings()
    unresolved = {}
    scanned = 0
    for path in _scanned_files():
        scanned += 1
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for rule in _cited_ids(line) - headings:
                unresolved.setdefault(rule, []).append(f"{path.relative_to(ROOT)}:{number}")
    assert scanned > 100  # the walk really covered the code and the tests
    assert not unresolved, "rule ids with no heading in docs/contract.md: " + "; ".join(
        f"{rule} ({', '.join(where[:3])})" for rule, where in sorted(unresolved.items()))


def test_no_citation_points_outside_the_repository():
    outside = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
               for path in _scanned_files()
               for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
               if OUTSIDE.search(line)]
    assert not outside, "cite docs/contract.md ids instead:\n" + "\n".join(outside)


def test_texts_customers_read_cite_no_internal_rule_id():
    texts = {name: (ROOT / name).read_text(encoding="utf-8") for name in CUSTOMER_DOCS}
    texts.update({f"README.md '## {title}'": _readme_section(title) for title in CUSTOMER_README_SECTIONS})
    cited = {name: sorted(_cited_ids(text)) for name, text in texts.items() if _cited_ids(text)}
    assert not cited, f"internal rule ids in customer-facing text: {cited}"
