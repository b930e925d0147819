"""Data subjects' opt-outs (D20): a person asks that nobody looks them up through us.

The operator records an opt-out (``flask --app wsgi suppressions add KIND TARGET``); from then on
a creation for that target is refused with 403 ``target_suppressed``, free of charge, and in a
bulk call it is a free ``rejected`` entry. Only the keyed hash of the normalised target is
stored (``crypto.target_hash``), so the list names nobody; the same normalisation as creations
(``targets.normalize``) makes ``Jane.Doe@Example.com`` and ``jane.doe@example.com`` one person.
"""
from __future__ import annotations

from app.models import utcnow
from app.services import crypto
from app.services.errors import TargetSuppressed
from app.services.targets import normalize_or_refuse
from app.store import suppressions as store

SUPPRESSED_MESSAGE = "the person this target belongs to has opted out of lookups"


def _hash_of(kind: str | None, target: str) -> tuple[str, str]:
    """``(kind, keyed hash)`` of a target as a creation would normalise it."""
    kind, normalized = normalize_or_refuse(target, kind)
    return kind, crypto.target_hash(kind, normalized)


def add(kind: str | None, target: str) -> dict:
    """Record an opt-out: ``{target_hash, kind, added}`` (``added`` False: it was there)."""
    kind, target_hash = _hash_of(kind, target)
    added = store.add(target_hash, kind=kind, now=utcnow())
    return {"target_hash": target_hash, "kind": kind, "added": added}


def remove(kind: str | None, target: str) -> dict:
    """Withdraw an opt-out: ``{target_hash, kind, removed}``."""
    kind, target_hash = _hash_of(kind, target)
    return {"target_hash": target_hash, "kind": kind, "removed": store.remove(target_hash)}


def list_all() -> list[dict]:
    """Every opt-out, newest first: its hash, kind and time (no target: none is stored)."""
    return [{"target_hash": row.target_hash, "kind": row.kind, "created_at": row.created_at}
            for row in store.all_newest_first()]


def check(kind: str, normalized_target: str) -> None:
    """Refuse a creation for a suppressed target (``TargetSuppressed``, 403, free)."""
    if store.suppressed_among([crypto.target_hash(kind, normalized_target)]):
        raise TargetSuppressed(SUPPRESSED_MESSAGE)


def split_suppressed(accepted: list) -> tuple[list, list]:
    """A bulk call's accepted ``(index, (kind, target))`` entries without the suppressed ones,
    and a free ``rejected`` entry for each of those (one statement for the whole batch)."""
    hashes = {index: crypto.target_hash(kind, target) for index, (kind, target) in accepted}
    suppressed = store.suppressed_among(hashes.values()) if accepted else set()
    kept = [entry for entry in accepted if hashes[entry[0]] not in suppressed]
    rejected = [{"index": index, "target": target, "kind": kind, "error": TargetSuppressed.code,
                 "message": SUPPRESSED_MESSAGE}
                for index, (kind, target) in accepted if hashes[index] in suppressed]
    return kept, rejected
