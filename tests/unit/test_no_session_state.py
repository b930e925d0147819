"""D19: ``DATABASE_URL`` may name a pooler in transaction mode (PgBouncer), which runs each
transaction on whichever server connection is free: no SQL the service sends through it may leave
state on the server session for a later transaction (an SQL-level PREPARE, a session SET, a
session advisory lock, a session set_config, LISTEN). What needs a session of its own connects to
``DATABASE_DIRECT_URL`` and is listed in ``DIRECT_SESSION_MODULES``."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "app").rglob("*.py")), *sorted((ROOT / "workers").rglob("*.py"))]
# The embedded development server's own settings (ALTER SYSTEM), on a connection of its own.
NOT_THROUGH_THE_POOL = {ROOT / "app" / "plumbing" / "embedded.py"}
# Modules whose session state lives on a connection to DATABASE_DIRECT_URL: the LISTEN session
# of the waits and streams (D27), opened by app/events/waits.py with that URL.
DIRECT_SESSION_MODULES: set[Path] = {ROOT / "app" / "events" / "statements" / "signals.py"}

SESSION_STATE = {
    "an SQL-level PREPARE": re.compile(r"\bPREPARE\s+(\w+|\{\})\s+(\(|AS\b)", re.IGNORECASE),
    "a session SET (use SET LOCAL)": re.compile(r"(^|;)\s*SET\s+(?!LOCAL\b)(SESSION\s+)?(\w+|\{\})\s*(=|TO\b)",
                                                re.IGNORECASE),
    "a session advisory lock (use pg_advisory_xact_lock)": re.compile(r"pg_(try_)?advisory_lock(_shared)?\s*\(",
                                                                      re.IGNORECASE),
    "a session set_config (is_local false)": re.compile(r"set_config\s*\([^)]*,\s*false\s*\)", re.IGNORECASE),
    "LISTEN": re.compile(r"(^|;)\s*LISTEN\s", re.IGNORECASE),
}


def strings_of(path: Path) -> list[tuple[int, str]]:
    """Every string literal of ``path`` with its line; an f-string whole, ``{}`` for each value."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append((node.lineno, node.value))
    return found


def test_no_sql_leaves_state_on_a_pooled_session():
    found = []
    for path in SOURCES:
        if path in NOT_THROUGH_THE_POOL or path in DIRECT_SESSION_MODULES:
            continue
        for line, text in strings_of(path):
            found += [f"{path.relative_to(ROOT)}:{line}: {what}" for what, pattern in SESSION_STATE.items()
                      if pattern.search(text)]
    assert found == []


def test_the_guard_sees_what_it_looks_for():
    samples = {"PREPARE hot_1 AS SELECT 1": "an SQL-level PREPARE",
               "SET idle_in_transaction_session_timeout = 5": "a session SET (use SET LOCAL)",
               "SELECT 1; SET SESSION enable_sort TO off": "a session SET (use SET LOCAL)",
               "SELECT pg_advisory_lock(1)": "a session advisory lock (use pg_advisory_xact_lock)",
               "SELECT set_config('x.y', '1', false)": "a session set_config (is_local false)",
               "LISTEN scan_events": "LISTEN"}
    for text, what in samples.items():
        assert [name for name, pattern in SESSION_STATE.items() if pattern.search(text)] == [what], text
    allowed = ["SET LOCAL lock_timeout = 5", "UPDATE scan SET status = 'x'", "SELECT pg_advisory_xact_lock(1)",
               "SELECT set_config('x.y', '1', true)", "DO UPDATE SET scans = 1"]
    assert [text for text in allowed if any(p.search(text) for p in SESSION_STATE.values())] == []
