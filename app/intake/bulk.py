"""Bulk input validation (D7): which targets of a bulk call are queued, which
rejected and why. A bad target never fails the call; a bad call (no targets, too many,
a tier without bulk) does, before anything is charged."""
from __future__ import annotations

from app.billing.limits import BULK_TIERS
from app.plumbing.errors import Forbidden, InvalidRequest
from app.scans.models import MAX_BULK_TARGETS
from app.targets.identity import TargetError, normalize

ITEM_FIELDS = {"target", "kind"}


def check_call(tier: str, targets: list) -> None:
    """Refuse a bulk call as a whole: no targets, too many, or a tier without bulk calls."""
    if not targets:
        raise InvalidRequest("targets must hold at least one target", code="no_targets")
    if len(targets) > MAX_BULK_TARGETS:
        raise InvalidRequest(f"a bulk call takes at most {MAX_BULK_TARGETS} targets", code="too_many_targets")
    if tier not in BULK_TIERS:
        raise Forbidden("bulk calls are available on the Business and Enterprise tiers", code="bulk_not_allowed")


def split_targets(targets: list) -> tuple[list, list]:
    """``(accepted, rejected)``: ``(index, (kind, target))`` per valid target, and a
    rejected entry (index, target, kind, error, message) per invalid one."""
    accepted, rejected = [], []
    for index, item in enumerate(targets):
        ok, bad = _bulk_item(index, item)
        if bad:
            rejected.append(bad)
        else:
            accepted.append((index, ok))
    return accepted, rejected


def _bulk_item(index, item):
    """One bulk target -> ``(kind, target)`` or a rejected entry (D7)."""
    if not isinstance(item, dict):
        return None, {"index": index, "target": None, "kind": None, "error": "invalid_request",
                      "message": "each target must be an object {target, kind}"}
    raw_target, raw_kind = item.get("target"), item.get("kind")
    shown_target = raw_target if isinstance(raw_target, str) else None
    shown_kind = raw_kind if isinstance(raw_kind, str) else None
    if not isinstance(raw_target, str) or (raw_kind is not None and not isinstance(raw_kind, str)):
        return None, {"index": index, "target": shown_target, "kind": shown_kind, "error": "invalid_request",
                      "message": "target must be a string and kind, when given, a string"}
    unknown = sorted(set(item) - ITEM_FIELDS)
    if unknown:  # as a single scan's unknown fields are refused (D25)
        return None, {"index": index, "target": shown_target, "kind": shown_kind, "error": "invalid_request",
                      "message": f"unknown field in a target: {', '.join(unknown)[:200]}"}
    try:
        return normalize(raw_target, raw_kind), None
    except TargetError as exc:
        return None, {"index": index, "target": raw_target, "kind": exc.kind or shown_kind,
                      "error": exc.code, "message": exc.message}
