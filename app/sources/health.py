"""Source health (D30): each source's status from the answers of completed scans and probes, its
quarantine, and what new submissions leave out.

- Counting: every completed live scan's source answers (``record_scans``, in the transaction that
  records its final state) and every probe's are added to per-minute counts by latency class
  (one upsert per batch of finals); no read counts anything.
- Judging (``evaluate``, the ``sources`` periodic job): over the last hour (from the source's
  ``counted_since`` on, reset when it is released), the share answered (not ``error``,
  ``rate_limited`` or ``timeout``) and the p95 latency (the upper bound of its latency class) give
  ``degraded`` (under 0.9 over at least 20 answers, or p95 over 10 s) or ``down`` (under 0.5 over at
  least 20); the last two probe rounds answered wrongly give ``broken``; else ``healthy``. A change
  is an event (``source.degraded`` / ``source.recovered``) to the endpoints and streams that list it.
- Quarantine: a ``down`` or ``broken`` source is quarantined by itself and released by itself
  after two right probe rounds in a row (an engine without probes: once its hour judges it
  neither down nor broken); an operator's quarantine is released by an operator only. A
  quarantined source is left out of new submissions and listed in the scan's sources as
  ``skipped`` with ``reason: "quarantined"``.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from redis.exceptions import RedisError

from app.plumbing import metrics, runtime
from app.plumbing.db import transaction
from app.plumbing.errors import InvalidRequest, NotFound
from app.plumbing.models import iso, utcnow
from app.scans.results import JustWritten, parsed_result
from app.sources import statements as store
from app.sources.event_kinds import SOURCE_DEGRADED, SOURCE_RECOVERED
from app.webhooks import outbox

HEALTHY, DEGRADED, DOWN, BROKEN = "healthy", "degraded", "down", "broken"
STATUSES = (HEALTHY, DEGRADED, DOWN, BROKEN)
QUARANTINING = (DOWN, BROKEN)
FAILED_STATUSES = ("error", "rate_limited", "timeout")
WINDOW = timedelta(hours=1)
MIN_ANSWERS = 20
DEGRADED_BELOW, DOWN_BELOW = 0.9, 0.5
SLOW_P95_MS = 10_000
WRONG_ROUNDS_BROKEN = 2
RIGHT_ROUNDS_RELEASE = 2
# Latency classes (upper bounds, ms); an answer slower than the last is in one class above it.
LATENCY_BOUNDS_MS = (100, 250, 500, 1000, 2000, 4000, 7000, 10_000, 15_000, 30_000, 60_000)
NO_LATENCY = -1
KEPT = timedelta(hours=25)  # the status page's day, and the hour before its first cell
AUTO, OPERATOR = "auto", "operator"
QUARANTINED_REASON = "quarantined"
# What submissions read of the sources (quarantine, kinds, names) is kept in each process and read
# again when a quarantine or release anywhere moved the generation (a Redis counter) on, or after
# CACHE_SECONDS at most (Redis down): a submission adds no database query.
CACHE_SECONDS = 5.0
# How long this process's copy is used without asking Redis whether another process moved the
# generation on: a quarantine made elsewhere reaches it within this. Asking at every call was a
# Redis round trip per completed scan (100 per batch look: an eighth of a look's time).
GENERATION_CHECK_SECONDS = 1.0
GENERATION_KEY = "scan-api:sources:generation"


def latency_class(latency_ms) -> int:
    if not isinstance(latency_ms, int) or isinstance(latency_ms, bool) or latency_ms < 0:
        return NO_LATENCY
    for index, bound in enumerate(LATENCY_BOUNDS_MS):
        if latency_ms <= bound:
            return index
    return len(LATENCY_BOUNDS_MS) - 1


def answered(status: str) -> bool:
    return status not in FAILED_STATUSES


# --- counting ---------------------------------------------------------------------------


def record_answers(answers: list[tuple[str, str, str, object]], at: datetime) -> None:
    """Count ``(source id, name, status, latency ms)`` answers given at ``at`` (skipped ones are no
    answer), in the caller's transaction."""
    counted = [a for a in answers if a[2] != "skipped"]
    if not counted:
        return
    minute = at.replace(second=0, microsecond=0)
    totals: Counter = Counter()
    good: Counter = Counter()
    for source_id, _, status, latency in counted:
        key = (source_id, minute, latency_class(latency))
        totals[key] += 1
        good[key] += answered(status)
    store.ensure([(source_id, name) for source_id, name, _, _ in counted], at)
    store.add_answers([(*key, totals[key], good[key]) for key in totals])
    for source_id in sorted({key[0] for key in totals}):
        metrics.count_source_answers(source_id, sum(n for key, n in totals.items() if key[0] == source_id),
                                     sum(n for key, n in good.items() if key[0] == source_id))


def answers_of(result: dict) -> list[tuple[str, str, str, object]]:
    """A normalised result's source answers ``(id, name, status, latency ms)``; the ones the
    service added (quarantined) are none."""
    return [(s["id"], s.get("name") or s["id"], s["status"], s.get("latency_ms"))
            for s in result.get("sources") or [] if isinstance(s, dict) and s.get("reason") != QUARANTINED_REASON]


def record_scans(scans: list, just_written: JustWritten | None = None) -> None:
    """Count the source answers of the scans that just completed (``states.announce``, after their
    commit). Live scans only: test scans' sources are the sandbox's, not the engine's.
    ``just_written``: the results as the look wrote them (``parsed_result``)."""
    answers = []
    for scan in scans:
        if scan.livemode and scan.result_json:
            answers += answers_of(parsed_result(scan, just_written))
    if answers:
        record_answers(answers, utcnow())


# --- judging ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Health:
    answers: int
    answered: int
    p95_latency_ms: int | None

    @property
    def ratio(self) -> float | None:
        return round(self.answered / self.answers, 4) if self.answers else None


def health_of(classes: dict[int, tuple[int, int]]) -> Health:
    total = sum(a for a, _ in classes.values())
    good = sum(g for _, g in classes.values())
    timed = sorted((c, a) for c, (a, _) in classes.items() if c != NO_LATENCY)
    count = sum(a for _, a in timed)
    p95 = None
    if count:
        seen = 0
        for latency, n in timed:
            seen += n
            if seen >= 0.95 * count:
                p95 = LATENCY_BOUNDS_MS[latency]
                break
    return Health(total, good, p95)


def judge(health: Health, probe_streak: int) -> str:
    """The status rule, in this one place."""
    if probe_streak <= -WRONG_ROUNDS_BROKEN:
        return BROKEN
    if health.answers >= MIN_ANSWERS and health.answered < DOWN_BELOW * health.answers:
        return DOWN
    if health.answers >= MIN_ANSWERS and health.answered < DEGRADED_BELOW * health.answers:
        return DEGRADED
    if health.p95_latency_ms is not None and health.p95_latency_ms > SLOW_P95_MS:
        return DEGRADED
    return HEALTHY


def _probed(source) -> bool:
    return bool(source.probes)


def _releases(source, status: str) -> bool:
    """Whether an automatic quarantine ends now: two right probe rounds in a row, or (a source
    without probes) its hour no longer judges it down or broken."""
    if not source.quarantined or source.quarantined_by != AUTO:
        return False
    if _probed(source):
        return source.probe_streak >= RIGHT_ROUNDS_RELEASE
    return status not in QUARANTINING


def evaluate(now: datetime | None = None) -> dict:
    """Judge every source now: status changes (with their events), automatic quarantines and
    releases. Returns counts by action."""
    now = now or utcnow()
    counts = store.counts_since(now - WINDOW)
    report: Counter = Counter()
    for source in store.all_sources():
        with transaction():
            locked = store.lock(source.id)
            if locked is None:
                continue
            report.update(_evaluate_one(locked, counts.get(locked.id, {}), now))
    if report:
        forget_cache()
    return dict(report)


def _evaluate_one(source, classes: dict, now: datetime) -> Counter:
    done: Counter = Counter()
    fields: dict = {}
    status = judge(health_of(classes), source.probe_streak)
    if _releases(source, status):
        fields.update(quarantined=False, quarantined_at=None, quarantined_by=None, quarantine_reason=None,
                      counted_since=now)
        status = judge(Health(0, 0, None), source.probe_streak)  # counted afresh from now
        done["released"] += 1
    elif not source.quarantined and status in QUARANTINING:
        fields.update(quarantined=True, quarantined_at=now, quarantined_by=AUTO, quarantine_reason=status)
        done["quarantined"] += 1
    if status != source.status:
        fields.update(status=status, status_since=now)
        _announce(source, status, now)
        done["changed"] += 1
    if fields:
        store.update(source.id, **fields)
    metrics.set_source_state(source.id, status, fields.get("quarantined", source.quarantined))
    return done


def _announce(source, status: str, now: datetime) -> None:
    kind = SOURCE_RECOVERED if status == HEALTHY else SOURCE_DEGRADED
    body = {"event": kind, "source_id": source.id, "name": source.name, "status": status,
            "previous_status": source.status, "at": iso(now)}
    outbox.record_service_event(body)


# --- operators --------------------------------------------------------------------------


def _source(source_id: str):
    source = store.get(source_id)
    if source is None:
        raise NotFound("no source with this id")
    return source


def quarantine(source_id: str, reason: str, now: datetime | None = None) -> dict:
    """An operator's quarantine: the source is left out until an operator releases it."""
    reason = (reason or "").strip()
    if not reason or len(reason) > 300:
        raise InvalidRequest("a quarantine needs a reason of 1 to 300 characters",
                             details={"reason": ["1 to 300 characters"]})
    now = now or utcnow()
    with transaction():
        _source(source_id)
        store.lock(source_id)
        store.update(source_id, quarantined=True, quarantined_at=now, quarantined_by=OPERATOR,
                     quarantine_reason=reason)
    forget_cache()
    return source_dict(_source(source_id), now=now)


def release(source_id: str, now: datetime | None = None) -> dict:
    """An operator's release: asked again from now on, its health counted afresh."""
    now = now or utcnow()
    with transaction():
        _source(source_id)
        store.lock(source_id)
        store.update(source_id, quarantined=False, quarantined_at=None, quarantined_by=None,
                     quarantine_reason=None, counted_since=now, probe_streak=0)
    forget_cache()
    return source_dict(_source(source_id), now=now)


# --- reads ------------------------------------------------------------------------------


def source_dict(source, health: Health | None = None, now: datetime | None = None) -> dict:
    if health is None:
        health = health_of(store.counts_since((now or utcnow()) - WINDOW).get(source.id, {}))
    return {"id": source.id, "name": source.name, "kinds": json.loads(source.kinds or "[]"),
            "status": source.status, "since": iso(source.status_since), "answered_ratio": health.ratio,
            "p95_latency_ms": health.p95_latency_ms, "last_probe_at": iso(source.last_probe_at),
            "last_probe_ok": source.last_probe_ok, "quarantined": bool(source.quarantined)}


def list_sources(now: datetime | None = None) -> list[dict]:
    """Every source with its health over the last hour: two statements, whatever their number."""
    counts = store.counts_since((now or utcnow()) - WINDOW)
    return [source_dict(s, health_of(counts.get(s.id, {}))) for s in store.all_sources()]


def operator_view(now: datetime | None = None) -> list[dict]:
    """``list_sources`` with what operators see besides: who quarantined it and why, the last probes."""
    counts = store.counts_since((now or utcnow()) - WINDOW)
    return [{**source_dict(s, health_of(counts.get(s.id, {}))), "quarantined_by": s.quarantined_by,
             "quarantine_reason": s.quarantine_reason, "probe_streak": s.probe_streak,
             "last_probes": json.loads(s.last_probes or "[]")} for s in store.all_sources()]


def day_by_hour(now: datetime | None = None) -> dict:
    """The status page's sources: each now and in each of the last 24 hours (oldest first), an
    hour's cell ``{hour, answers, answered_ratio, status}`` judged by the answer rule alone."""
    now = now or utcnow()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = [this_hour - timedelta(hours=n) for n in range(23, -1, -1)]
    by_hour = store.hourly_since(hours[0])
    rows = []
    for source in list_sources(now):
        cells = []
        for hour in hours:
            answers, good = by_hour.get(source["id"], {}).get(hour, (0, 0))
            status = judge(Health(answers, good, None), 0) if answers else None
            cells.append({"hour": iso(hour), "answers": answers,
                          "answered_ratio": round(good / answers, 4) if answers else None, "status": status})
        rows.append({**source, "hours": cells})
    return {"sources": rows, "hours": [iso(h) for h in hours]}


def remove_old(now: datetime | None = None) -> int:
    return store.remove_before((now or utcnow()) - KEPT)


# --- what submissions ask ---------------------------------------------------------------


@dataclass(frozen=True)
class Catalogue:
    names: dict[str, str]
    kinds: dict[str, tuple[str, ...]]  # empty: unknown, so any kind
    quarantined: frozenset[str]

    def applies(self, source_id: str, kind: str) -> bool:
        kinds = self.kinds.get(source_id) or ()
        return not kinds or kind in kinds


_cache_lock = threading.Lock()
_cache: dict = {"at": None, "checked": None, "value": None, "generation": None}


def _generation() -> bytes | None:
    try:
        return runtime.redis().get(GENERATION_KEY)
    except RedisError:
        return None


def catalogue() -> Catalogue:
    """The sources as submissions read them: this process's copy while no quarantine or release
    moved the generation on (asked at most every ``GENERATION_CHECK_SECONDS``; the copy at most
    ``CACHE_SECONDS`` old), else read again."""
    with _cache_lock:
        at, value, checked = _cache["at"], _cache["value"], _cache["checked"]
        fresh = value is not None and at is not None and time.monotonic() - at < CACHE_SECONDS
        if fresh and checked is not None and time.monotonic() - checked < GENERATION_CHECK_SECONDS:
            return value
    generation = _generation()
    with _cache_lock:
        if fresh and generation == _cache["generation"]:
            _cache["checked"] = time.monotonic()
            return value
    rows = store.all_sources()
    value = Catalogue({s.id: s.name for s in rows}, {s.id: tuple(json.loads(s.kinds or "[]")) for s in rows},
                      frozenset(s.id for s in rows if s.quarantined))
    with _cache_lock:
        _cache["at"] = _cache["checked"] = time.monotonic()
        _cache["value"], _cache["generation"] = value, generation
    return value


def forget_cache() -> None:
    """After a change of the sources: this process reads them again, and every other at its next
    submission (the generation moved on)."""
    with _cache_lock:
        _cache["at"], _cache["value"] = None, None
    try:
        runtime.redis().incr(GENERATION_KEY)
    except RedisError:
        pass


def asked_sources(kind: str, only: list[str] | None = None) -> list[str] | None:
    """The sources a new submission of ``kind`` asks: ``only`` (a re-run's) without the quarantined
    ones, or, when a source is quarantined, every other known source for the kind; None: the
    engine's own choice (nothing quarantined)."""
    known = catalogue()
    if only is not None:
        return [s for s in only if s not in known.quarantined]
    if not any(known.applies(s, kind) for s in known.quarantined):
        return None
    # Every source quarantined: the engine's own choice rather than a submission it must refuse.
    return [s for s in sorted(known.names) if s not in known.quarantined and known.applies(s, kind)] or None


def mark_left_out(result: dict, kind: str) -> dict:
    """A completed live scan's result with each quarantined source it does not mention listed as
    ``skipped`` with ``reason: "quarantined"`` (coverage counts the sources asked: unchanged)."""
    known = catalogue()
    if not known.quarantined:  # nearly always: nothing to add
        return result
    mentioned = {s.get("id") for s in result.get("sources") or []}
    left_out = [s for s in sorted(known.quarantined) if s not in mentioned and known.applies(s, kind)]
    if left_out:
        result["sources"] = list(result.get("sources") or []) + [
            {"id": s, "name": known.names.get(s, s), "status": "skipped", "checked_at": None, "latency_ms": None,
             "reason": QUARANTINED_REASON} for s in left_out]
    return result


def rerun_wanted(result: dict | None) -> list[str]:
    """The sources a re-run would ask: those that failed or were quarantined."""
    return [s["id"] for s in (result or {}).get("sources") or []
            if s.get("status") in FAILED_STATUSES or s.get("reason") == QUARANTINED_REASON]


def rerun_sources(result: dict | None) -> list[str]:
    """What a re-run asks: the sources that failed or were quarantined, and are not quarantined now."""
    quarantined = catalogue().quarantined
    return [s for s in rerun_wanted(result) if s not in quarantined]
