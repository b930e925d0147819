"""Data subjects' opt-outs (D20): keyed hashes of targets, never the targets."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from app.plumbing.db import execute, table
from app.privacy.models import Suppression

ANY_OF = f"SELECT target_hash FROM {table(Suppression)} WHERE target_hash = ANY(?)"


def add(target_hash: str, *, kind: str, now: datetime) -> bool:
    """Record an opt-out; False when it was recorded already."""
    inserted = (Suppression.insert(target_hash=target_hash, kind=kind, created_at=now)
                .on_conflict_ignore().execute())
    return bool(inserted)


def remove_among(hashes: Iterable[str]) -> int:
    """Withdraw the opt-outs stored under any of ``hashes``; how many there were."""
    return Suppression.delete().where(Suppression.target_hash.in_(list(hashes))).execute()


def all_newest_first(among: Iterable[str] | None = None) -> list[Suppression]:
    """Every opt-out, or those stored under one of ``among``, newest first."""
    query = Suppression.select()
    if among is not None:
        query = query.where(Suppression.target_hash.in_(list(among)))
    return list(query.order_by(Suppression.created_at.desc(), Suppression.target_hash))


def suppressed_among(hashes: Iterable[str]) -> set[str]:
    """Which of ``hashes`` are opted out: one statement for a single creation or a bulk call."""
    return {row[0] for row in execute(ANY_OF, (list(hashes),)).fetchall()}
