"""A watch's scans, admitted as creations (D28): charged and limited as any creation, the watch's
part of the admission added under the same lock (``creation.AdmissionPart``): new watches within
the customer's watch limit, written with their baseline scans; an existing watch locked and still
open. A refused engine leaves no new watch."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.activity import entries
from app.billing.limits import watch_limit_for
from app.intake import creation
from app.intake.creation import NO_RULES, MatchRules, Outcome
from app.plumbing.errors import WatchEnded, WatchLimitReached
from app.watches import statements as watch_store
from app.watches import watch_times


@dataclass(frozen=True)
class NewWatches:
    """New watches, one row per scan admitted (its scan is the watch's first)."""

    rows: list[dict]

    def check(self, customer, livemode: bool, now: datetime) -> None:
        _check_limit(customer, livemode, len(self.rows))
        watch_times.place(customer.id, livemode, self.rows, now)

    def writes(self) -> list:
        return [watch_store.insert_statement(self.rows)] if self.rows else []

    def watch_of(self, position: int) -> str | None:
        return self.rows[position]["id"]

    def undo(self) -> None:
        watch_store.delete_many([row["id"] for row in self.rows])


@dataclass(frozen=True)
class OfWatch:
    """A scan of an existing watch, whose row is locked and must be in one of ``statuses``."""

    watch_id: str
    statuses: tuple[str, ...]

    def check(self, customer, livemode: bool, now: datetime) -> None:
        if watch_store.lock_status(self.watch_id) not in self.statuses:
            raise WatchEnded()  # ended (or, for a scheduled scan, paused) since it was read

    def writes(self) -> list:
        return []

    def watch_of(self, position: int) -> str | None:
        return self.watch_id


def _check_limit(customer, livemode: bool, adding: int) -> None:
    """429 ``watch_limit_reached`` (D28, free) when ``adding`` more watches would pass the customer's
    limit of watches not ended: a bulk call is refused whole, as the in-flight limit refuses one (D7)."""
    allowed = watch_limit_for(customer)
    open_now = watch_store.count_open(customer.id, livemode)
    if open_now + adding > allowed:
        raise WatchLimitReached(allowed, room=max(0, allowed - open_now) if adding > 1 else None)


def create_watch_scan(customer, api_key_id, kind, target, *, request_id, livemode, purpose, case_ref, watch_id,
                      new_watch: dict | None = None, scheduled: bool = False,
                      entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES) -> Outcome:
    """Queue a watch's scan; with ``new_watch`` the watch itself is created in the same transaction
    (its baseline scan). ``scheduled``: a paused watch's scan is refused too. The body is a
    creation's, with ``watch_id``. ``entry``: the call's activity entry, written with the charge (D25)."""
    new = NewWatches([new_watch]) if new_watch is not None else None
    part = new or OfWatch(watch_id, ("active",) if scheduled else ("active", "paused"))
    return creation.create_one(customer, api_key_id, kind, target, request_id=request_id, livemode=livemode,
                               purpose=purpose, case_ref=case_ref, entry=entry, match=match, part=part,
                               undo=new.undo if new is not None else None)


def create_watch_batch(customer, api_key_id, accepted, total, new_watches, *, request_id, livemode, purpose,
                       case_ref, entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES) -> Outcome:
    """Many watches at once: ``new_watches``, one row per ``accepted`` target (as
    ``creation.screen_bulk`` gives them), each created with its baseline scan in one batch of
    ``total`` targets, admitted, charged and limited as a bulk call, within the watch limit. The
    body lists the batch's scans, each with its ``watch_id`` and ``index``."""
    new = NewWatches(new_watches)
    admitted, recorded = creation.create_many(customer, api_key_id, accepted, total, request_id=request_id,
                                              livemode=livemode, purpose=purpose, case_ref=case_ref, entry=entry,
                                              match=match, part=new, undo=new.undo)
    body = {"ok": True, "bulk_id": admitted.batch_id, "livemode": livemode, "total": total,
            "scans": [{"scan_id": r["id"], "watch_id": r["watch_id"], "index": r["bulk_index"]} for r in admitted.rows]}
    return admitted.outcome(body, recorded)
