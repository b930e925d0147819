"""Erased scans' investigations still to delete at the engine (D25): written by erasure, removed
by the deletion job once the engine answered, listed by the recovery sweep."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.plumbing.db import execute, table
from app.plumbing.models import new_id
from app.privacy.models import EngineDeletion

ID_PREFIX = "edl"


def add(engine_ids: Sequence[str], now: datetime) -> list[str]:
    """One row per engine id, in the caller's transaction; the rows' ids."""
    ids = [new_id(ID_PREFIX) for _ in engine_ids]
    if ids:
        execute(f"INSERT INTO {table(EngineDeletion)} (id, engine_id, created_at) "
                f"SELECT * FROM unnest(?::varchar[], ?::varchar[], ?::timestamp[])",
                (ids, list(engine_ids), [now] * len(ids)))
    return ids


def engine_id_of(deletion_id: str) -> str | None:
    """The engine id a pending deletion is for; None once it is done."""
    row = execute(f"SELECT engine_id FROM {table(EngineDeletion)} WHERE id = ?", (deletion_id,)).fetchone()
    return row[0] if row else None


def remove(deletion_id: str) -> None:
    execute(f"DELETE FROM {table(EngineDeletion)} WHERE id = ?", (deletion_id,))


def pending(created_before: datetime | None, limit: int) -> list[str]:
    """Ids of up to ``limit`` deletions still to do, the oldest first: those written before
    ``created_before`` (any with None)."""
    rows = execute(f"SELECT id FROM {table(EngineDeletion)} WHERE ?::timestamp IS NULL OR created_at < ? "
                   f"ORDER BY created_at LIMIT ?", (created_before, created_before, limit)).fetchall()
    return [row[0] for row in rows]
