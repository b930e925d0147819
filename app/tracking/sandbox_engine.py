"""The sandbox engine: answers test-mode scans inside the service (decisions D15).

Test keys' scans never reach ``ENGINE_URL``. This module answers the two questions the
engine client (``app.plumbing.engine``) answers, with the same shapes, and no network:

- ``submit(target, kind, reference, sources=None)`` -> ``{"id", "recipes", "eta_seconds"}``
  (and ``submit_batch(items)``, like the client's; ``sources``: a re-run of those only, E6);
- ``status(engine_id)`` -> ``{"id", "status", "recipes_total", "recipes_done", "result", "error"}``,
  or ``status_of(kind, target, submitted_at)`` for a caller that prefers the scan row.

It keeps no state, so any worker answers any look alike: a sandbox engine id is ``sbx_``
followed by the URL-safe base64 (unpadded) of ``{"k": kind, "t": target, "c":
submitted_unix_ms, "n": nonce}`` (and ``"s": [source ids]`` for a re-run), and everything
else is derived from the kind, the target and the time elapsed since submission
(``time.time()``, which freezegun moves).

Timing and behaviour follow E3's target conventions (``app.tracking.simulated.conventions``):
a scan takes ``SANDBOX_SCAN_SECONDS`` (``pending`` for its first 5 %, then ``running`` with
``recipes_done`` growing, then ``done``); ``fail…`` / ``…0000`` ends in ``error``
``engine_failed`` at the end of the run; ``slow…`` / ``…9999`` takes 60 s (or
``SANDBOX_SCAN_SECONDS`` if longer); ``hang…`` / ``…8888`` stays ``running`` for ever, and
the service fails it with ``engine_timeout`` after ``timeout_seconds`` (3 x its planned
duration: ``SANDBOX_SCAN_SECONDS`` x 3 for every target but a slow one, which gets 3 x 60 s
so that it can finish). The simulator's extra ``junk…`` convention is not part of test mode:
such targets run normally.

Results come from the simulator's own generator (``app.tracking.simulated.results``), without its
deliberate mess, in the engine's shape with sources, evidence and reasons (E6): the worker
normalises them as it does a live engine's (``normalize_result``, which also gives the
findings their ids), so a sandbox result is what a customer would see for a clean live
result of the same target. ``partial…`` / ``…7777`` targets end with some sources failed.
Artifact URLs point at the reserved, never-resolving host ``sandbox.invalid`` (RFC 2606):
absolute https URLs, as D6 wants, that nobody can mistake for a real report.

No Flask here; settings come from ``app.plumbing.runtime.config`` (or the default when unbound).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
from datetime import UTC, datetime

from app.plumbing import runtime
from app.plumbing.engine import EngineError
from app.scans.results import normalize_result
from app.tracking.simulated.conventions import (
    FAIL,
    HANG,
    KINDS,
    NORMAL,
    SLOW,
    Plan,
    behaviour_of,
    progress_at,
    recipes_for,
)
from app.tracking.simulated.results import result_for

ID_PREFIX = "sbx_"
DEFAULT_SCAN_SECONDS = 5.0
SLOW_SECONDS = 60.0
# A test scan not finished this many times its planned duration after creation times out.
TIMEOUT_FACTOR = 3
ARTIFACT_BASE = "https://sandbox.invalid/artifacts/"
# The behaviours of test mode; any other convention (the simulator's "junk") runs normally.
_SANDBOX_BEHAVIOURS = (NORMAL, FAIL, SLOW, HANG)


class SandboxError(EngineError):
    """A request the sandbox engine cannot answer (an unknown id, a bad kind): handled like
    any engine error by the caller (502 on submission, retried while tracking)."""


def is_sandbox_id(engine_id: str | None) -> bool:
    """Whether an engine id was issued by this sandbox (and must not be sent to ENGINE_URL)."""
    return isinstance(engine_id, str) and engine_id.startswith(ID_PREFIX)


def scan_seconds() -> float:
    """``SANDBOX_SCAN_SECONDS`` of the bound app (the default when none is bound)."""
    return float(runtime.config.get("SANDBOX_SCAN_SECONDS") or DEFAULT_SCAN_SECONDS)


def plan_for(kind: str, target: str) -> Plan:
    """Duration, recipe count (4 to 12, as in the simulator) and behaviour of a sandbox scan."""
    behaviour = behaviour_of(kind, target)
    if behaviour not in _SANDBOX_BEHAVIOURS:
        behaviour = NORMAL
    seconds = scan_seconds()
    duration = max(SLOW_SECONDS, seconds) if behaviour == SLOW else seconds
    return Plan(duration_s=duration, recipes=recipes_for(kind, target), behaviour=behaviour)


def timeout_seconds(kind: str, target: str) -> float:
    """Seconds after creation at which the service fails an unfinished test scan with
    ``engine_timeout`` (in place of ``SCAN_TIMEOUT_SECONDS`` for live scans)."""
    return plan_for(kind, target).duration_s * TIMEOUT_FACTOR


def submit(target: str, kind: str, reference: str | None = None, sources: list[str] | None = None) -> dict:
    """Start a sandbox investigation now: ``{"id", "recipes", "eta_seconds"}``, like
    ``engine.submit``. ``reference`` (the scan id) is accepted for symmetry and not kept;
    ``sources``: a re-run of those sources only."""
    _check(kind, target)
    plan = plan_for(kind, target)
    return {"id": _encode_id(kind, target, _now_ms(), sources), "recipes": plan.recipes,
            "eta_seconds": plan.eta_seconds}


def submit_batch(items: list[dict]) -> list[dict]:
    """``engine.submit_batch``: one submission per ``{"target", "kind", "reference", "sources"?}``, in order."""
    for item in items:
        _check(item.get("kind"), item.get("target"))
    return [submit(item["target"], item["kind"], item.get("reference"), item.get("sources")) for item in items]


def status(engine_id: str) -> dict:
    """The engine status document of a sandbox investigation, as ``engine.status`` returns it."""
    decoded = _decode_id(engine_id)
    if decoded is None:
        raise SandboxError("not a sandbox engine id")
    kind, target, submitted_ms, sources = decoded
    return _status(engine_id, kind, target, submitted_ms / 1000, sources)


def status_batch(engine_ids: list[str]) -> list[dict]:
    """``engine.status_batch``: each id's document in order; an id that is not the sandbox's is
    the batch look's ``not_found`` item, as the engine answers it (E6)."""
    items = []
    for engine_id in engine_ids:
        try:
            items.append(status(engine_id))
        except SandboxError:
            items.append({"id": engine_id, "status": "error", "recipes_total": 0, "recipes_done": 0,
                          "result": None, "error": {"code": "not_found", "message": "No such investigation."}})
    return items


def status_of(kind: str, target: str, submitted_at: datetime | float) -> dict:
    """The same document computed from a scan's kind, target and submission time (a naive
    UTC ``datetime`` as the models store it, an aware one, or Unix seconds)."""
    _check(kind, target)
    if isinstance(submitted_at, datetime):
        if submitted_at.tzinfo is None:
            submitted_at = submitted_at.replace(tzinfo=UTC)
        submitted_at = submitted_at.timestamp()
    return _status(None, kind, target, float(submitted_at))


def engine_result(kind: str, target: str, *, sources: list[str] | None = None,
                  finished_s: float | None = None) -> dict:
    """The engine's result of a finished sandbox scan of this target (E6 shape: sources,
    evidence, reasons by path), as a look answers it; ``finished_s``: when it finished."""
    digest = hashlib.sha256(f"sandbox-artifacts:{kind}:{target}".encode()).hexdigest()[:32]
    checked_at = None if finished_s is None else datetime.fromtimestamp(finished_s, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    return result_for(kind, target, ARTIFACT_BASE + digest, messy=False, sources=sources, checked_at=checked_at)


def result(kind: str, target: str, *, scan_id: str | None = None) -> dict:
    """The result a customer reads for a finished sandbox scan of this target (normalised)."""
    return normalize_result(engine_result(kind, target), kind, scan_id=scan_id)


def _status(engine_id: str | None, kind: str, target: str, submitted_s: float,
            sources: list[str] | None = None) -> dict:
    plan = plan_for(kind, target)
    progress = progress_at(plan, time.time() - submitted_s)
    body: dict[str, object] = {"id": engine_id, "status": progress.status, "recipes_total": plan.recipes,
            "recipes_done": progress.recipes_done, "result": None, "error": None}
    if progress.status == "done":
        body["result"] = engine_result(kind, target, sources=sources, finished_s=submitted_s + plan.duration_s)
    elif progress.status == "error":
        body["error"] = {"code": "engine_failed",
                         "message": f"Test mode: recipe {progress.recipes_done + 1} of {plan.recipes} failed, "
                                    f"as this target asks."}
    return body


def _check(kind, target) -> None:
    if kind not in KINDS:
        raise SandboxError(f"kind must be one of {', '.join(KINDS)}")
    if not isinstance(target, str) or not target.strip():
        raise SandboxError("target must be a non-empty string")


def _now_ms() -> int:
    # time.time(), not a monotonic clock: ids must agree across processes and hosts.
    return int(time.time() * 1000)


def _encode_id(kind: str, target: str, submitted_ms: int, sources: list[str] | None = None) -> str:
    payload: dict[str, object] = {"k": kind, "t": target, "c": submitted_ms, "n": secrets.token_hex(4)}
    if sources is not None:
        payload["s"] = [str(s) for s in sources]
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return ID_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_id(engine_id) -> tuple[str, str, int, list[str] | None] | None:
    if not is_sandbox_id(engine_id):
        return None
    encoded = engine_id[len(ID_PREFIX):]
    try:
        payload = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8"))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(payload, dict):
        return None
    kind, target, submitted = payload.get("k"), payload.get("t"), payload.get("c")
    if kind not in KINDS or not isinstance(target, str) or not target:
        return None
    if not isinstance(submitted, int) or isinstance(submitted, bool):
        return None
    sources = payload.get("s")
    if sources is not None and not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
        return None
    return kind, target, submitted, sources
