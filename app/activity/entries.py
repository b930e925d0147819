"""The activity log (D20): who did what, when, from where, at what cost.

Every authenticated API call (``app.api.hooks``) and every portal action (the portal's
after-request hook) is one entry, written with one INSERT once its answer is decided. A
creation's targets are kept only as keyed hashes (``targets.canonical_hash``: one per
target however it was spelt, D25), so the log names nobody, yet "who looked up this target"
is one indexed query: the filter ``target`` is hashed the same way.

Entries are kept ``ACTIVITY_RETENTION_DAYS``. The table is partitioned by day
(``app.activity.models``): ``prepare_partitions`` makes the coming days' partitions and
``expire`` drops those whose every entry is older than the retention, a DDL drop, never a
DELETE walking the log. ``upkeep`` runs both as a periodic job (``app.periodic``).
"""
from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from app.activity.statements import entries as store
from app.plumbing import runtime
from app.plumbing.db import transaction
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import iso, new_id, utcnow
from app.targets.identity import canonical_hash, canonical_hashes, identify_or_refuse

log = logging.getLogger(__name__)

LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT = 20, 100
PARTITION_DAYS_AHEAD = 7  # partitions made ahead of need: a week without a sweep loses nothing either way
# How long a partition change waits for a table lock before it gives up until the next sweep: a
# DROP waiting for the parent's lock holds up the inserts queued behind it, so not long.
LOCK_TIMEOUT_MS = 1000
FIELD_LIMITS = {"resource_id": 64, "client_address": 64, "request_id": 128, "action": 64, "user_email": 320}


@dataclass(frozen=True)
class Subject:
    """What an entry says about the object of a call, as the service that served it knows it:
    the object it created, the keyed hashes of the targets it queued, purpose and case_ref."""

    resource_id: str | None = None
    target_hashes: tuple[str, ...] = ()
    purpose: str | None = None
    case_ref: str | None = None


def hashes_of(targets: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The keyed hashes of the canonical forms of ``(kind, target)`` pairs, in order, without repeats."""
    return tuple(dict.fromkeys(canonical_hash(kind, target) for kind, target in targets))


def _clip(name: str, value):
    """Text fields within their columns (a route's id, a client's request id may be long);
    controls go (PostgreSQL's text refuses NUL)."""
    if not isinstance(value, str):
        return value
    return "".join(c if c.isprintable() else "?" for c in value[:FIELD_LIMITS.get(name, len(value))])


def _row(*, entry_id: str, created_at: datetime, customer_id: str, livemode: bool, action: str, status: int,
         credits: int, key_id: str | None = None, user_id: str | None = None, user_email: str | None = None,
         resource_id: str | None = None, client_address: str | None = None, request_id: str | None = None,
         subject: Subject | None = None) -> dict:
    """An entry's row, its text fields clipped; ``subject`` adds the created object, the targets'
    hashes, purpose and case_ref."""
    row = {"id": entry_id, "created_at": created_at, "customer_id": customer_id, "livemode": livemode,
           "key_id": key_id, "user_id": user_id, "user_email": _clip("user_email", user_email),
           "action": _clip("action", action), "resource_id": _clip("resource_id", resource_id),
           "status": status, "credits": credits, "client_address": _clip("client_address", client_address),
           "request_id": _clip("request_id", request_id)}
    if subject is not None:
        row.update(purpose=subject.purpose, case_ref=subject.case_ref,
                   target_hashes=list(subject.target_hashes) or None)
        if subject.resource_id is not None:
            row["resource_id"] = _clip("resource_id", subject.resource_id)
    return row


def record(*, customer_id: str, livemode: bool, action: str, status: int, credits: int = 0,
           key_id: str | None = None, user_id: str | None = None, user_email: str | None = None,
           resource_id: str | None = None, client_address: str | None = None, request_id: str | None = None,
           subject: Subject | None = None, now: datetime | None = None) -> str:
    """Write one entry (one INSERT, outside any transaction of the call); returns its id.
    ``subject`` adds the created object, the targets' hashes, purpose and case_ref."""
    entry_id = new_id("act")
    store.insert(_row(entry_id=entry_id, created_at=now or utcnow(), customer_id=customer_id, livemode=livemode,
                      action=action, status=status, credits=credits, key_id=key_id, user_id=user_id,
                      user_email=user_email, resource_id=resource_id, client_address=client_address,
                      request_id=request_id, subject=subject))
    return entry_id


# --- a charged call's entry, written with its charge (D25) ------------------------------------

@dataclass(frozen=True)
class CallEntry:
    """The entry of an API call that may be charged, made before the charge so that the
    statement or transaction that charges writes it too: no charge, and no answer served for
    one, without its entry, whatever fails after (D25). ``status`` is the answer the call gives
    when served (a creation's 202); ``Recorded`` says what was written. A portal action that
    charges (a re-run) is the same entry, naming its user rather than a key."""

    id: str
    created_at: datetime
    customer_id: str
    livemode: bool
    key_id: str | None
    action: str
    resource_id: str | None
    client_address: str | None
    request_id: str | None
    status: int
    user_id: str | None = None
    user_email: str | None = None

    def row(self, *, credits: int, subject: Subject | None = None, status: int | None = None) -> dict:
        """The entry's row, as the charge writes it (``status``: else the served answer's)."""
        return _row(entry_id=self.id, created_at=self.created_at, customer_id=self.customer_id,
                    livemode=self.livemode, action=self.action, status=self.status if status is None else status,
                    credits=credits, key_id=self.key_id, user_id=self.user_id, user_email=self.user_email,
                    resource_id=self.resource_id, client_address=self.client_address, request_id=self.request_id,
                    subject=subject)

    def recorded(self, status: int | None = None) -> Recorded:
        return Recorded(self.id, self.created_at, self.status if status is None else status)


def call_entry(*, customer_id: str, livemode: bool, key_id: str | None, action: str, resource_id: str | None,
               client_address: str | None, request_id: str | None, status: int, user_id: str | None = None,
               user_email: str | None = None) -> CallEntry:
    return CallEntry(new_id("act"), utcnow(), customer_id, livemode, key_id, action, resource_id,
                     client_address, request_id, status, user_id, user_email)


# The attribute of an exception raised after a charge committed with its entry: the entry
# (``Recorded``), whose status the HTTP layer corrects to the answer the exception gets.
RECORDED = "activity_recorded"


@contextmanager
def entry_follows(recorded: Recorded | None) -> Iterator[None]:
    """A block run after a charge committed with its entry: an exception leaving it carries the
    entry (``RECORDED``), so the call's answer to it is said by that entry, not by another."""
    try:
        yield
    except Exception as exc:
        if recorded is not None:
            setattr(exc, RECORDED, recorded)
        raise


def entry_statement(entry: CallEntry, *, credits: int, subject: Subject | None = None) -> tuple[str, tuple]:
    """The INSERT of ``entry`` (the served answer's status, ``credits``, ``subject``), to run
    with the statements of the transaction that charges the call (an admission's)."""
    return store.insert_statement(entry.row(credits=credits, subject=subject))


def refunded(recorded: Recorded) -> None:
    """Inside the transaction that refunds a charged call: its entry says it cost nothing."""
    store.set_credits(recorded.id, recorded.created_at, 0)


# --- a served read's entry, written by the read's own statement -------------------------------

@dataclass(frozen=True)
class ReadEntry:
    """The entry of a served read (``app.pipeline.serve_*``), written by the read's one
    statement (``app.billing.statements.served_reads.read_charged``) rather than by an INSERT of its own: a read
    stays one round trip. What the caller knows is here, clipped as ``record`` clips it; the
    customer, mode and key are those the statement finds, the status is picked from
    ``statuses`` (the object not found, the key's customer's, another's; the balance short)
    by what it finds and charges, the credits are what it charged. The statement writes it only
    for a key it may charge (active, billed mode, allowed by D21); the other calls' entries are
    ``record``'s."""

    id: str
    action: str
    resource_id: str | None
    client_address: str | None
    request_id: str | None
    statuses: tuple[int, int, int, int]


    def for_key(self, key, *, status: int) -> CallEntry:
        """This entry as the call entry of ``key`` answered ``status`` (a read charged apart)."""
        return CallEntry(self.id, utcnow(), key.customer_id, key.livemode, key.id, self.action, self.resource_id,
                         self.client_address, self.request_id, status)


def read_entry(*, action: str, resource_id: str | None, client_address: str | None, request_id: str | None,
               statuses: tuple[int, int, int, int]) -> ReadEntry:
    return ReadEntry(new_id("act"), _clip("action", action), _clip("resource_id", resource_id),
                     _clip("client_address", client_address), _clip("request_id", request_id), statuses)


@dataclass(frozen=True)
class Recorded:
    """An entry a read's statement wrote: its key (id, time) and the status it says."""

    id: str
    created_at: datetime
    status: int


def restate(recorded: Recorded, status: int) -> None:
    """The read's answer is not the one its statement decided (its body failed to render: a
    500): the entry says the answer's status, as ``record`` would have written it."""
    store.set_status(recorded.id, recorded.created_at, status)


def record_once(recorded: Recorded | None, *, what: str, status: int, **fields) -> None:
    """An API call's or a portal action's entry, once its answer is decided: written now (``record``
    with ``fields``), unless the transaction that charged it wrote it already (``recorded``: then
    corrected only when the answer's status is not the one it wrote). The answer stands whatever
    happens here: a failure is one log line naming ``what`` (no personal data, not even the
    driver's message), never a changed answer."""
    try:
        if recorded is not None:
            if recorded.status != status:
                restate(recorded, status)
            return
        record(status=status, **fields)
    except Exception as exc:
        log.error("could not write this %s's activity log entry: %s", what, exc.__class__.__name__)  # noqa: TRY400


# --- reading ---------------------------------------------------------------------------------

def target_filter(target: str | None) -> list[str] | None:
    """The hashes the ``target`` filter looks for: the target's kind inferred as a creation
    without ``kind`` would (a phone number may be written with dots too), then the hash of its
    canonical form, which entries keep, and those entries kept under earlier rules
    (``targets.canonical_hashes``); an invalid target is refused as a creation refuses it."""
    if target is None:
        return None
    kind, normalized = identify_or_refuse(target, None, field="target")
    return sorted(canonical_hashes(kind, normalized))


def _entry(row) -> dict:
    (entry_id, created_at, _customer, livemode, key_id, user_id, user_email, action, resource_id, status, credits,
     client_address, request_id, purpose, case_ref) = row
    return {"activity_id": entry_id, "created_at": iso(created_at), "livemode": livemode, "action": action,
            "key_id": key_id, "user_id": user_id, "user_email": user_email, "resource_id": resource_id,
            "status": status, "credits": credits, "client_address": client_address, "request_id": request_id,
            "purpose": purpose, "case_ref": case_ref}


def public_entry(row) -> dict:
    """An entry as the API, the export and the audit sinks show it (``READ_COLUMNS``' row)."""
    return _entry(row)


def _page(customer_id: str, *, livemode: bool | None, limit: int, starting_after: str | None,
          target: str | None, **filters) -> tuple[list[tuple], bool]:
    hashes = target_filter(target)
    before = None
    if starting_after is not None:
        created_at = store.created_at_of(starting_after, customer_id=customer_id, livemode=livemode)
        if created_at is None:  # unknown, another customer's or mode's: one answer, nothing disclosed
            raise InvalidRequest("starting_after is not the id of one of your activity entries",
                                 details={"starting_after": ["no activity entry of yours has this id"]})
        before = (created_at, starting_after)
    limit = max(1, min(LIST_MAX_LIMIT, int(limit)))
    rows = store.list_rows(customer_id, livemode=livemode, target_hashes=hashes, before=before, limit=limit + 1,
                           **filters)
    return rows[:limit], len(rows) > limit


def list_entries(customer_id: str, *, livemode: bool, action: str | None = None, key_id: str | None = None,
                 resource_id: str | None = None, created_after=None, created_before=None,
                 target: str | None = None, limit: int = LIST_DEFAULT_LIMIT,
                 starting_after: str | None = None) -> dict:
    """The body of ``GET /activity``: ``{ok, data, has_more}``, newest first by ``(created_at,
    id)`` (D17's cursor: ``starting_after`` is the last ``activity_id`` of the previous page),
    the customer's entries of the calling key's mode only. Time bounds are exclusive."""
    rows, has_more = _page(customer_id, livemode=livemode, limit=limit, starting_after=starting_after,
                           target=target, action=action, key_id=key_id, resource_id=resource_id,
                           created_after=created_after, created_before=created_before)
    return {"ok": True, "data": [_entry(row) for row in rows], "has_more": has_more}


def portal_entries(customer_id: str, *, livemode: bool | None = None, limit: int = 50,
                   starting_after: str | None = None, target: str | None = None, **filters) -> dict:
    """The portal's page: the same filters, both modes unless one is asked for; ``next`` is the
    cursor of the following page (None on the last)."""
    rows, has_more = _page(customer_id, livemode=livemode, limit=limit, starting_after=starting_after,
                           target=target, **filters)
    entries = [_entry(row) for row in rows]
    return {"entries": entries, "next": entries[-1]["activity_id"] if has_more and entries else None}


def export_entries(customer_id: str, *, livemode: bool | None = None, target: str | None = None,
                   **filters) -> Iterator[dict]:
    """Every entry matching the filters, newest first (the portal's CSV), read a batch at a time.
    The filters are checked before the first row is read (an invalid target raises here)."""
    hashes = target_filter(target)

    def entries():
        for row in store.all_rows(customer_id, livemode=livemode, target_hashes=hashes, **filters):
            yield _entry(row)
    return entries()


# --- the audit export: every entry once, oldest first, resumable --------------------------------

EXPORT_DEFAULT_LIMIT, EXPORT_MAX_LIMIT = 1000, 1000
_CURSOR_TIME = "%Y%m%dT%H%M%S%f"
# Before every entry: an export started without a cursor resumes from here.
START = ("0", datetime.min, "")  # noqa: DTZ901 (the database keeps naive UTC times)


def encode_cursor(position: tuple[str, datetime, str]) -> str:
    """The opaque cursor of an export position ``(xact, created_at, id)``."""
    xact, created_at, entry_id = position
    raw = f"{xact}.{created_at.strftime(_CURSOR_TIME)}.{entry_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[str, datetime, str]:
    """The position a cursor names; a cursor this service did not make is a 400."""
    if cursor is None:
        return START
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        xact, moment, entry_id = raw.split(".")
        position = xact, datetime.strptime(moment, _CURSOR_TIME), entry_id
    except ValueError:  # UnicodeDecodeError and binascii.Error are ValueErrors
        position = None
    if position is None or not xact.isdigit() or len(xact) > 20 or len(entry_id) > 40:
        raise InvalidRequest("cursor is not a cursor of the activity export",
                             details={"cursor": ["use the X-Next-Cursor of a previous export page"]})
    return position


@dataclass(frozen=True)
class ExportPage:
    entries: list[dict]
    next_cursor: str  # where the next page starts; the same cursor when nothing new was ready
    has_more: bool  # the page is full: more entries are ready now


def export_page(customer_id: str, *, livemode: bool, cursor: str | None = None,
                limit: int = EXPORT_DEFAULT_LIMIT) -> ExportPage:
    """One page of ``GET /activity/export``: the customer's entries of the key's mode in the order
    they were written (oldest first), after ``cursor``.

    Resumable with nothing lost or repeated while entries are being written: an entry's time and
    id are chosen before the transaction that writes it commits, and commits come in no order, so
    a cursor on time or id could pass an entry that commits a moment later behind it. The page
    holds only entries written by transactions older than the oldest one still running
    in this database (``store.export_watermark``), ordered by that transaction's id: every such transaction has
    ended, so no entry can ever appear behind the cursor. An entry shows up once every call that
    began before it has finished (usually well under a second; a long transaction writing to the
    database holds the export back, it never makes it skip)."""
    position = decode_cursor(cursor)
    limit = max(1, min(EXPORT_MAX_LIMIT, int(limit)))
    rows = store.export_rows(customer_id, livemode=livemode, after=position, limit=limit)
    if rows:
        last = rows[-1]
        position = (last[-1], last[1], last[0])
    return ExportPage([_entry(row[:-1]) for row in rows], encode_cursor(position), len(rows) == limit)


# --- retention -------------------------------------------------------------------------------

def retention_days() -> int:
    return int(runtime.config["ACTIVITY_RETENTION_DAYS"])


def prepare_partitions(now: datetime, days_ahead: int = PARTITION_DAYS_AHEAD, *, while_writing: bool = False) -> int:
    """Make the partitions of today and the ``days_ahead`` next days that do not exist yet;
    how many were made. An entry of a day without one goes to the DEFAULT partition (nothing
    is lost) and moves into the day's partition when it is made.

    ``while_writing`` (the periodic job, which runs while the service writes): today is left
    out. A day's partition attached while that day's entries are being written refuses one
    (PostgreSQL routes it to the DEFAULT partition, then finds the day's range taken from it),
    so only days still to come are made then; a day that began without one (the job down for
    a week) keeps its entries in the DEFAULT partition until the retention removes them."""
    first = 1 if while_writing else 0
    wanted = [now.date() + timedelta(days=n) for n in range(first, days_ahead + 1)]
    if set(wanted) <= set(store.day_partitions()):  # the usual sweep: one catalog read
        return 0
    made = 0
    with transaction():
        store.lock_partitions(LOCK_TIMEOUT_MS)
        for day in wanted:
            made += store.create_day_partition(day)
    if made:
        log.info("activity log: %d day partition(s) made", made)
    return made


def expired_days(days: Iterable[date], now: datetime) -> list[date]:
    """The days whose every entry is older than the retention: a partition holds ``[day,
    day + 1)``, so it goes once ``day + 1 <= now - ACTIVITY_RETENTION_DAYS`` (entries are kept
    at least the retention, at most a day more)."""
    cutoff = now - timedelta(days=retention_days())
    return [day for day in days if datetime.combine(day + timedelta(days=1), datetime.min.time()) <= cutoff]


def expire(now: datetime) -> int:
    """Drop the day partitions past the retention (whole, a DDL drop) and remove the DEFAULT
    partition's entries past it; how many partitions were dropped."""
    cutoff = now - timedelta(days=retention_days())
    with transaction():
        store.lock_partitions(LOCK_TIMEOUT_MS)
        days = expired_days(store.day_partitions(), now)
        for day in days:
            store.drop_day_partition(day)
        stray = store.delete_default_before(cutoff)
    if days or stray:
        log.info("activity log: %d day partition(s) dropped, %d entries without a partition removed",
                 len(days), stray)
    return len(days)


def upkeep(now: datetime | None = None) -> dict:
    """The periodic job (``app.periodic``): the coming days' partitions made, the
    expired ones dropped. A failure (a table lock not granted in time) is one log line and
    waits for the job's next turn."""
    now = now or utcnow()
    report = {"activity_partitions_made": 0, "activity_partitions_dropped": 0}
    try:
        report["activity_partitions_made"] = prepare_partitions(now, while_writing=True)
        report["activity_partitions_dropped"] = expire(now)
    except Exception as exc:
        log.warning("activity log upkeep postponed to its next turn: %s", exc.__class__.__name__)
    return report

