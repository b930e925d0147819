"""Stateless investigations: ids that carry their own state, progress computed from the clock.

The simulator keeps no table of investigations. An engine id is ``inv_`` followed by the
URL-safe base64 (unpadded) of ``{"k": kind, "t": target, "c": created_unix_ms, "n": nonce}``
(with ``"s": [source ids]`` for a re-run of some sources, E6),
so any simulator process, restarted or not, answers the same for the same id, and the
random nonce keeps two submissions of one target apart. Everything else (duration, number
of recipes, behaviour) is derived from ``sha256("kind:target")``.

The target conventions (``fail``/``slow``/``hang``/``partial``/``junk``), the recipe count and the
progress over time are shared with the service's sandbox engine and documented in
``app.simulated.conventions``; here ``slow`` takes the longest duration (180 s x time
scale). ``junk`` is an extension of E3, there to exercise the service's
rejection of results that cannot be made valid.
"""
import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass

# Re-exported: the simulator's modules and tests import them from here.
from app.simulated.conventions import (  # noqa: F401
    FAIL,
    HANG,
    JUNK,
    KINDS,
    MAX_RECIPES,
    MIN_RECIPES,
    NORMAL,
    PARTIAL,
    PENDING_FRACTION,
    SLOW,
    Plan,
    Progress,
    behaviour_of,
    progress_at,
    recipes_for,
    target_digest,
)

ID_PREFIX = "inv_"

MIN_DURATION_S = 60
MAX_DURATION_S = 180


@dataclass(frozen=True)
class Investigation:
    """What an engine id decodes to."""

    kind: str
    target: str
    created_ms: int
    sources: tuple[str, ...] | None = None  # a re-run of these sources only


def now_ms() -> int:
    # time.time() rather than a monotonic clock: ids must agree across processes,
    # and freezegun patches time.time() in tests.
    return int(time.time() * 1000)


def encode_id(kind: str, target: str, created_ms: int | None = None, sources: list[str] | None = None) -> str:
    """Create a new engine id for an investigation submitted now (or at ``created_ms``);
    ``sources``: a re-run of those only."""
    payload: dict[str, object] = {
        "k": kind,
        "t": target,
        "c": now_ms() if created_ms is None else created_ms,
        "n": secrets.token_hex(4),
    }
    if sources is not None:
        payload["s"] = list(sources)
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return ID_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_id(engine_id: str) -> Investigation | None:
    """Decode an engine id; ``None`` when it is not one this simulator issued."""
    if not engine_id.startswith(ID_PREFIX):
        return None
    encoded = engine_id[len(ID_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(payload, dict):
        return None
    kind, target, created = payload.get("k"), payload.get("t"), payload.get("c")
    if kind not in KINDS or not isinstance(target, str) or not target:
        return None
    if not isinstance(created, int) or isinstance(created, bool):
        return None
    sources = payload.get("s")
    if sources is not None and not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
        return None
    return Investigation(kind=kind, target=target, created_ms=created,
                         sources=None if sources is None else tuple(sources))


def plan_for(kind: str, target: str, time_scale: float) -> Plan:
    """Duration (60..180 s times the scale), recipe count (4..12) and behaviour."""
    digest = target_digest(kind, target)
    behaviour = behaviour_of(kind, target)
    if behaviour == SLOW:
        base = MAX_DURATION_S
    else:
        base = MIN_DURATION_S + int.from_bytes(digest[:4], "big") % (MAX_DURATION_S - MIN_DURATION_S + 1)
    return Plan(duration_s=base * time_scale, recipes=recipes_for(kind, target), behaviour=behaviour)
