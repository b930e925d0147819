"""Data subjects' opt-outs (D20): keyed hashes of targets, never the targets."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from app.db import execute, table
from app.models import Suppression

ANY_OF = f"SELECT target_hash FROM {table(Suppression)} WHERE target_hash = ANY(?)"


def add(target_hash: str, *, kind: str, now: datetime) -> bool:
    """Record an opt-out; False when it was recorded already."""
    inserted = (Suppression.insert(target_hash=target_hash, kind=kind, created_at=now)
                .on_conflict_ignore().execute())
    return bool(inserted)


def remove(target_hash: str) -> bool:
    return bool(Suppression.delete().where(Suppression.target_hash == target_hash).execute())


def all_newest_first() -> list[Suppression]:
    return list(Suppression.select().order_by(Suppression.created_at.desc(), Suppression.target_hash))


def suppressed_among(hashes: Iterable[str]) -> set[str]:
    """Which of ``hashes`` are opted out: one statement for a single creation or a bulk call."""
    return {row[0] for row in execute(ANY_OF, (list(hashes),)).fetchall()}
