"""Probes (D30, engine E8): each source asked about an identity it must find (known-good) and one it
must not (known-bad), every ``SOURCE_PROBE_MINUTES``.

A round is two submissions (``sources: [id]``, ``"probe": true``; no scan, charge, activity entry
or event of any customer): at most two per source per interval, sent by the ``source_probes``
periodic job (one worker at a time, the periodic jobs' lock). The ``sources`` job looks at the
rounds in flight, judges each once both answered: ``right`` (the known-good found, the known-bad
not), ``wrong`` (the known-good not found, or the known-bad found) or ``unanswered`` (an error, a
timeout, or no answer within two intervals), counts its answers for the source's health, and
judges the sources (``health.evaluate``). An engine without the listing (404/405) gets no probes.
"""
from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta

from app.plumbing import engine, metrics, runtime
from app.plumbing.db import transaction
from app.plumbing.errors import NotFound
from app.plumbing.models import iso, utcnow
from app.sources import health, status
from app.sources import statements as store

log = logging.getLogger(__name__)

RIGHT, WRONG, UNANSWERED = "right", "wrong", "unanswered"
ROUND_EXPIRES_INTERVALS = 2
LAST_PROBES_KEPT = 5
BATCH = 100
ROLES = ("known_good", "known_bad")


def interval() -> timedelta:
    return timedelta(minutes=int(runtime.config["SOURCE_PROBE_MINUTES"]))


def _identity(raw) -> dict | None:
    if not isinstance(raw, dict):
        return None
    target, kind = raw.get("target"), raw.get("kind")
    if not isinstance(target, str) or not target or kind not in ("email", "phone", "username"):
        return None
    return {"target": target[:300], "kind": kind}


def refresh(now: datetime) -> bool:
    """The engine's listing stored (names, kinds, probe identities); False when it has none."""
    listed = engine.list_sources()
    if listed is None:
        return False
    for item in listed:
        source_id, name = item.get("id"), item.get("name")
        if not isinstance(source_id, str) or not source_id or len(source_id) > 80:
            continue
        listed_kinds: list = item["kinds"] if isinstance(item.get("kinds"), list) else []
        kinds = [k for k in listed_kinds if k in ("email", "phone", "username")]
        raw: dict = item["probes"] if isinstance(item.get("probes"), dict) else {}
        identities = {role: _identity(raw.get(role)) for role in ROLES}
        probes = json.dumps(identities) if all(identities.values()) else None
        store.upsert_listed(source_id, (name if isinstance(name, str) and name else source_id)[:200],
                            json.dumps(kinds), probes, now)
    health.forget_cache()
    return True


def send(now: datetime | None = None, only: str | None = None, *, force: bool = False) -> dict:
    """Send a round to every probed source (or ``only`` that one) without one in flight (``force``:
    whatever is in flight is replaced; a round past its expiry is judged unanswered first)."""
    now = now or utcnow()
    try:
        if not refresh(now):
            return {"probes_unsupported": 1}
    except engine.EngineError as exc:  # the engine unreachable: one line, the next interval tries again
        log.warning("probes not sent: the engine's sources listing failed (%s)", exc)
        return {"probes_not_sent": 1}
    chosen = [s for s in store.all_sources() if s.probes and (only is None or s.id == only)]
    if only is not None and not chosen:
        raise NotFound("no source with this id that the engine lists with probes")
    due = []
    for source in chosen:
        if source.probe_sent_at is not None and not force:
            if source.probe_sent_at > now - ROUND_EXPIRES_INTERVALS * interval():
                continue
            _judge_round(source, UNANSWERED, {}, now)
        due.append(source)
    sent = 0
    for start in range(0, len(due), BATCH // 2):
        chunk = due[start:start + BATCH // 2]
        items = []
        for source in chunk:
            identities = json.loads(str(source.probes))
            items += [{**identities[role], "reference": f"probe_{role}", "sources": [source.id]} for role in ROLES]
        try:
            answers = engine.submit_probes(items)
        except engine.EngineError as exc:
            log.warning("probes not sent: %s", exc)
            return {"probes_sent": sent, "probe_errors": 1}
        for index, source in enumerate(chunk):
            store.update(source.id, probe_good_id=answers[2 * index]["id"], probe_bad_id=answers[2 * index + 1]["id"],
                         probe_sent_at=now, next_probe_at=now + interval())
        sent += len(chunk)
    return {"probes_sent": sent}


def _states(engine_ids: list[str]) -> dict[str, dict]:
    """Each id's state, by the batch look when the engine offers it."""
    states: dict[str, dict] = {}
    for start in range(0, len(engine_ids), BATCH):
        chunk = engine_ids[start:start + BATCH]
        try:
            items = engine.status_batch(chunk)
        except engine.BatchLookUnsupported:
            items = [engine.status(engine_id) for engine_id in chunk]
        states.update(zip(chunk, items, strict=True))
    return states


def _answer(state: dict | None, source_id: str) -> tuple[str, object] | None:
    """The source's ``(status, latency ms)`` in a finished probe; ``("error", None)`` when the
    investigation failed or the source is missing; None while it runs."""
    if state is None or state.get("status") in ("pending", "running"):
        return None
    result = state.get("result") if state.get("status") == "done" else None
    entries = result.get("sources") if isinstance(result, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == source_id:
            status = entry.get("status")
            return (status if isinstance(status, str) else "error"), entry.get("latency_ms")
    return "error", None


def outcome_of(good: str, bad: str) -> str:
    """A round's verdict, in this one place."""
    if good in health.FAILED_STATUSES or bad in health.FAILED_STATUSES:
        return UNANSWERED
    return RIGHT if good == "found" and bad != "found" else WRONG


def look(now: datetime | None = None) -> dict:
    """Judge every round in flight that both probes answered (or that expired)."""
    now = now or utcnow()
    pending = [s for s in store.all_sources() if s.probe_sent_at is not None and s.probe_good_id and s.probe_bad_id]
    if not pending:
        return {}
    try:
        states = _states([str(i) for s in pending for i in (s.probe_good_id, s.probe_bad_id)])
    except engine.EngineError as exc:
        log.warning("probes not looked at: %s", exc)
        return {"probe_errors": 1}
    report = {RIGHT: 0, WRONG: 0, UNANSWERED: 0}
    for source in pending:
        good = _answer(states.get(str(source.probe_good_id)), source.id)
        bad = _answer(states.get(str(source.probe_bad_id)), source.id)
        if good is None or bad is None:
            if source.probe_sent_at is not None and source.probe_sent_at <= now - ROUND_EXPIRES_INTERVALS * interval():
                report[UNANSWERED] += _judge_round(source, UNANSWERED, {}, now)
            continue
        outcome = outcome_of(good[0], bad[0])
        report[outcome] += _judge_round(source, outcome, {"known_good": good, "known_bad": bad}, now)
    return {f"probes_{k}": v for k, v in report.items() if v}


def _judge_round(source, outcome: str, answers: dict, now: datetime) -> bool:
    streak = source.probe_streak
    if outcome == RIGHT:
        streak = max(streak, 0) + 1
    elif outcome == WRONG:
        streak = min(streak, 0) - 1
    else:
        streak = 0
    entry = {"at": iso(now), "outcome": outcome, **{role: answer[0] for role, answer in answers.items()}}
    last = [entry, *json.loads(source.last_probes or "[]")][:LAST_PROBES_KEPT]
    with transaction():
        if not store.judge_round(source.id, source.probe_sent_at, probe_streak=streak, last_probe_at=now,
                                 last_probe_ok=outcome == RIGHT, last_probes=json.dumps(last), probe_good_id=None,
                                 probe_bad_id=None, probe_sent_at=None):
            return False  # judged by another process first: counted once, there
        health.record_answers([(source.id, source.name, status, latency) for status, latency in answers.values()], now)
    metrics.count_source_probe(source.id, outcome)
    return True


def run_health() -> dict:
    """The ``sources`` periodic job: the engine's listing read again (what the status page says of
    the engine), rounds judged, sources judged, old counts removed."""
    try:
        refresh(utcnow())
        status.note_engine(True)
    except engine.EngineError as exc:
        log.warning("engine sources listing: %s", exc)
        status.note_engine(False)
    report = look()
    report.update(health.evaluate())
    removed = health.remove_old()
    if removed:
        report["source_minutes_removed"] = removed
    return report


def probe_now(source_id: str | None = None, *, wait_seconds: float = 0.0) -> dict:
    """The operator's ``sources probe [ID]``: a round now (replacing one in flight), then, with
    ``wait_seconds``, its answers awaited that long and the sources judged."""
    before = _newest_rounds(source_id)
    report = send(only=source_id, force=True)
    deadline = time.monotonic() + wait_seconds
    while wait_seconds and time.monotonic() < deadline:
        look()
        if not any(s.probe_sent_at is not None for s in store.all_sources()
                   if source_id is None or s.id == source_id):
            break
        time.sleep(0.2)  # real time: an operator's command waiting for the engine's answers
    if wait_seconds:
        report.update(_judged_since(before, source_id))
        report.update(health.evaluate())
    return report


def _rounds(source_id: str | None) -> dict[str, list[dict]]:
    """Each source's judged rounds, newest first (``last_probes``)."""
    return {s.id: json.loads(s.last_probes or "[]") for s in store.all_sources()
            if source_id is None or s.id == source_id}


def _newest_rounds(source_id: str | None) -> dict[str, dict | None]:
    return {sid: (rounds[0] if rounds else None) for sid, rounds in _rounds(source_id).items()}


def _judged_since(before: dict[str, dict | None], source_id: str | None) -> dict:
    """The rounds judged since ``before`` (``_newest_rounds``), counted from the sources' last
    probes: whoever judged them, this command or a worker's periodic look at the same time."""
    counts: dict[str, int] = {}
    for sid, rounds in _rounds(source_id).items():
        for entry in rounds:
            if entry == before.get(sid):
                break
            key = f"probes_{entry.get('outcome')}"
            counts[key] = counts.get(key, 0) + 1
    return counts
