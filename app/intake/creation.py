"""A scan's creation: admission (limits + charge + rows in one transaction), engine submission and
the reversal of a reservation. Reads are ``app.scans.reads``; bulk input validation
``app.intake.bulk``; the price of a creation ``charges.admission_cost``.

Admission follows D3, D7, D8 and D13:
1. One write transaction serialises a customer's admissions (``SELECT ... FOR UPDATE``
   of the customer row). Inside it:
   balance, in-flight, hour and day checks, the scan rows and the charge with its
   ledger row. The scans exist, ``queued``, before the engine is called, so the
   in-flight limit holds while that call is pending.
2. The engine call, outside the transaction (no lock is held across the network).
3. On engine failure the reservation is reversed: the scans are deleted and a refund
   ledger row cancels the charge (502, no scan, no net charge). On success the
   engine's ids are stored, each with its first look due (D24: no job to dispatch).
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from app.accounts import access
from app.accounts.statements import keys as key_store
from app.activity import entries
from app.billing import charges, quotas
from app.billing.limits import Limits, limits_for
from app.intake import bulk
from app.plumbing import engine
from app.plumbing.db import transaction, transaction_with_known_outcome
from app.plumbing.errors import EngineUnavailable, Forbidden, InsufficientBalance, NotFound, NothingToRerun
from app.plumbing.metrics import SCANS_CREATED
from app.plumbing.models import new_id, utcnow
from app.privacy import suppressions
from app.scans import purposes, required
from app.scans import statements as scan_store
from app.scans.models import COMPLETED, QUEUED, BulkBatch
from app.scans.results import failed_source_ids
from app.sources import health as source_health
from app.targets.identity import normalize_or_refuse
from app.tracking import looks, sandbox_engine, states

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MatchRules:
    """What a creation asked of its scans' findings (D29): ``min_confidence`` (findings under it
    are left out of what the customer sees) and ``required`` (the match rule the scan must meet
    for its creation to be paid); each None when not asked. Kept on every scan it creates."""

    min_confidence: float | None = None
    required: str | None = None

    @classmethod
    def of(cls, body: dict) -> MatchRules:
        """The rules of a creation's parsed body (``min_confidence`` already a number 0 to 1)."""
        return cls(body.get("min_confidence"), body.get("required"))

    def checked(self) -> MatchRules:
        """The rules with ``required`` parsed (400 ``invalid_required`` naming the position)."""
        return MatchRules(self.min_confidence, required.check(self.required))


NO_RULES = MatchRules()


class AdmissionPart(Protocol):
    """What a caller adds to a creation's admission, in its transaction and under the customer's
    lock: a watch's rows and limit (``app.watches.admission``), so that scans know no watch."""

    def check(self, customer, livemode: bool, now: datetime) -> None:
        """Refuse or prepare, before the quotas are checked."""

    def writes(self) -> list:
        """Statements written with the scans' rows."""

    def watch_of(self, position: int) -> str | None:
        """The watch the scan at ``position`` is made for (its ``watch_id``)."""


@dataclass
class Outcome:
    """A served creation: its body, the balance after its charge, and the limits and
    window usage the answer reports (the HTTP layer turns them into headers)."""

    body: dict
    balance: int
    limits: Limits
    usage: quotas.Usage
    cost: int = 0  # what the admission charged
    subject: entries.Subject | None = None  # what the activity log's entry says about it (D20)
    recorded: entries.Recorded | None = None  # the entry the admission wrote with its charge (D25)


def engine_for(livemode: bool):
    """Which engine runs a scan (D15): the engine at ENGINE_URL for live scans, the sandbox
    inside the service for test ones. Submission asks it; the batch looks split their claims
    by the same rule (``looks._look``)."""
    return engine if livemode else sandbox_engine


@dataclass(frozen=True)
class Admission:
    """What step 1 of a creation reserved (``_admit``): the scans' rows, their batch (a bulk call's),
    what it charged and the balance after, and the limits and window usage the answer reports."""

    rows: list[dict]
    batch: BulkBatch | None
    cost: int
    balance: int
    limits: Limits
    usage: quotas.Usage
    purpose: str | None
    case_ref: str | None

    @property
    def batch_id(self) -> str:
        """The batch's id: a bulk call's admission always makes one."""
        if self.batch is None:
            raise ValueError("this admission is not a bulk call's")
        return self.batch.id

    def outcome(self, body: dict, recorded: entries.Recorded | None) -> Outcome:
        """The served creation: ``body`` with the call's entry about the batch (or its one scan),
        carrying the hashes of every target it queued (D20)."""
        subject = entries.Subject(self.batch.id if self.batch else self.rows[0]["id"],
                                   entries.hashes_of((r["kind"], r["target"]) for r in self.rows),
                                   self.purpose, self.case_ref)
        return Outcome(body, self.balance, self.limits, self.usage, self.cost, subject, recorded)


def _admit(customer_id, api_key_id, items, *, request_id, bulk_total=None, livemode=True, purpose=None,
           case_ref=None, rerun_of=None, entry: entries.CallEntry | None = None,
           part: AdmissionPart | None = None, match: MatchRules = NO_RULES) -> Admission:
    """Step 1: check and reserve in one transaction.
    ``entry``: the call's activity entry, written in the transaction that charges it (D25).
    ``part``: what the caller adds under the same lock (a watch's rows, D28).

    Its round trips: BEGIN; the lock with the counts; the rows, the window counter, the entry
    and the charge (one batch); COMMIT."""
    now = utcnow()
    n = len(items)
    cost = charges.admission_cost(n, bulk=bulk_total is not None, livemode=livemode)
    rows: list[dict] = []
    batch = None

    def committed() -> bool:  # the first row written, looked up after a COMMIT whose answer was lost
        if batch is not None:
            return scan_store.batch_exists(batch.id)
        return bool(rows) and scan_store.scan_exists(rows[0]["id"])

    with transaction_with_known_outcome(committed):
        customer, usage = quotas.lock_and_count(customer_id, now, livemode)
        if customer.balance < cost:
            raise InsufficientBalance(customer.balance, cost)
        limits = limits_for(customer)
        if part is not None:
            part.check(customer, livemode, now)
        if n:
            quotas.check(customer, limits, n, now, bulk=bulk_total is not None, livemode=livemode, usage=usage)
        writes = part.writes() if part is not None else []
        if bulk_total is not None:
            batch = BulkBatch(id=new_id("blk"), customer=customer_id, api_key=api_key_id, total=bulk_total,
                              created_at=now)
            writes.append(scan_store.insert_batch_statement({"id": batch.id, "customer": customer_id,
                                                             "api_key": api_key_id, "total": bulk_total,
                                                             "created_at": now, "livemode": livemode,
                                                             "purpose": purpose, "case_ref": case_ref}))
        for position, (index, (kind, target)) in enumerate(items):
            scan_id = new_id("scn")
            rows.append({
                "id": scan_id, "customer": customer_id, "api_key": api_key_id, "bulk": batch.id if batch else None,
                "bulk_index": index if batch else None, "kind": kind, "target": target, "status": QUEUED,
                "created_at": now, "livemode": livemode,
                "purpose": purpose, "case_ref": case_ref, "rerun_of": rerun_of,
                "watch_id": part.watch_of(position) if part is not None else None,
                "min_confidence": match.min_confidence, "required": match.required,
            })
        if rows:
            writes.append(scan_store.insert_scans_statement(rows))
            writes.append(quotas.count_created_statement(customer_id, now, n, livemode))
        if entry is not None:
            subject = entries.Subject(batch.id if batch else rows[0]["id"],
                                       entries.hashes_of((r["kind"], r["target"]) for r in rows), purpose, case_ref)
            writes.append(entries.entry_statement(entry, credits=cost, subject=subject))
        if charges.is_billed(livemode):
            balance = charges.apply_after(writes, customer_id, -cost, "bulk" if batch else "scan", in_flight=n,
                                          request_id=request_id,
                                          scan_id=rows[0]["id"] if rows and not batch else None,
                                          bulk_id=batch.id if batch else None)
            if balance is None:  # cannot happen under the lock; never let it pass silently
                raise InsufficientBalance(customer.balance, cost)
        else:  # test mode: no charge, no ledger row; the answer shows the live balance unchanged
            balance = customer.balance
            scan_store.run_together(writes + [quotas.move_in_flight_statement(customer_id, livemode, n)])
    # Counted under the lock, plus the scans this call created: ``r`` counts them (D8).
    return Admission(rows, batch, cost, balance, limits, quotas.with_new_scans(usage, n, now), purpose, case_ref)


def _reverse(customer_id, rows, batch, cost, request_id, livemode=True, recorded=None) -> None:
    """Undo a reservation whose engine submission failed: no scan, no net charge (D13); the
    call's entry (``recorded``) says it cost nothing, in the same transaction."""
    with transaction():
        if recorded is not None:
            entries.refunded(recorded)
        if rows:
            scan_store.delete_scans([r["id"] for r in rows])
        if batch:
            scan_store.delete_batch(batch.id)
        charges.move_reservation(customer_id, livemode, cost, "refund", in_flight=-len(rows), request_id=request_id,
                                 bulk_id=batch.id if batch else None,
                                 scan_id=rows[0]["id"] if rows and not batch else None,
                                 note="engine submission failed")
        if rows:  # after the customer's row, as admissions lock them (quotas: lock order)
            quotas.count_created(customer_id, rows[0]["created_at"], -len(rows), livemode)


def _deadline(row: dict):
    return states.deadline_of(row["created_at"], livemode=row["livemode"], kind=row["kind"], target=row["target"])


def _record_submissions(rows, answers) -> None:
    """Store the engine's ids and etas for all scans in one UPDATE, whatever their number, with
    each one's first look (D24), and whether the engine calls back (E7: a callback makes the
    scan due at once, so its first look may wait longer)."""
    now = utcnow()
    scan_store.record_submissions([
        (r["id"], a["id"], a["recipes"], now + timedelta(seconds=a["eta_seconds"]),
         looks.first_look_at(now, a["eta_seconds"], _deadline(r), callbacks=_calls_back(a)), _calls_back(a))
        for r, a in zip(rows, answers)])


def _calls_back(answer: dict) -> bool:
    return bool(answer.get("callbacks"))  # the sandbox's answers never say so


def _submit(customer_id, rows, batch, cost, request_id, livemode=True, sources=None, recorded=None) -> list[dict]:
    """``sources``: a re-run of those sources only (E6); ``recorded``: the call's entry."""
    items = [{"target": r["target"], "kind": r["kind"], "reference": r["id"]} for r in rows]
    # D30: a quarantined source is left out of live submissions (the sandbox has no health); read
    # once per kind, not per item.
    asked = ({kind: source_health.asked_sources(kind, sources) for kind in {item["kind"] for item in items}}
             if livemode else {item["kind"]: sources for item in items})
    for item in items:
        if asked[item["kind"]] is not None:
            item["sources"] = asked[item["kind"]]
    backend = engine_for(livemode)
    try:
        answers = [backend.submit(**items[0])] if batch is None else backend.submit_batch(items)
    except engine.EngineError:  # the sandbox's errors are EngineErrors too
        _reverse(customer_id, rows, batch, cost, request_id, livemode, recorded)
        raise EngineUnavailable() from None
    _record_submissions(rows, answers)
    return answers


def _queue(customer, admitted: Admission, *, request_id, livemode, entry: entries.CallEntry | None,
           sources=None, undo: Callable[[], None] | None = None) -> tuple[list[dict], entries.Recorded | None]:
    """Step 2 of every creation: submit what ``_admit`` reserved (``sources``: a re-run's), its
    reservation given back if the engine refuses (and ``undo`` run: a new watch goes with it), then
    counted. Returns the engine's answers and the call's entry as written with the charge (D25);
    an exception raised once it is written carries it (``entries.entry_follows``)."""
    recorded = entry.recorded() if entry is not None else None
    if not admitted.rows:  # a bulk call whose every target was refused: nothing to submit
        return [], recorded
    try:
        with entries.entry_follows(recorded):
            answers = _submit(customer.id, admitted.rows, admitted.batch, admitted.cost, request_id, livemode,
                              sources=sources, recorded=recorded)
    except EngineUnavailable:
        if undo is not None:
            undo()
        raise
    _count_created(admitted.rows, customer, admitted.batch)
    return answers, recorded


def _created(admitted: Admission, answer: dict, **extra) -> dict:
    """The body of a single scan's creation."""
    row = admitted.rows[0]
    return {"ok": True, "scan_id": row["id"], "livemode": row["livemode"], "kind": row["kind"],
            "recipes_to_run": answer["recipes"], "eta_seconds": answer["eta_seconds"], **extra}


def _count_created(rows, customer, batch=None) -> None:
    """Metrics and the log: a line per single scan, one line per bulk batch (its scans are
    the batch's rows; a hundred lines per call cost more than the call's SQL)."""
    kinds = Counter(row["kind"] for row in rows)
    for kind, count in kinds.items():
        SCANS_CREATED.labels(kind=kind, tier=customer.tier).inc(count)
    if batch is None:
        log.info("scan created (%s)", rows[0]["kind"], extra={"scan_id": rows[0]["id"]})
    else:
        log.info("bulk %s created: %d scans (%s)", batch.id, len(rows),
                 ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())))


def create_scan(customer, api_key_id, target, kind, *, request_id, livemode=True, purpose=None,
                case_ref=None, entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES) -> Outcome:
    """Queue one scan (a test scan when ``livemode`` is False, D15) with its purpose and case
    reference (D20); the body has no URLs (the HTTP layer adds ``poll_url``). ``entry``: the
    call's activity entry, written with the charge (D25); an exception raised once it is written
    carries it (``entries.RECORDED``)."""
    kind, target = normalize_or_refuse(target, kind)
    purpose, case_ref = purposes.check(purpose, case_ref, required=customer.require_purpose)
    return create_one(customer, api_key_id, kind, target, request_id=request_id, livemode=livemode, purpose=purpose,
                      case_ref=case_ref, entry=entry, match=match.checked())


def create_one(customer, api_key_id, kind, target, *, request_id, livemode, purpose, case_ref,
               entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES,
               part: AdmissionPart | None = None, undo: Callable[[], None] | None = None,
               rerun_of: str | None = None, sources=None) -> Outcome:
    """The tail of every creation of one scan (a scan, a watch's, a re-run), its target valid and
    its purpose checked: an opt-out refused (403, before anything is reserved or charged), then
    admitted with ``part``, submitted (``sources``: a re-run's) and counted; ``undo`` runs if the
    engine refuses. The body is a creation's, with its ``watch_id`` or ``rerun_of``."""
    suppressions.check(kind, target)
    admitted = _admit(customer.id, api_key_id, [(0, (kind, target))], request_id=request_id, livemode=livemode,
                      purpose=purpose, case_ref=case_ref, rerun_of=rerun_of, entry=entry, part=part, match=match)
    [answer], recorded = _queue(customer, admitted, request_id=request_id, livemode=livemode, entry=entry,
                                sources=sources, undo=undo)
    extra = {"watch_id": part.watch_of(0)} if part is not None else {}
    if rerun_of is not None:
        extra["rerun_of"] = rerun_of
    return admitted.outcome(_created(admitted, answer, **extra), recorded)


def _why_nothing_to_rerun(status: str, *, erased: bool, quarantined: bool = False) -> str:
    """The one reason of ``NothingToRerun`` that applies, so the customer knows whether to wait,
    or that there is nothing left to do."""
    if status != COMPLETED:
        return f"this scan has no source to re-run: it is {status}, and only a completed scan can be re-run"
    if erased:
        return "this scan has no source to re-run: its target and result were erased"
    if quarantined:
        return "this scan's sources to re-run are quarantined: re-run it once they are healthy again"
    return "this scan has no source to re-run: every source answered"


def create_rerun(customer, api_key_id, scan_id, *, request_id, livemode=True,
                 entry: entries.CallEntry | None = None) -> Outcome:
    """Queue a new scan of a completed scan's target, restricted to the sources that could not
    answer (D23), with its purpose and case reference; admitted, charged and limited exactly as
    a creation. A scan of another mode is not found (D15), another customer's is forbidden; one
    not completed, or whose sources all answered, is ``NothingToRerun`` (409), free of charge."""
    original = scan_store.scan_by_id(scan_id)
    if original is None or original.livemode != livemode:
        raise NotFound("no scan with this id")
    if original.customer_id != customer.id:
        raise Forbidden("this scan belongs to another customer")
    result = json.loads(original.result_json) if original.status == COMPLETED and original.result_json else None
    sources = source_health.rerun_sources(result) if livemode else failed_source_ids(result)
    target = original.target  # None once erased (D20), when it has no result either
    if not sources or target is None:
        raise NothingToRerun(_why_nothing_to_rerun(original.status, erased=target is None,
                                                   quarantined=livemode and bool(source_health.rerun_wanted(result))))
    purpose, case_ref = purposes.check(original.purpose, original.case_ref, required=customer.require_purpose)
    # Opted out since: 403, free, as a creation. A re-run asks what its original asked of its findings (D29).
    return create_one(customer, api_key_id, original.kind, target, request_id=request_id, livemode=livemode,
                      purpose=purpose, case_ref=case_ref, entry=entry, rerun_of=original.id, sources=sources,
                      match=MatchRules(original.min_confidence, original.required))


def portal_rerun(customer, scan_id, *, request_id,
                 entry_for: Callable[[bool], entries.CallEntry] | None = None) -> Outcome:
    """A re-run asked for in the portal, made with the key that created the scan, in its mode: that
    key must still be able to create scans (active, not expired, ``scans:write``), so a person
    cannot spend a key that was revoked or narrowed. Otherwise as ``create_rerun``. ``entry_for``
    makes the portal action's entry in the scan's mode (only known here), written with the charge."""
    original = scan_store.owned_scan(scan_id, customer.id)
    if original is None:
        raise NotFound("no scan with this id")
    key = key_store.get(original.api_key_id)
    if not key.is_live or access.is_expired(key, utcnow()) or not access.has_scope(key, access.SCANS_WRITE):
        raise Forbidden("the API key that created this scan can no longer create scans: re-run it through "
                        "the API with another key")
    return create_rerun(customer, key.id, scan_id, request_id=request_id, livemode=original.livemode,
                        entry=entry_for(original.livemode) if entry_for is not None else None)


def screen_bulk(customer, targets, purpose, case_ref) -> tuple[list, list, str | None, str | None]:
    """A bulk call's input, as every bulk call takes it (D7): the call refused whole (no targets,
    too many, a tier without bulk calls, a purpose refused), else ``(accepted, rejected, purpose,
    case_ref)``: ``(index, (kind, target))`` per valid target, and the rejected entries (invalid or
    opted out, free) in request order."""
    bulk.check_call(customer.tier, targets)
    purpose, case_ref = purposes.check(purpose, case_ref, required=customer.require_purpose)
    accepted, rejected = bulk.split_targets(targets)
    accepted, suppressed = suppressions.split_suppressed(accepted)
    return accepted, sorted(rejected + suppressed, key=lambda entry: entry["index"]), purpose, case_ref


def create_many(customer, api_key_id, accepted, total, *, request_id, livemode, purpose, case_ref,
                entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES,
                part: AdmissionPart | None = None, undo: Callable[[], None] | None = None,
                ) -> tuple[Admission, entries.Recorded | None]:
    """The tail of every bulk creation (scans, watches), its input screened (``screen_bulk``):
    the ``accepted`` targets of ``total`` admitted as one batch with ``part``, submitted and
    counted; ``undo`` runs if the engine refuses. The caller makes the body from the admission."""
    admitted = _admit(customer.id, api_key_id, accepted, request_id=request_id, bulk_total=total, livemode=livemode,
                      purpose=purpose, case_ref=case_ref, entry=entry, part=part, match=match)
    _, recorded = _queue(customer, admitted, request_id=request_id, livemode=livemode, entry=entry, undo=undo)
    return admitted, recorded


def create_bulk(customer, api_key_id, targets, *, request_id, livemode=True, purpose=None,
                case_ref=None, entry: entries.CallEntry | None = None, match: MatchRules = NO_RULES) -> Outcome:
    """Queue a bulk batch, every scan with the call's purpose and case reference (D20) and its
    ``min_confidence`` and ``required`` (D29); the body has no URLs (the HTTP layer adds the poll URLs)."""
    accepted, rejected, purpose, case_ref = screen_bulk(customer, targets, purpose, case_ref)
    admitted, recorded = create_many(customer, api_key_id, accepted, len(targets), request_id=request_id,
                                     livemode=livemode, purpose=purpose, case_ref=case_ref, entry=entry,
                                     match=match.checked())
    rows = admitted.rows
    body = {
        "ok": True, "bulk_id": admitted.batch_id, "livemode": livemode, "total": len(targets), "queued": len(rows),
        "rejected": rejected,
        "scans": [{"scan_id": r["id"], "livemode": livemode, "target": r["target"], "kind": r["kind"]} for r in rows],
    }
    return admitted.outcome(body, recorded)


def reverse_reservation(scan) -> bool:
    """Undo one scan reserved but never submitted (its creator died mid-call): delete it and
    refund what it cost (``charges.unsubmitted_scan_refund``)."""
    with transaction():
        deleted = scan_store.delete_unsubmitted(scan.id, QUEUED)
        if not deleted:
            return False
        charges.move_reservation(scan.customer_id, scan.livemode,
                                 charges.unsubmitted_scan_refund(bulk=scan.bulk_id is not None, livemode=scan.livemode),
                                 "refund", in_flight=-1, scan_id=scan.id, bulk_id=scan.bulk_id,
                                 note="reservation never submitted to the engine")
        quotas.count_created(scan.customer_id, scan.created_at, -1, scan.livemode)  # after the customer's row
        if scan.bulk_id and not scan_store.batch_has_scans(scan.bulk_id):
            scan_store.delete_batch(scan.bulk_id)
    return True
