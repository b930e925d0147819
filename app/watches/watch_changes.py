"""What a watch's completed scan changed (D28), and the watch events.

Kept apart from ``app.watches.watchlist`` (which admits scans) so that the final transition of a scan
(``states.record_finals``) and an opt-out (``suppressions.add``) can record watch events
without importing the admission. Events go to the endpoints of the watch's key that list them,
in the caller's transaction.
"""
from __future__ import annotations

import json
from datetime import datetime

from app.accounts.statements import keys as key_store
from app.plumbing.db import transaction
from app.plumbing.models import utcnow
from app.scans import confidence
from app.scans import statements as scan_store
from app.scans.models import COMPLETED
from app.scans.results import PATH_RE
from app.watches import event_kinds
from app.watches import statements as watch_store
from app.watches.models import ENDED
from app.webhooks import outbox


def announce(watch, event: str, fields: dict, *, scan_id: str | None = None, full: dict | None = None) -> None:
    """Record a watch event: the thin body has no personal data, the full one adds the target
    (and ``full``); a watch ended by an opt-out has no target left to add."""
    target = {"target": watch.target} if watch.target is not None else {}
    body = {"event": event, "watch_id": watch.id, "livemode": watch.livemode, "purpose": watch.purpose,
            "case_ref": watch.case_ref, **fields, **target, "kind": watch.kind, **(full or {})}
    outbox.record_watch_event(key_store.get(watch.api_key_id), body, scan_id=scan_id)


def _risk(result: dict) -> dict:
    risk = result.get("risk") or {}
    return {"score": risk.get("score"), "band": risk.get("band")}


def _item(result: dict, path: str):
    """The item a finding's ``path`` (``breaches[0]``, ``profiles.verified[1]``) names, or None."""
    match = PATH_RE.match(path)
    if match is None:
        return None
    node: object = result
    for part in match.group(1).split("."):
        node = node.get(part) if isinstance(node, dict) else None
    index = int(match.group(2))
    return node[index] if isinstance(node, list) and index < len(node) else None


def shown(scan) -> dict:
    """A completed scan's result as its customer sees it, at its own ``min_confidence`` (D29): what
    a watch compares, so a finding under it neither comes nor goes."""
    return confidence.filtered(json.loads(scan.result_json), scan.min_confidence, fresh=True)


def changes_between(previous: dict, current: dict) -> dict | None:
    """``{added, removed, risk: {from, to}}`` between two results (finding ids keep their identity
    across a customer's scans of a target), or None when no finding came or went and the band held."""
    before = [f["id"] for f in previous.get("findings") or []]
    after = [f["id"] for f in current.get("findings") or []]
    added = [fid for fid in after if fid not in set(before)]
    removed = [fid for fid in before if fid not in set(after)]
    risk = {"from": _risk(previous), "to": _risk(current)}
    if not added and not removed and risk["from"]["band"] == risk["to"]["band"]:
        return None
    return {"added": added, "removed": removed, "risk": risk}


def since_previous(customer_id: str, scan_id: str) -> dict | None:
    """What a watch scan of the customer changed since the watch's previous completed scan, as a
    ``watch.changed`` would say it (None: not a watch scan). ``state``: ``changed`` (with ``changes``),
    ``unchanged``, ``baseline`` (no earlier completed scan), ``pending`` (not completed yet) or
    ``erased`` (this or the previous result was erased: nothing to compare). With ``changed``, the
    previous result too, for what the removed findings were."""
    scan = scan_store.owned_scan(scan_id, customer_id)
    if scan is None or not scan.watch_id:
        return None
    previous = watch_store.previous_completed_scan(scan.watch_id, scan) if scan.status == COMPLETED else None
    about = {"watch_id": scan.watch_id, "previous_scan_id": previous.id if previous else None}
    if scan.status != COMPLETED:
        return {**about, "state": "pending"}
    if previous is None:
        return {**about, "state": "baseline"}
    if not scan.result_json or not previous.result_json:
        return {**about, "state": "erased"}
    before = shown(previous)
    changes = changes_between(before, shown(scan))
    if changes is None:
        return {**about, "state": "unchanged"}
    return {**about, "state": "changed", "changes": changes, "previous_result": before}


def record_changes(scans: list, now: datetime | None = None) -> int:
    """For each completed watch scan of ``scans`` (in the caller's transaction), compare it with the
    watch's previous completed scan; a change is a ``watch.changed`` event and the watch's
    ``last_changes``. How many changed."""
    now = now or utcnow()
    changed = 0
    for scan in scans:
        if not scan.watch_id or not scan.result_json:
            continue
        watch = watch_store.get(scan.watch_id)
        previous = watch_store.previous_completed_scan(scan.watch_id, scan)
        if watch is None or watch.status == ENDED or previous is None or not previous.result_json:
            continue
        current = shown(scan)
        changes = changes_between(shown(previous), current)
        if changes is None:
            continue
        watch_store.update(watch.id, {"last_changes": json.dumps(changes), "last_change_at": now})
        items = {fid: _item(current, f["path"]) for f in current.get("findings") or []
                 if (fid := f["id"]) in changes["added"]}
        announce(watch, event_kinds.WATCH_CHANGED, {"scan_id": scan.id, "previous_scan_id": previous.id,
                                                    "changes": changes},
                 scan_id=scan.id, full={"added_items": items})
        changed += 1
    return changed


def end_for_optout(watch, now: datetime) -> bool:
    """End a watch whose target opted out (D25), with ``watch.ended`` reason ``target_suppressed``.
    The watch forgets the person's identifier (its target and opt-out hash) in the same write, so
    its reads, its list and its event name nobody."""
    with transaction():
        ended = watch_store.update(watch.id, {"status": ENDED, "next_scan_at": None, "ended_at": now,
                                              "end_reason": "target_suppressed", "target": None,
                                              "optout_hash": None}, unless_status=ENDED)
        if ended:
            announce(watch_store.get(watch.id), event_kinds.WATCH_ENDED, {"reason": "target_suppressed"})
    return ended


def end_watches_of_optout(target_hashes: set[str]) -> int:
    """End every watch an opt-out refuses (``target_hashes``: its ``targets.suppression_hashes``,
    which find a watch's opt-out hash kept under the earlier canonical rule too); how many."""
    now = utcnow()
    with transaction():
        return sum(end_for_optout(watch, now) for watch in watch_store.open_with_optout_hash(target_hashes))
