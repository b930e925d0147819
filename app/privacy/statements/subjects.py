"""A data subject's traces (D32): the scans that still hold a target, read a batch at a time to be
matched by the service (a target is matched by its canonical form, which SQL cannot compute: the
keyed hashes need the server's secret), and the activity entries that looked a person up."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from app.activity.models import ActivityEntry
from app.plumbing.db import execute, table
from app.scans.models import Scan

HELD_COLUMNS = ("id", "customer_id", "livemode", "kind", "target", "status", "created_at", "completed_at",
                "failed_at", "purpose", "case_ref", "bulk_id", "watch_id")


def scans_holding_targets(kinds: Sequence[str], *, batch: int = 1000) -> Iterator[tuple]:
    """Every scan of ``kinds`` that still holds its target (not erased), by id, ``batch`` rows a
    round trip (``HELD_COLUMNS``)."""
    after = ""
    while True:
        rows = execute(f"SELECT {', '.join(HELD_COLUMNS)} FROM {table(Scan)} WHERE target IS NOT NULL "
                       f"AND kind = ANY(?) AND id > ? ORDER BY id LIMIT ?", (list(kinds), after, batch)).fetchall()
        yield from rows
        if len(rows) < batch:
            return
        after = rows[-1][0]


LOOKUP_COLUMNS = ("customer_id", "livemode", "created_at", "action", "resource_id", "key_id", "user_email",
                  "status", "purpose", "case_ref")


def lookups(target_hashes: Sequence[str]) -> list[tuple]:
    """Every customer's activity entries that looked up a target kept under any of ``target_hashes``
    (the GIN index), oldest first (``LOOKUP_COLUMNS``)."""
    return execute(f"SELECT {', '.join(LOOKUP_COLUMNS)} FROM {table(ActivityEntry)} "
                   f"WHERE target_hashes IS NOT NULL AND target_hashes && ?::varchar(64)[] "
                   f"ORDER BY created_at, id", (list(target_hashes),)).fetchall()
