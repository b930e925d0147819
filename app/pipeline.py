"""One accounted API call, whatever its route: authenticate → access (D21: expiry, allowlist,
scope) → idempotency (D9) → can pay (D3) → serve → charge (D3, D24, D25) → record (D20).

Every call of ``/api/v1`` goes through here and nowhere else, on one of two paths:
- ``authorize`` then ``account``: the steps one after the other. The view is the serve step
  (``Answerer.serve``); a service that charged the call in its own transaction (a creation, the
  account's read) says so in its ``Served.charge``, and the call is then not charged again;
- ``serve_scan_read`` / ``serve_bulk_read`` then ``account``: a read whose key look-up, rules,
  charge, activity entry and object are one statement (``app.billing.statements.served_reads.read_charged``, one
  round trip). Its conditions are built from ``KEY_RULES``, the same table whose predicates the
  other path runs (``keyauth``, ``access``, ``billing``), so the two cannot drift apart.

Each returns an explicit ``Outcome`` (who is charged what, which status, the activity entry
written), from which the HTTP adapter (``app.api_calls``) writes its answer and headers. Nothing
here knows Flask: what is HTTP (the error table, rendering a body) comes in as the ``Answerer``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, cast

from app.accounts import access, keyauth
from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.activity import entries as activity
from app.billing import charges, idempotency, quotas
from app.billing.limits import Limits, limits_for
from app.billing.statements import served_reads
from app.plumbing.db import CONNECTION_ERRORS
from app.plumbing.errors import Forbidden, InsufficientBalance, KeyRefused, NotFound, ServiceError
from app.plumbing.models import utcnow
from app.scans import reads

log = logging.getLogger(__name__)


# --- the key's rules, in Python and in SQL ------------------------------------------------------

@dataclass(frozen=True)
class Caller:
    """Who presents the key, for D21's check: the scope the call needs and the client's address."""

    scope: str
    address: str | None


@dataclass(frozen=True)
class KeyRule:
    """A rule a key must pass before its call is charged: ``holds``, the Python predicate every
    path but the served read runs, and ``sql``, its condition in the served read's statement
    (``app.accounts.statements.keys.KEY_CONDITIONS[name]``, on the values of ``rule_values``)."""

    name: str
    holds: Callable[[ApiKey, Caller, datetime], bool]

    @property
    def sql(self) -> str:
        return key_store.KEY_CONDITIONS[self.name]


KEY_RULES = (
    KeyRule("active", lambda key, caller, now: keyauth.is_active(key)),
    KeyRule("unexpired", lambda key, caller, now: not access.is_expired(key, now)),
    KeyRule("address_allowed", lambda key, caller, now: access.address_allowed(key.allowed_ips, caller.address)),
    KeyRule("scoped", lambda key, caller, now: access.has_scope(key, caller.scope)),
    KeyRule("billed", lambda key, caller, now: charges.is_billed(key.livemode)),
)
RULE_NAMES = tuple(rule.name for rule in KEY_RULES)
if set(RULE_NAMES) != set(key_store.KEY_CONDITIONS):
    raise RuntimeError("KEY_RULES and app.accounts.statements.keys.KEY_CONDITIONS must name the same rules")


def rule_values(caller: Caller, now: datetime) -> dict:
    """The named parameters of ``KEY_CONDITIONS``: the rules' values, as the Python side has them."""
    return {"now": now, "client_address": access.statement_address(caller.address), "scope": caller.scope,
            "any_scope": access.ANY_SCOPE, "billed_modes": charges.billed_modes()}


def still_allowed(key_id: str, caller: Caller, now: datetime | None = None) -> bool:
    """Whether the key still passes every rule of ``KEY_RULES`` for ``caller`` (one look-up by
    primary key): a call that stays open (a stream, a wait) asks again while it runs, so a key
    revoked, expired or narrowed since the call began stops getting what is made after."""
    held = key_store.conditions_hold([key_id], RULE_NAMES, rule_values(caller, now or utcnow())).get(key_id)
    return held is not None and all(held.values())


def may_be_charged(key: ApiKey, caller: Caller, now: datetime) -> bool:
    """Whether every rule of ``KEY_RULES`` holds: what the served read's statement decides."""
    return all(rule.holds(key, caller, now) for rule in KEY_RULES)


# --- what a call is, what its serve step answered, and its outcome -----------------------------

@dataclass(frozen=True)
class Request:
    """What the adapter read off the HTTP request, once: the call's facts."""

    method: str
    path: str
    scope: str
    client_address: str | None
    request_id: str | None
    action: str
    resource_id: str | None
    route: str | None = None  # as the OpenAPI document writes it (``/api/v1/scan/{scan_id}``); None: no route
    idempotency_key: str | None = None
    body: Callable[[], bytes] = bytes

    @property
    def caller(self) -> Caller:
        return Caller(self.scope, self.client_address)

    def note(self, status: int) -> str:
        """What the ledger row of this call charged with ``status`` says it paid for: the method
        and path of a served call; for a refused one the route and the status, so the customer's
        ledger never repeats an id that was not theirs. A read's is its route whatever its answer:
        its minute's reads of that endpoint are summed in one row (D24)."""
        if self.route is None:
            return f"{self.method} {self.path}"
        if charges.is_read(self.method):
            return f"{self.method} {self.route}"
        if 200 <= status < 300:
            return f"{self.method} {self.path}"
        return f"{self.method} {self.route} ({status})"


@dataclass(frozen=True)
class Charge:
    """What a call was charged: the balance after the charge (or, when nothing was, the balance
    the answer reports), the window usage and limits after it (None: read them), and
    ``credits``, what it cost (the activity entry says it)."""

    balance: int
    usage: quotas.Usage | None = None
    limits: Limits | None = None
    credits: int = 0


@dataclass
class Served:
    """What the serve step answered: its status and error code (a refusal), what its service
    charged in its own transaction (None: the pipeline charges the call if its answer is
    charged), what the activity entry says about its object, the entry its service wrote with
    its charge (D25), whether an ``Idempotency-Key`` replays it though it is no 202 (a watch's
    201), its body as a replay stores it, and ``stored``: the answer (status, text) a replay
    gives in its place (a creation answered 200 after waiting replays its 202, which reads nothing)."""

    status: int
    code: str | None = None
    charge: Charge | None = None
    subject: activity.Subject | None = None
    recorded: activity.Recorded | None = None
    replayable: bool = False
    text: Callable[[], str] = str
    stored: tuple[int, str] | None = None


class Answerer(Protocol):
    """The HTTP side of one call: the view, and the app's error table."""

    def serve(self, key: ApiKey) -> Served:
        """Run the view (a refusal it raises answered by the error table: ``refuse``)."""

    def refuse(self, exc: Exception) -> Served:
        """The error table's answer to ``exc``."""

    def unavailable(self) -> Served:
        """The answer of a call that could not be charged (the database is unreachable)."""

    def status_of(self, exc: Exception) -> int:
        """The status the error table gives ``exc``."""


@dataclass
class Outcome:
    """An accounted call's end: the key, the answer's status, who was charged what (``charge``,
    None: nothing, the balance read for the answer's headers), the activity entry written
    (``recorded``) and what it says about its object (``subject``), the balance, limits and usage
    the answer reports (None: could not be read); for a replayed ``Idempotency-Key`` the stored
    answer (status, body); ``answer``: the pipeline's own answer in place of the view's (the
    balance ran out before the charge, or the charge could not be written)."""

    key: ApiKey
    status: int
    charge: Charge | None = None
    recorded: activity.Recorded | None = None
    subject: activity.Subject | None = None
    replay: tuple[int, str] | None = None
    answer: Served | None = None
    balance: int | None = None
    usage: quotas.Usage | None = None
    limits: Limits | None = None

    @property
    def credits(self) -> int:
        return self.charge.credits if self.charge is not None else 0


# --- the steps -------------------------------------------------------------------------------------

def authorize(token: str, request: Request, status_of: Callable[[Exception], int]) -> ApiKey:
    """Authenticate ``token`` (``NotAuthenticated``, 401, nothing recorded) and check what the key
    may do (D21): a refusal is recorded, free, and raised before anything is claimed or charged."""
    key = keyauth.authenticate(token)
    try:
        access.check(key, scope=request.scope, client_address=request.client_address, now=utcnow())
    except KeyRefused as exc:
        _record(key, request, status_of(exc), credits=0)
        raise
    return key


def read(serve: Callable[..., ServedRead], token: str, object_id: str, request: Request,
         status_of: Callable[[Exception], int], *, entry: activity.ReadEntry,
         min_confidence: float | None = None) -> ServedRead:
    """A served read (``serve_scan_read`` or ``serve_bulk_read``: key, rules, charge, entry and
    object in one statement) of ``object_id`` by ``token``; D21's refusal of the key recorded
    (free) and raised, as ``authorize`` does. ``account`` then answers it."""
    try:
        notes = {status: request.note(status) for status in (200, 403, 404)}
        return serve(token, object_id, request.request_id, notes, caller=request.caller, entry=entry,
                     min_confidence=min_confidence)
    except KeyRefused as exc:
        _record(cast(ApiKey, exc.key), request, status_of(exc), credits=0)
        raise


def account(key: ApiKey, request: Request, answerer: Answerer, *, idempotent: bool,
            recorded: activity.Recorded | None = None) -> Outcome:
    """Claim or replay the call's ``Idempotency-Key`` (``idempotent``: a POST), refuse a balance
    below one call (D3), serve, charge the call unless its service did or its answer is free,
    read what the answer reports, settle the claim and record the call's activity entry (unless
    a charge wrote it: ``recorded``, a served read's; then only its status is corrected). An
    exception that leaves (an ``Idempotency-Key`` refused) is recorded with its status, then raised."""
    try:
        outcome = _answer(key, request, answerer, idempotent=idempotent)
    except Exception as exc:
        _record(key, request, answerer.status_of(exc), credits=0,
                recorded=recorded or getattr(exc, activity.RECORDED, None))
        raise
    _record(key, request, outcome.status, credits=outcome.credits, recorded=recorded or outcome.recorded,
            subject=outcome.subject)
    return outcome


def _answer(key: ApiKey, request: Request, answerer: Answerer, *, idempotent: bool) -> Outcome:
    claim = None
    if idempotent and request.idempotency_key is not None:
        state, *stored = idempotency.claim_request(key.customer_id, request.idempotency_key, request.path,
                                                   request.body(), livemode=key.livemode)
        if state != "new":  # a replay is free
            status, body = stored
            return _reported(Outcome(key, status, replay=(status, body)))
        claim = stored[0]
    try:
        served = _serve(key, answerer)
        outcome = _charge(key, request, answerer, served)
        if claim is not None:
            answered = outcome.answer or served
            status, text = answered.stored or (outcome.status, answered.text)
            idempotency.settle(claim, status, text, created=answered.replayable)
            claim = None
        return outcome
    finally:
        if claim is not None:  # a claim must not outlive a call that died before it was settled
            _release(claim)


def _serve(key: ApiKey, answerer: Answerer) -> Served:
    """Can pay, then the view; a refusal is answered by the error table, free when D20 says so."""
    try:
        charges.check_can_pay(key.customer.balance, key.livemode)
        return answerer.serve(key)
    except Exception as exc:  # the app's error table answers it (the unexpected ones as a logged 500)
        served = answerer.refuse(exc)
        if not charges.refusal_is_charged(getattr(exc, "code", None)):
            served.charge = Charge(key.customer.balance)
        if served.recorded is None:
            served.recorded = getattr(exc, activity.RECORDED, None)
        return served


def _charge(key: ApiKey, request: Request, answerer: Answerer, served: Served) -> Outcome:
    """Charge the call unless its service did or its answer is free (D3)."""
    outcome = Outcome(key, served.status, served.charge, served.recorded, served.subject)
    if served.charge is not None or not charges.call_is_charged(served.status, key.livemode):
        return _reported(outcome)
    entry = call_entry(key, request, served.status)
    try:
        balance, usage = charges.charge_call(key.customer_id, request.request_id, utcnow(),
                                             request.note(served.status),
                                             entry=entry.row(credits=charges.CALL_PRICE, subject=served.subject),
                                             read_of=key.livemode if charges.is_read(request.method) else None)
    except CONNECTION_ERRORS:
        # The call cannot be charged, so it is not served: D3 charges every 2xx/400/403/404
        # and no 5xx. (The charge is one transaction: nothing of it was written.)
        log.error("database unavailable while charging this call")  # noqa: TRY400 - an outage, not a bug: no traceback
        unavailable = answerer.unavailable()
        return _reported(Outcome(key, unavailable.status, answer=unavailable))
    if balance is None:
        # The balance ran out between the check and this charge: the call is not served.
        balance = charges.balance_of(key.customer_id)
        short = answerer.refuse(InsufficientBalance(balance))
        return _reported(Outcome(key, short.status, Charge(balance), answer=short))
    outcome.charge = Charge(balance, usage, credits=charges.CALL_PRICE)
    outcome.recorded = entry.recorded()
    return _reported(outcome)


def _reported(outcome: Outcome) -> Outcome:
    """The balance, limits and window usage the answer reports (D8); a failure to read them
    leaves them None (the adapter then writes no such header), never a changed answer."""
    charge = outcome.charge
    key = outcome.key
    try:
        outcome.balance = charge.balance if charge is not None else charges.balance_of(key.customer_id)
        # A test key's answers report its own windows (D15: counted apart from live scans).
        outcome.usage = (charge.usage if charge is not None else None) \
            or quotas.window_usage(key.customer_id, utcnow(), key.livemode)
        outcome.limits = (charge.limits if charge is not None else None) or limits_for(key.customer)
    except Exception:
        log.exception("could not finish the accounting of this call")
    return outcome


def _release(record_id) -> None:
    try:
        idempotency.release(record_id)
    except Exception:
        log.exception("could not release idempotency claim %s", record_id)


def call_entry(key: ApiKey, request: Request, status: int) -> activity.CallEntry:
    """This call's activity entry, for the statement or transaction that charges the call to
    write with its charge (D25); ``status``: the answer the call gives when served."""
    return activity.call_entry(customer_id=key.customer_id, livemode=key.livemode, key_id=key.id,
                               action=request.action, resource_id=request.resource_id,
                               client_address=request.client_address, request_id=request.request_id, status=status)


def _record(key: ApiKey, request: Request, status: int, *, credits: int,
            recorded: activity.Recorded | None = None, subject: activity.Subject | None = None) -> None:
    """The call's activity log entry, unless its charge wrote it (``entries.record_once``)."""
    activity.record_once(recorded, what="call", status=status, customer_id=key.customer_id, livemode=key.livemode,
                         key_id=key.id, action=request.action, credits=credits, resource_id=request.resource_id,
                         client_address=request.client_address, request_id=request.request_id, subject=subject)


# --- served reads: authentication, charge and read in one statement ---------------------
# A read is always charged once its key passes KEY_RULES and its balance covers it (200, 403
# and 404 are all charged, D3), so the key look-up, the conditional charge with its ledger
# row, the call's activity log entry (D20), the quota windows the answer reports (D8) and the
# scan (or the batch and its scans) are one statement (``app.billing.statements.served_reads.read_charged``): one
# round trip and one commit per read, where authentication, read, charge and entry took four.
# A key whose mode is not billed (a test key) is charged nothing by it and has its read run
# the rules one after the other (``_serve_in_turn``).

@dataclass
class ServedRead:
    """A read: its body, or the refusal it answers (402, 403, 404); with the balance and quota
    usage after its charge (None when it was not charged)."""

    key: ApiKey
    body: dict | None = None
    error: ServiceError | None = None
    balance: int | None = None
    usage: quotas.Usage | None = None
    recorded: activity.Recorded | None = None  # the entry the statement wrote (None: ``account`` writes one)

    @property
    def credits(self) -> int:
        """What the read cost: a call's price when it was charged (its balance is known)."""
        return charges.CALL_PRICE if self.balance is not None else 0

    @property
    def charge(self) -> Charge | None:
        """What the read was charged (None: nothing; ``account`` then charges a test key nothing)."""
        return Charge(self.balance, self.usage, credits=self.credits) if self.balance is not None else None


@dataclass(frozen=True)
class _ReadKind:
    bulk: bool
    what: str
    body_of: Callable = field(repr=False)
    read: Callable = field(repr=False)


_SCAN = _ReadKind(False, "scan", lambda scan, entries, now, minimum: reads.scan_view(
    scan, now, raw_result=True, min_confidence=minimum), reads.read_scan)
_BULK = _ReadKind(True, "bulk batch", lambda batch, entries, now, minimum: reads.bulk_body(batch, entries, minimum),
                  reads.read_bulk)


def serve_scan_read(token: str, scan_id: str, request_id: str | None, notes: dict[int, str], *,
                    caller: Caller, entry: activity.ReadEntry, min_confidence: float | None = None) -> ServedRead:
    """``GET /scan/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401) and D21's
    refusals (``access.check``), else the read.
    ``notes``: the charge's ledger note for an answer 200, 403 and 404 (``charges.charge_call``);
    ``entry``: the call's activity entry, written by the statement when it may charge the key
    (``ServedRead.recorded``); ``min_confidence``: the read's own (D29)."""
    return _serve_read(token, scan_id, request_id, notes, _SCAN, caller, entry, min_confidence)


def serve_bulk_read(token: str, bulk_id: str, request_id: str | None, notes: dict[int, str], *,
                    caller: Caller, entry: activity.ReadEntry, min_confidence: float | None = None) -> ServedRead:
    """``GET /scan/bulk/{id}`` for the bearer ``token``: raises ``NotAuthenticated`` (401) and
    D21's refusals, else the read (``entry`` as for ``serve_scan_read``)."""
    return _serve_read(token, bulk_id, request_id, notes, _BULK, caller, entry, min_confidence)


def _serve_read(token, object_id, request_id, notes, kind: _ReadKind, caller: Caller,
                entry: activity.ReadEntry, min_confidence: float | None = None) -> ServedRead:
    now = utcnow()
    token_digest = keyauth.digest_of(token)
    notes = {status: charges.call_note(note) for status, note in notes.items()}
    # The statement charges only a key that passes KEY_RULES; the Python predicates then name
    # the refusal of one it did not charge (401, D21's: free, like a 401).
    found = served_reads.read_charged(
        bulk=kind.bulk, token_digest=token_digest, object_id=object_id, rules=RULE_NAMES,
        rule_values=rule_values(caller, now), now=now, starts=quotas.window_starts(now),
        charge=served_reads.ReadCharge(
            price=charges.CALL_PRICE, reason=charges.READS_REASON, notes=(notes[404], notes[200], notes[403]),
            entry=(entry.id, entry.action, entry.resource_id, entry.client_address, entry.request_id),
            statuses=entry.statuses))
    key = keyauth.live_key(found.key, token_digest, now)
    access.check(key, scope=caller.scope, client_address=caller.address, now=now)
    if not charges.is_billed(key.livemode):  # a test key: nothing was charged; its read as before (D15)
        return _serve_in_turn(key, object_id, request_id, notes,
                              lambda *args: kind.read(*args, min_confidence=min_confidence), now, entry)
    recorded = None if found.entry_status is None else activity.Recorded(entry.id, now, found.entry_status)
    if found.balance is None:  # nothing was charged: the balance is short (read again: the row may have just changed)
        return ServedRead(key, error=InsufficientBalance(charges.balance_of(key.customer_id)), recorded=recorded)
    served = ServedRead(key, balance=found.balance, usage=quotas.usage_from(found.windows, now), recorded=recorded)
    try:
        row = reads.owned_row(found.found, kind.what, customer_id=key.customer_id, livemode=key.livemode)
        served.body = kind.body_of(row, found.entries, now, min_confidence)
    except (NotFound, Forbidden) as exc:
        served.error = exc
    return served


def _serve_in_turn(key, object_id, request_id, notes, read, now, entry: activity.ReadEntry) -> ServedRead:
    """Authentication done: the balance check, the read and the charge one after the other
    (test keys, which are charged nothing and read only test data: D15)."""
    if charges.is_billed(key.livemode) and key.customer.balance < charges.CALL_PRICE:
        return ServedRead(key, error=InsufficientBalance(key.customer.balance))
    served = ServedRead(key)
    try:
        served.body = read(key.customer_id, object_id, key.livemode)
    except (NotFound, Forbidden) as exc:
        served.error = exc
    if not charges.is_billed(key.livemode):
        return served  # the adapter reports the live balance and the test windows, as for any test call
    status = 200 if served.error is None else 404 if isinstance(served.error, NotFound) else 403
    missing, owned, other, _ = entry.statuses
    call = entry.for_key(key, status={200: owned, 404: missing, 403: other}[status])
    served.balance, served.usage = charges.charge_call(key.customer_id, request_id, now, notes[status],
                                                       read_of=key.livemode,
                                                       entry=call.row(credits=charges.CALL_PRICE))
    if served.balance is None:  # the balance ran out since the key was read: not served
        return ServedRead(key, error=InsufficientBalance(charges.balance_of(key.customer_id)))
    served.recorded = call.recorded()
    return served
