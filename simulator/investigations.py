"""Stateless investigations: ids that carry their own state, progress computed from the clock.

The simulator keeps no table of investigations. An engine id is ``inv_`` followed by the
URL-safe base64 (unpadded) of ``{"k": kind, "t": target, "c": created_unix_ms, "n": nonce}``,
so any simulator process, restarted or not, answers the same for the same id, and the
random nonce keeps two submissions of one target apart. Everything else (duration, number
of recipes, behaviour) is derived from ``sha256("kind:target")``.

Behaviour chosen by the target (case-insensitive; e-mail: local part, phone: last digits,
username: handle without a leading ``@``):

============  ==========  ==========================================================
text prefix   phone end   behaviour
============  ==========  ==========================================================
``fail``      ``0000``    ends in ``error`` ``engine_failed`` after its duration
``slow``      ``9999``    takes the longest duration (180 s x time scale)
``hang``      ``8888``    stays ``running`` for ever, ``recipes_done`` below the total
``junk``      ``7777``    ends ``done`` with a result no validator can accept
============  ==========  ==========================================================

``junk`` is an extension of E3, there to exercise the service's rejection of
results that cannot be made valid.
"""
import base64
import binascii
import hashlib
import json
import math
import re
import secrets
import time
from dataclasses import dataclass

KINDS = ("email", "phone", "username")
ID_PREFIX = "inv_"

MIN_DURATION_S = 60
MAX_DURATION_S = 180
# Share of the duration spent "pending" before recipes start, so clients see every status.
PENDING_FRACTION = 0.05
MIN_RECIPES = 4
MAX_RECIPES = 12

NORMAL, FAIL, SLOW, HANG, JUNK = "normal", "fail", "slow", "hang", "junk"
# Marker for text targets (a prefix) and for phone targets (a suffix of the digits).
_MARKERS = {FAIL: "0000", SLOW: "9999", HANG: "8888", JUNK: "7777"}


@dataclass(frozen=True)
class Investigation:
    """What an engine id decodes to."""

    kind: str
    target: str
    created_ms: int


@dataclass(frozen=True)
class Plan:
    """How an investigation of one (kind, target) runs, at a given time scale."""

    duration_s: float
    recipes: int
    behaviour: str

    @property
    def eta_seconds(self) -> int:
        return math.ceil(self.duration_s)


@dataclass(frozen=True)
class Progress:
    """Where an investigation stands at a moment: status and recipes finished."""

    status: str
    recipes_done: int


def target_digest(kind: str, target: str) -> bytes:
    """The seed of everything deterministic about a (kind, target)."""
    return hashlib.sha256(f"{kind}:{target}".encode("utf-8")).digest()


def now_ms() -> int:
    # time.time() rather than a monotonic clock: ids must agree across processes,
    # and freezegun patches time.time() in tests.
    return int(time.time() * 1000)


def encode_id(kind: str, target: str, created_ms: int | None = None) -> str:
    """Create a new engine id for an investigation submitted now (or at ``created_ms``)."""
    payload = {
        "k": kind,
        "t": target,
        "c": now_ms() if created_ms is None else created_ms,
        "n": secrets.token_hex(4),
    }
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
    return Investigation(kind=kind, target=target, created_ms=created)


def behaviour_of(kind: str, target: str) -> str:
    """Which test convention, if any, the target asks for."""
    if kind == "phone":
        digits = re.sub(r"\D", "", target)
        return next((b for b, suffix in _MARKERS.items() if digits.endswith(suffix)), NORMAL)
    text = target.rpartition("@")[0] if kind == "email" and "@" in target else target
    text = text.lstrip("@").lower()
    return next((b for b in _MARKERS if text.startswith(b)), NORMAL)


def plan_for(kind: str, target: str, time_scale: float) -> Plan:
    """Duration (60..180 s times the scale), recipe count (4..12) and behaviour."""
    digest = target_digest(kind, target)
    behaviour = behaviour_of(kind, target)
    if behaviour == SLOW:
        base = MAX_DURATION_S
    else:
        base = MIN_DURATION_S + int.from_bytes(digest[:4], "big") % (MAX_DURATION_S - MIN_DURATION_S + 1)
    recipes = MIN_RECIPES + digest[4] % (MAX_RECIPES - MIN_RECIPES + 1)
    return Plan(duration_s=base * time_scale, recipes=recipes, behaviour=behaviour)


def progress_at(plan: Plan, elapsed_s: float) -> Progress:
    """Status after ``elapsed_s`` seconds: pending, then running, then done or error."""
    pending_end = plan.duration_s * PENDING_FRACTION
    if elapsed_s < pending_end:
        return Progress("pending", 0)
    if elapsed_s >= plan.duration_s and plan.behaviour != HANG:
        if plan.behaviour == FAIL:
            # The last recipe is the one that failed.
            return Progress("error", plan.recipes - 1)
        return Progress("done", plan.recipes)
    return Progress("running", _recipes_done_while_running(plan, elapsed_s, pending_end))


def _recipes_done_while_running(plan: Plan, elapsed_s: float, pending_end: float) -> int:
    # A hanging investigation is past its duration here; it stays one recipe short.
    span = plan.duration_s - pending_end
    share = (elapsed_s - pending_end) / span if span > 0 else 1.0
    return min(plan.recipes - 1, int(plan.recipes * share))
