"""Data subjects' requests (D32): what we hold about a person and who looked them up (an access
request), the erasure of every customer's scans of them, and telling each customer who holds a
scan of a person that they opted out or were erased.

A person is found by every spelling of their identifier, as opt-outs find them (D25): a scan
matches when its target's opt-out hashes (``targets.suppression_hashes``) meet the person's, and
an activity entry when its keyed hashes meet the person's ``canonical_hashes``. Scans keep their
target as submitted, so matching reads every scan still holding a target of the kinds that could
be the person's (a batch at a time): an operator's command, run rarely, linear in the scans held.

Customers are told by an event per customer and mode (``subject.opted_out``, ``subject.erased``):
``{event, scan_ids, at}`` and never the target, so that a customer can delete its own copies;
only endpoints that list the event receive it, and it is always in the customer's event feed.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from app.plumbing.db import transaction
from app.plumbing.models import iso, utcnow
from app.privacy import erasure
from app.privacy.event_kinds import SUBJECT_ERASED, SUBJECT_OPTED_OUT
from app.privacy.handed_in import WATCHES
from app.privacy.statements import subjects as store
from app.privacy.statements import suppressions as suppression_store
from app.scans.models import FINAL
from app.targets.identity import canonical_hashes, identify_or_refuse, suppression_hashes
from app.webhooks import outbox

# The kinds a stored target of a person of each kind may have: a username of a phone number's
# digits is that number (targets.opt_out_key), so a phone number may be held as either.
CANDIDATE_KINDS = {"email": ("email",), "phone": ("phone", "username"), "username": ("username", "phone")}



@dataclass(frozen=True)
class Person:
    kind: str
    optout_hashes: frozenset[str]  # what a scan's target is matched by (every spelling)
    lookup_hashes: frozenset[str]  # what the activity log's entries are matched by


def person(target: str, kind: str | None = None) -> Person:
    """The person a target names (refused as an opt-out refuses an invalid one)."""
    kind, normalized = identify_or_refuse(target, kind)
    return Person(kind, frozenset(suppression_hashes(kind, normalized)),
                  frozenset(canonical_hashes(kind, normalized)))


def held_scans(who: Person) -> Iterator[dict]:
    """Every scan still holding a target of ``who``, any customer's, by id."""
    for row in store.scans_holding_targets(CANDIDATE_KINDS[who.kind]):
        scan = dict(zip(store.HELD_COLUMNS, row, strict=True))
        if suppression_hashes(scan["kind"], scan["target"]) & who.optout_hashes:
            yield scan


def _held(scan: dict) -> dict:
    """What an export says of a scan still held: no target (the person knows it), what it is and
    where it stands; a completed scan holds its result."""
    return {"scan_id": scan["id"], "customer_id": scan["customer_id"], "livemode": scan["livemode"],
            "kind": scan["kind"], "status": scan["status"], "created_at": iso(scan["created_at"]),
            "completed_at": iso(scan["completed_at"]), "failed_at": iso(scan["failed_at"]),
            "purpose": scan["purpose"], "case_ref": scan["case_ref"], "bulk_id": scan["bulk_id"],
            "watch_id": scan["watch_id"], "holds_result": scan["status"] == "completed"}


def export(target: str, kind: str | None = None) -> dict:
    """An access request's answer: who looked the person up (every customer's creations naming
    them, kept in the activity log even after the scans were erased), when and why (purpose,
    case_ref); the scans and watches still holding their identifier; whether they opted out."""
    who = person(target, kind)
    lookups = [dict(zip(store.LOOKUP_COLUMNS, row, strict=True)) for row in store.lookups(sorted(who.lookup_hashes))]
    for entry in lookups:
        entry["created_at"] = iso(entry["created_at"])
    watches = [{"watch_id": w.id, "customer_id": w.customer_id, "livemode": w.livemode, "kind": w.kind,
                "interval": w.interval, "status": w.status, "purpose": w.purpose, "case_ref": w.case_ref,
                "created_at": iso(w.created_at)}
               for w in WATCHES().open_with_optout_hash(set(who.optout_hashes))]
    held = [_held(scan) for scan in held_scans(who)]
    return {"kind": who.kind, "opted_out": bool(suppression_store.suppressed_among(who.optout_hashes)),
            "customers": sorted({e["customer_id"] for e in lookups} | {s["customer_id"] for s in held}
                                | {w["customer_id"] for w in watches}),
            "lookups": lookups, "held": {"scans": held, "watches": watches}}


def _by_customer(scans) -> dict[tuple[str, bool], list[dict]]:
    grouped: dict[tuple[str, bool], list[dict]] = defaultdict(list)
    for scan in scans:
        grouped[(scan["customer_id"], scan["livemode"])].append(scan)
    return grouped


def _tell(customer_id: str, livemode: bool, event: str, scan_ids: list[str], now: datetime) -> None:
    """One event to the customer (of that mode): the scans concerned, never the target."""
    outbox.record_customer_event(customer_id, livemode, {"event": event, "scan_ids": sorted(scan_ids),
                                                           "at": iso(now)})


def erase(target: str, kind: str | None = None, now: datetime | None = None) -> dict:
    """Erase every customer's final scans of the person, as each customer's own erasure does, and
    tell each customer (``subject.erased``, in the same transaction as its erasure). Scans still in
    flight cannot be erased yet: they are counted (run the command again once they finish)."""
    who, now = person(target, kind), now or utcnow()
    erased, in_flight = 0, []
    for (customer_id, livemode), scans in _by_customer(held_scans(who)).items():
        final = [s["id"] for s in scans if s["status"] in FINAL]
        in_flight += [s["id"] for s in scans if s["status"] not in FINAL]
        if not final:
            continue
        with transaction():
            done = erasure.erase_for_subject(final, now, owner=(customer_id, livemode))
            if done:
                _tell(customer_id, livemode, SUBJECT_ERASED, done, now)
        erased += len(done)
    return {"erased": erased, "in_flight": sorted(in_flight)}


def tell_opted_out(kind: str, normalized: str, now: datetime | None = None) -> int:
    """After an opt-out of ``normalized`` (of ``kind``): each customer holding a scan of the person
    gets ``subject.opted_out`` with those scans' ids; how many customers (and modes) were told."""
    who = Person(kind, frozenset(suppression_hashes(kind, normalized)), frozenset(canonical_hashes(kind, normalized)))
    now = now or utcnow()
    grouped = _by_customer(held_scans(who))
    for (customer_id, livemode), scans in grouped.items():
        with transaction():
            _tell(customer_id, livemode, SUBJECT_OPTED_OUT, [s["id"] for s in scans], now)
    return len(grouped)
