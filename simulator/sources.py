"""The simulated engine's sources (E8): their listing with probe identities, probes, and modes
that break a source on purpose.

- ``GET /v1/sources`` lists each source of ``app.tracking.simulated.results.SOURCES`` with the kinds it
  answers for and its probes: a known-good identity it must find and a known-bad one it must not.
- A probe is a submission with ``"sources": [id]`` and ``"probe": true``: it ends after
  ``PROBE_SECONDS`` (times the time scale) with that source ``found`` for its known-good identity
  and ``not_found`` for anything else.
- ``POST /_sim/engine/sources/<id>`` ``{"mode": "ok"|"error"|"slow"|"wrong"}`` and
  ``GET /_sim/engine/sources``: a mode is the simulator's state, applied when an investigation's
  result is read, to every investigation that asks that source: ``error`` answers ``error``,
  ``slow`` answers ``timeout`` after ``SLOW_LATENCY_MS`` (past the engine's own limit), ``wrong``
  answers ``found`` for every identity (the known-bad included) and ``not_found`` for the
  known-good. A reset sets every source back to ``ok``.
"""
from __future__ import annotations

import threading

from app.tracking.simulated.results import CARRIER, MAILBOX, SOURCES

MODES = ("ok", "error", "slow", "wrong")
PROBE_SECONDS = 5
SLOW_LATENCY_MS = 15_000
NAMES = dict(SOURCES)
# Sources that answer for fewer kinds than all three (the others answer for every kind).
_KINDS = {CARRIER: ("phone",), MAILBOX: ("email", "phone")}
ALL_KINDS = ("email", "phone", "username")


def kinds_of(source_id: str) -> tuple[str, ...]:
    return _KINDS.get(source_id, ALL_KINDS)


def probes_of(source_id: str) -> dict:
    """The source's known-good and known-bad identities: e-mails, or numbers from a fictional-use
    range for a source that answers for phones only."""
    if kinds_of(source_id) == ("phone",):
        return {"known_good": {"target": "+447700900111", "kind": "phone"},
                "known_bad": {"target": "+447700900222", "kind": "phone"}}
    slug = source_id.replace("_", "-")
    return {"known_good": {"target": f"probe.good.{slug}@example.com", "kind": "email"},
            "known_bad": {"target": f"probe.bad.{slug}@example.com", "kind": "email"}}


def listing() -> dict:
    return {"sources": [{"id": source_id, "name": name, "kinds": list(kinds_of(source_id)),
                         "probes": probes_of(source_id)} for source_id, name in SOURCES]}


def _is_known_good(source_id: str, kind: str, target: str) -> bool:
    good = probes_of(source_id)["known_good"]
    return good["kind"] == kind and good["target"] == target


class SourceModes:
    """Each source's mode, shared by the server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modes: dict[str, str] = {}

    def reset(self) -> None:
        with self._lock:
            self._modes = {}

    def set(self, source_id: str, mode: str) -> None:
        with self._lock:
            self._modes[source_id] = mode

    def state(self) -> dict:
        with self._lock:
            modes = dict(self._modes)
        return {"sources": [{"id": source_id, "name": name, "mode": modes.get(source_id, "ok")}
                            for source_id, name in SOURCES]}

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._modes)


def apply(result: dict, kind: str, target: str, *, probe: bool, modes: dict[str, str]) -> None:
    """A result's source answers as a probe's and the sources' modes make them (in place)."""
    if not isinstance(result, dict) or not isinstance(result.get("sources"), list):
        return
    failed = set()
    for entry in result["sources"]:
        source_id = entry["id"]
        if probe:
            entry["status"] = "found" if _is_known_good(source_id, kind, target) else "not_found"
        mode = modes.get(source_id, "ok")
        if mode == "error":
            entry["status"] = "error"
            failed.add(source_id)
        elif mode == "slow":
            entry["status"], entry["latency_ms"] = "timeout", SLOW_LATENCY_MS
            failed.add(source_id)
        elif mode == "wrong":
            entry["status"] = "not_found" if _is_known_good(source_id, kind, target) else "found"
    if failed:
        for item in result.get("evidence") or []:
            item["source_ids"] = [s for s in item.get("source_ids", []) if s not in failed]
