"""Watches (D28): a target scanned again on a schedule.

A watch's first scan is made with it, in one admission (charged and limited as a creation, within
the customer's watch limit); later scans are due at ``next_scan_at``, which the scheduler claims.
Due times follow the watch's slot among its customer's watches (``watch_times``), which spreads
them over the interval.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

from app.accounts import access, admin
from app.accounts.statements import keys as key_store
from app.activity import entries
from app.intake import creation
from app.plumbing.crypto import target_hash
from app.plumbing.db import transaction
from app.plumbing.errors import Forbidden, InvalidRequest, NotFound, ServiceError, TargetSuppressed, WatchEnded
from app.plumbing.models import iso, new_id, utcnow
from app.plumbing.paging import Page
from app.scans import purposes
from app.targets.identity import normalize_or_refuse, opt_out_key
from app.watches import admission, event_kinds, watch_changes, watch_times
from app.watches import statements as watch_store
from app.watches.models import ACTIVE, ENDED, PAUSED
from app.watches.scopes import WATCHES
from app.watches.watch_times import INTERVALS, next_due

# The scheduler's claim: watches per batch, batches per run, and how long a claim holds a watch
# (a scheduler that dies leaves its watches due again then).
CLAIM_BATCH = 50
MAX_BATCHES = 20
HOLD = timedelta(minutes=10)
# A scan that cannot be made is tried again after an eighth of the interval; after this many
# intervals without one the watch is paused.
MISSED_INTERVALS = 3
LIST_MAX_LIMIT = 100


def view(watch) -> dict:
    """A watch as the API shows it."""
    return {"ok": True, "watch_id": watch.id, "livemode": watch.livemode, "target": watch.target,
            "kind": watch.kind, "interval": watch.interval, "status": watch.status, "purpose": watch.purpose,
            "case_ref": watch.case_ref, "created_at": iso(watch.created_at), "next_scan_at": iso(watch.next_scan_at),
            "last_scan_id": watch.last_scan_id, "last_change_at": iso(watch.last_change_at),
            "last_error": watch.last_error,
            "last_changes": json.loads(watch.last_changes) if watch.last_changes else None,
            **_match_fields(watch)}


def _match_fields(watch) -> dict:
    """A watch's ``min_confidence`` and ``required`` (D29), when it was created with them."""
    fields: dict = {}
    if watch.min_confidence is not None:
        fields["min_confidence"] = watch.min_confidence
    if watch.required is not None:
        fields["required"] = watch.required
    return fields


def _rules(watch) -> creation.MatchRules:
    """What each of the watch's scans asks of its findings: the watch's own (D29)."""
    return creation.MatchRules(watch.min_confidence, watch.required)


def create_watch(customer, api_key_id, target, kind, interval, *, request_id, livemode=True, purpose=None,
                 case_ref=None, entry: entries.CallEntry | None = None,
                 match: creation.MatchRules = creation.NO_RULES) -> tuple[dict, creation.Outcome]:
    """Create a watch and queue its baseline scan: ``(the watch's body, the scan's outcome)``.
    ``entry``: the call's activity entry, written with the charge (D25); ``match``: what each of its
    scans asks of its findings (D29)."""
    kind, target = normalize_or_refuse(target, kind)
    purpose, case_ref = purposes.check(purpose, case_ref, required=customer.require_purpose)
    _check_interval(interval)
    match = match.checked()
    row = _new_row(customer.id, api_key_id, livemode, kind, target, interval, purpose, case_ref, utcnow(), match)
    watch_id = row["id"]
    outcome = admission.create_watch_scan(customer, api_key_id, kind, target, request_id=request_id, livemode=livemode,
                                      purpose=purpose, case_ref=case_ref, watch_id=watch_id, new_watch=row,
                                      entry=entry, match=match)
    watch_store.update(watch_id, {"last_scan_id": outcome.body["scan_id"]})
    return view(watch_store.get(watch_id)), outcome


def create_watches(customer, api_key_id, targets: list, interval: str, *, request_id, livemode=True, purpose=None,
                   case_ref=None, entry: entries.CallEntry | None = None,
                   match: creation.MatchRules = creation.NO_RULES) -> tuple[dict, creation.Outcome]:
    """Many watches in one call (D28's bulk creation, the portal's CSV import): the targets are
    taken as a bulk scan's (at most 100, Business and Enterprise, each invalid or opted-out one
    rejected, free); each valid one becomes a watch with its baseline scan, all admitted together
    (paid as a bulk call: a credit per watch, one if none), within the watch limit, or none is.
    ``(body, outcome)``: the body says, per entry, the watch created or why it was rejected."""
    _check_interval(interval)
    accepted, rejected, purpose, case_ref = creation.screen_bulk(customer, targets, purpose, case_ref)
    match = match.checked()
    now = utcnow()
    rows = [_new_row(customer.id, api_key_id, livemode, kind, target, interval, purpose, case_ref, now, match)
            for _, (kind, target) in accepted]
    outcome = admission.create_watch_batch(customer, api_key_id, accepted, len(targets), rows, request_id=request_id,
                                       livemode=livemode, purpose=purpose, case_ref=case_ref, entry=entry,
                                       match=match)
    made = outcome.body["scans"]
    watch_store.set_last_scans({s["watch_id"]: s["scan_id"] for s in made})
    found = {w.id: w for w in watch_store.get_many([s["watch_id"] for s in made])}
    body = {"ok": True, "livemode": livemode, "bulk_id": outcome.body["bulk_id"], "total": len(targets),
            "created": len(made), "rejected": rejected,
            "watches": [{**_entry(found[s["watch_id"]]), "index": s["index"]} for s in made]}
    return body, outcome


def _check_interval(interval: str) -> None:
    if interval not in INTERVALS:
        raise InvalidRequest(f"interval must be one of {', '.join(INTERVALS)}")


def _new_row(customer_id, api_key_id, livemode, kind, target, interval, purpose, case_ref, now,
             match: creation.MatchRules = creation.NO_RULES) -> dict:
    """A new watch's row, active; its slot and first due time are given at its admission
    (``watch_times.place``, under the customer's lock)."""
    return {"id": new_id("wch"), "customer": customer_id, "api_key": api_key_id, "livemode": livemode, "kind": kind,
            "target": target, "optout_hash": target_hash(*opt_out_key(kind, target)), "interval": interval,
            "status": ACTIVE, "purpose": purpose, "case_ref": case_ref, "created_at": now,
            "slot": None, "next_scan_at": None, "last_scan_id": None, "last_change_at": None,
            "last_changes": None, "last_error": None, "missed_since": None, "ended_at": None, "end_reason": None,
            "min_confidence": match.min_confidence, "required": match.required}


def _entry(watch) -> dict:
    """A watch as a list shows it (its view without ``ok``)."""
    return {k: v for k, v in view(watch).items() if k != "ok"}


def owned(customer_id: str, watch_id: str, livemode: bool):
    """The customer's watch of this mode; another's, another mode's or none: 404 (nothing disclosed)."""
    watch = watch_store.get(watch_id)
    if watch is None or watch.customer_id != customer_id or watch.livemode != livemode:
        raise NotFound("no watch with this id")
    return watch


def read_watch(customer_id: str, watch_id: str, *, livemode: bool) -> dict:
    return view(owned(customer_id, watch_id, livemode))


def list_watches(customer_id: str, *, livemode: bool, status: str | None = None, kind: str | None = None,
                 limit: int = 20, starting_after: str | None = None) -> dict:
    """``{ok, data, has_more}``, newest first (D17)."""
    before = None
    if starting_after is not None:
        after = watch_store.get(starting_after)
        if after is None or after.customer_id != customer_id or after.livemode != livemode:
            raise InvalidRequest("starting_after is not the id of one of your watches",
                                 details={"starting_after": ["no watch of yours has this id"]})
        before = (after.created_at, after.id)
    limit = max(1, min(LIST_MAX_LIMIT, int(limit)))
    rows = watch_store.page(customer_id, livemode=livemode, status=status, kind=kind, before=before, limit=limit + 1)
    return {"ok": True, "data": [_entry(w) for w in rows[:limit]],
            "has_more": len(rows) > limit}


def update_watch(customer_id: str, watch_id: str, *, livemode: bool, interval: str | None = None,
                 status: str | None = None, case_ref: str | None = None, case_ref_given: bool = False) -> dict:
    """PATCH: a new interval (due times follow it), paused or active again, another case reference."""
    watch = owned(customer_id, watch_id, livemode)
    if watch.status == ENDED:
        raise WatchEnded()
    now = utcnow()
    changes: dict = {}
    if case_ref_given:
        _, changes["case_ref"] = purposes.check(watch.purpose, case_ref, required=False)
    interval = interval or watch.interval
    changes["interval"] = interval
    status = status or watch.status
    changes["status"] = status
    with transaction():
        slot = _slot_for(watch, interval, now)
        changes["slot"] = slot
        if status == PAUSED:
            changes["next_scan_at"] = None
        elif watch.status != ACTIVE or interval != watch.interval:  # resumed, or a new rhythm
            changes.update(next_scan_at=next_due(watch.customer_id, slot, interval, watch.created_at, now),
                           missed_since=None)
        if not watch_store.update(watch.id, changes, unless_status=ENDED):
            raise WatchEnded()
    return view(watch_store.get(watch.id))


def _slot_for(watch, interval: str, now: datetime) -> int:
    """The watch's slot in ``interval``: its own, or, moving to another interval, the lowest free
    there (taken under the customer's lock, as an admission takes new watches' slots)."""
    if interval == watch.interval:
        return watch.slot
    admin.lock_customer(watch.customer_id)
    row = {"interval": interval, "created_at": watch.created_at}
    watch_times.place(watch.customer_id, watch.livemode, [row], now)
    return row["slot"]


def end_watch(customer_id: str, watch_id: str, *, livemode: bool) -> dict:
    """DELETE: the watch ends (no more scans); its scans stay scans. Ending it again answers the same."""
    watch = owned(customer_id, watch_id, livemode)
    watch_store.update(watch.id, {"status": ENDED, "next_scan_at": None, "ended_at": utcnow(),
                                  "end_reason": "ended_by_customer"}, unless_status=ENDED)
    return view(watch_store.get(watch.id))


def run_watch(customer, api_key_id, watch_id, *, request_id, livemode=True) -> creation.Outcome:
    """POST /run: a scan of the watch now, admitted as a creation; its due times stay."""
    watch = owned(customer.id, watch_id, livemode)
    if watch.status == ENDED:
        raise WatchEnded()
    outcome = admission.create_watch_scan(customer, api_key_id, watch.kind, watch.target, request_id=request_id,
                                      livemode=livemode, purpose=watch.purpose, case_ref=watch.case_ref,
                                      watch_id=watch.id, match=_rules(watch))
    watch_store.update(watch.id, {"last_scan_id": outcome.body["scan_id"]})
    return outcome


def key_may_watch(key, now: datetime) -> bool:
    """Whether ``key`` may make watches and their scans: not revoked, not expired, with the scope
    ``watches`` (a person who revoked or narrowed a key stops its spending)."""
    return key.is_live and not access.is_expired(key, now) and access.has_scope(key, WATCHES)


# --- the portal (D28: list, add one or a CSV file's targets, pause, resume, end) ----------------

def portal_watches(customer_id: str, *, livemode: bool | None = None, status: str | None = None, page: int = 1,
                   per_page: int = 25) -> Page:
    """The portal's list: the customer's watches of both modes (or one), newest first, numbered pages."""
    page, per_page = max(1, page), min(LIST_MAX_LIMIT, max(1, per_page))
    total, rows = watch_store.portal_page(customer_id, livemode=livemode, status=status,
                                          offset=(page - 1) * per_page, limit=per_page)
    return Page([_entry(w) for w in rows], total, page, per_page)


def watch_keys(customer_id: str) -> list:
    """The customer's keys a person may make watches with in the portal (``key_may_watch``)."""
    now = utcnow()
    return [key for key in key_store.of_customer_newest_first(customer_id) if key_may_watch(key, now)]


def _portal_key(customer_id: str, key_id: str):
    """The key a portal watch is made with: the customer's, able to make watches; its mode is the watch's."""
    key = key_store.find(key_id)
    if key is None or key.customer_id != customer_id:
        raise NotFound("no key with this id")
    if not key_may_watch(key, utcnow()):
        raise Forbidden("this API key cannot make watches: it is revoked, expired or lacks the scope watches")
    return key


def portal_create(customer, key_id: str, target, kind, interval, *, purpose=None, case_ref=None, request_id=None,
                  entry_for: Callable[[bool], entries.CallEntry] | None = None) -> tuple[dict, creation.Outcome]:
    """A watch added in the portal, made with the key the person chose, in its mode; ``entry_for``
    makes the action's entry in that mode, written with the charge (D25)."""
    key = _portal_key(customer.id, key_id)
    return create_watch(customer, key.id, target, kind, interval, request_id=request_id, livemode=key.livemode,
                        purpose=purpose, case_ref=case_ref,
                        entry=entry_for(key.livemode) if entry_for is not None else None)


def portal_import(customer, key_id: str, targets: list, interval: str, *, purpose=None, case_ref=None,
                  request_id=None, entry_for: Callable[[bool], entries.CallEntry] | None = None
                  ) -> tuple[dict, creation.Outcome]:
    """A CSV file's targets watched from the portal: ``create_watches`` with the chosen key."""
    key = _portal_key(customer.id, key_id)
    return create_watches(customer, key.id, targets, interval, request_id=request_id, livemode=key.livemode,
                          purpose=purpose, case_ref=case_ref,
                          entry=entry_for(key.livemode) if entry_for is not None else None)


def portal_set_status(customer_id: str, watch_id: str, status: str) -> dict:
    """Pause (``paused``) or resume (``active``) a watch from the portal, in its own mode."""
    watch = owned_any_mode(customer_id, watch_id)
    return update_watch(customer_id, watch.id, livemode=watch.livemode, status=status)


def portal_end(customer_id: str, watch_id: str) -> dict:
    watch = owned_any_mode(customer_id, watch_id)
    return end_watch(customer_id, watch.id, livemode=watch.livemode)


def owned_any_mode(customer_id: str, watch_id: str):
    """The customer's watch of either mode (the portal shows both); another's or none: 404."""
    watch = watch_store.get(watch_id)
    if watch is None or watch.customer_id != customer_id:
        raise NotFound("no watch with this id")
    return watch


# --- the scheduler -------------------------------------------------------------------------

def run_due(now: datetime | None = None, *, customer_id: str | None = None) -> dict:
    """Make the scans of the watches due at ``now`` (only one customer's, with ``customer_id``: the
    operator's QA runs, which must not move other customers' watches): claimed in batches
    (``SKIP LOCKED``: any number of workers share them), each scan admitted as a creation. The
    report counts them."""
    now = now or utcnow()
    report = {"watch_scans": 0, "watch_scans_missed": 0, "watch_scans_skipped": 0, "watches_paused": 0,
              "watches_ended": 0}
    for _ in range(MAX_BATCHES):
        with transaction():
            claimed = watch_store.claim_due(now, now + HOLD, CLAIM_BATCH, customer_id=customer_id)
        for watch in claimed:
            report[_scan_due(watch, now)] += 1
        if len(claimed) < CLAIM_BATCH:
            break
    return report


def _scan_due(watch, now: datetime) -> str:
    """One due watch's scan; what became of it (a key of ``run_due``'s report)."""
    customer = admin.get_customer(watch.customer_id)
    if not key_may_watch(key_store.get(watch.api_key_id), now):
        # A person who revoked or narrowed a key stops its spending, scheduled scans included.
        return _missed(watch, now, "the API key that created this watch is revoked, expired or lacks the scope "
                                   "watches: end the watch and create it again with another key")
    try:
        outcome = admission.create_watch_scan(customer, watch.api_key_id, watch.kind, watch.target, request_id=None,
                                          livemode=watch.livemode, purpose=watch.purpose, case_ref=watch.case_ref,
                                          watch_id=watch.id, scheduled=True, match=_rules(watch))
    except WatchEnded:  # paused or ended by its customer since the claim: nothing to do
        return "watch_scans_skipped"
    except TargetSuppressed:
        watch_changes.end_for_optout(watch, now)
        return "watches_ended"
    except ServiceError as exc:  # balance, limits, the engine: tried again later in the interval
        return _missed(watch, now, exc.message)
    watch_store.update(watch.id, {"last_scan_id": outcome.body["scan_id"], "last_error": None, "missed_since": None})
    # At least half an interval on: a scan made late (tried again, or claimed after a backlog) is
    # not followed by another at the slot's next point within minutes.
    later = now + INTERVALS[watch.interval] / 2
    _set_due_if_active(watch, next_due(watch.customer_id, watch.slot, watch.interval, watch.created_at, later))
    return "watch_scans"


def _set_due_if_active(watch, due: datetime) -> None:
    """The watch's next due time, unless it was paused or ended meanwhile (a PATCH wins)."""
    watch_store.update(watch.id, {"next_scan_at": due}, only_status=ACTIVE)


def _missed(watch, now: datetime, reason: str) -> str:
    """A due scan that could not be made: tried again an eighth of the interval later, the reason
    kept; after ``MISSED_INTERVALS`` intervals without a scan the watch is paused (``watch.paused``)."""
    step = INTERVALS[watch.interval]
    missed_since = watch.missed_since or now
    changes = {"last_error": reason[:300], "missed_since": missed_since}
    if now - missed_since < step * MISSED_INTERVALS:
        watch_store.update(watch.id, changes)
        _set_due_if_active(watch, now + step / 8)
        return "watch_scans_missed"
    with transaction():
        if watch_store.update(watch.id, {**changes, "status": PAUSED, "next_scan_at": None}, only_status=ACTIVE):
            watch_changes.announce(watch_store.get(watch.id), event_kinds.WATCH_PAUSED,
                                   {"reason": "no_scan_possible", "last_error": reason[:300]})
    return "watches_paused"
