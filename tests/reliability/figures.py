"""Figures of the reliability and security tests, written where docs/reliability.md reads them.

Every test of ``tests/reliability`` and ``tests/security`` takes the ``figures`` fixture, fills
what it measured (requests sent, concurrency, faults injected, inputs tried, failures
observed...) and the fixture adds the duration, the outcome and the database, prints one
JSON line and merges the entry into ``artifacts/reliability/figures-<database>.json``.

``python -m tests.reliability.figures`` prints the figures of the last runs as the Markdown
table of docs/reliability.md.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "reliability"
COLUMNS = ("requests", "concurrency", "faults", "inputs", "failures")


def database_kind() -> str:
    """``postgresql``: a server of the machine (TEST_DATABASE_URL); ``embedded``: the session's own."""
    return "postgresql" if os.environ.get("TEST_DATABASE_URL") else "embedded"


def figures_file(kind: str | None = None) -> Path:
    return ARTIFACTS / f"figures-{kind or database_kind()}.json"


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def record(nodeid: str, entry: dict) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = figures_file()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("tests", {})[nodeid] = entry
    data["machine"] = machine()
    data["updated_at"] = entry["finished_at"]
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))


def make_fixture():
    @pytest.fixture
    def figures(request):
        """A dict the test fills with what it measured; written out when the test ends."""
        entry: dict = {}
        started = time.monotonic()
        yield entry
        report = getattr(request.node, "rep_call", None)
        entry.update(
            duration_s=round(time.monotonic() - started, 2),
            outcome=report.outcome if report is not None else "error",
            database=database_kind(),
            finished_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        nodeid = request.node.nodeid
        if os.environ.get("FUZZ_EXAMPLES"):  # `make fuzz`: kept apart from the CI-sized run
            nodeid += f" (FUZZ_EXAMPLES={os.environ['FUZZ_EXAMPLES']})"
        record(nodeid, entry)
        print(f"\nFIGURES {nodeid} {json.dumps(entry, sort_keys=True, default=str)}")
    return figures


def stash_report(item, call, outcome):
    """For ``pytest_runtest_makereport``: keep each phase's report on the item."""
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# --- the Markdown table of docs/reliability.md ---------------------------------------------

def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")


def table(kinds=("embedded", "postgresql")) -> str:
    loaded = {}
    for kind in kinds:
        try:
            loaded[kind] = json.loads(figures_file(kind).read_text())
        except (OSError, ValueError):
            continue
    nodeids = sorted({n for data in loaded.values() for n in data.get("tests", {})})
    lines = ["| Test | DB | Outcome | Requests | Concurrency | Faults | Inputs | Failures | Duration (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for nodeid in nodeids:
        for kind, data in loaded.items():
            entry = data["tests"].get(nodeid)
            if entry is None:
                continue
            lines.append("| " + " | ".join([f"`{nodeid.split('::', 1)[1]}`", kind, entry.get("outcome", "")]
                                           + [_cell(entry.get(c)) for c in COLUMNS]
                                           + [_cell(entry.get("duration_s"))]) + " |")
    for kind, data in loaded.items():
        lines.append(f"\n{kind}: last run {data.get('updated_at')}, {data.get('machine')}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
