"""Data subjects' opt-outs (D20, D25): a person asks that nobody looks them up through us.

The operator records an opt-out (``flask --app wsgi suppressions add KIND TARGET``); from then on
a creation for that target is refused with 403 ``target_suppressed``, free of charge, and in a
bulk call it is a free ``rejected`` entry. Only keyed hashes are stored (``crypto.target_hash``),
so the list names nobody. Which spellings are one person's identifier is ``app.targets.identity``'
to say: an opt-out is kept under the hash of its ``opt_out_key``, and a creation is refused when
any of its ``suppression_hashes`` is stored (that key's, or the one opt-outs were kept under before).
"""
from __future__ import annotations

from app.plumbing import crypto
from app.plumbing.errors import TargetSuppressed
from app.plumbing.models import utcnow
from app.privacy.handed_in import WATCHES
from app.privacy.statements import suppressions as store
from app.targets.identity import identify_or_refuse, opt_out_key, suppression_hashes

SUPPRESSED_MESSAGE = "the person this target belongs to has opted out of lookups"


def add(kind: str | None, target: str) -> dict:
    """Record an opt-out: ``{target_hash, kind, added}`` (``added`` False: it was there). The kind
    is the key's: a username of a phone number's digits is kept as that number."""
    kind, normalized = identify_or_refuse(target, kind)
    key_kind, form = opt_out_key(kind, normalized)
    target_hash = crypto.target_hash(key_kind, form)
    added = store.add(target_hash, kind=key_kind, now=utcnow())
    WATCHES().end_watches_of_optout(suppression_hashes(kind, normalized))  # D28: the target's watches end
    if added:  # each customer holding a scan of the person is told once, when the opt-out is new
        # Here, not at the top: subjects reach webhooks and erasure, which the operator's list and
        # remove, and every creation's check, have no use for.
        from app.privacy import subjects
        subjects.tell_opted_out(kind, normalized)
    return {"target_hash": target_hash, "kind": key_kind, "added": added}


def remove(kind: str | None, target: str) -> dict:
    """Withdraw every opt-out that refuses this target, however it was spelt when added (one kept
    before canonical forms: spelt as it was then, see ``suppression_hashes``):
    ``{target_hash, kind, removed}``."""
    kind, normalized = identify_or_refuse(target, kind)
    key_kind, form = opt_out_key(kind, normalized)
    removed = store.remove_among(suppression_hashes(kind, normalized))
    return {"target_hash": crypto.target_hash(key_kind, form), "kind": key_kind, "removed": removed > 0}


def list_all(kind: str | None = None, target: str | None = None) -> list[dict]:
    """Every opt-out, newest first: its hash, kind and time (no target: none is stored); given a
    ``target``, only those that refuse it."""
    hashes = None
    if target is not None:
        kind, normalized = identify_or_refuse(target, kind)
        hashes = suppression_hashes(kind, normalized)
    return [{"target_hash": row.target_hash, "kind": row.kind, "created_at": row.created_at}
            for row in store.all_newest_first(among=hashes)]


def check(kind: str, normalized_target: str) -> None:
    """Refuse a creation for a suppressed target (``TargetSuppressed``, 403, free)."""
    if store.suppressed_among(suppression_hashes(kind, normalized_target)):
        raise TargetSuppressed(SUPPRESSED_MESSAGE)


def split_suppressed(accepted: list) -> tuple[list, list]:
    """A bulk call's accepted ``(index, (kind, target))`` entries without the suppressed ones,
    and a free ``rejected`` entry for each of those (one statement for the whole batch)."""
    hashes = {index: suppression_hashes(kind, target) for index, (kind, target) in accepted}
    suppressed = store.suppressed_among(set().union(*hashes.values())) if accepted else set()
    kept = [entry for entry in accepted if not hashes[entry[0]] & suppressed]
    rejected = [{"index": index, "target": target, "kind": kind, "error": TargetSuppressed.code,
                 "message": SUPPRESSED_MESSAGE}
                for index, (kind, target) in accepted if hashes[index] & suppressed]
    return kept, rejected
