"""Stateless investigations: ids that carry their own state, progress computed from the clock.

The simulator keeps no table of investigations. An engine id is ``inv_`` followed by the
URL-safe base64 (unpadded) of a random 12-byte nonce and the AES-GCM encryption of
``{"k": kind, "t": target, "c": created_unix_ms}`` (with ``"s": [source ids]`` for a re-run
of some sources, E6, ``"g": n`` for the n-th investigation of a ``changing`` target and ``"p": 1``
for a probe, E8),
so any simulator process sharing its key, restarted or not, answers the same for the same
id, and the nonce keeps two submissions of one target apart. The id does not show its
target: whoever holds an erased scan's engine id learns nothing from it (D25). The key is
derived from ``SIM_ID_KEY`` (a fixed development value when unset: set it where the ids
must stay unreadable to whoever has this source). Everything else (duration, number of
recipes, behaviour) is derived from ``sha256("kind:target")``.

The target conventions (``fail``/``slow``/``hang``/``partial``/``junk``), the recipe count and the
progress over time are shared with the service's sandbox engine and documented in
``app.tracking.simulated.conventions``; here ``slow`` takes the longest duration (180 s x time
scale). ``junk`` is an extension of E3, there to exercise the service's
rejection of results that cannot be made valid.
"""
import base64
import binascii
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# Re-exported: the simulator's modules and tests import them from here.
from app.tracking.simulated.conventions import (  # noqa: F401
    CHANGING,
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
NONCE_BYTES = 12
# A development default, so that ids agree between processes (the bench's stand-in issues ids
# the simulator answers for) without any setting.
DEFAULT_ID_KEY = "simulator-investigation-ids"
_CIPHER = AESGCM(hashlib.sha256((os.environ.get("SIM_ID_KEY") or DEFAULT_ID_KEY).encode()).digest())

MIN_DURATION_S = 60
MAX_DURATION_S = 180


@dataclass(frozen=True)
class Investigation:
    """What an engine id decodes to."""

    kind: str
    target: str
    created_ms: int
    sources: tuple[str, ...] | None = None  # a re-run of these sources only
    generation: int = 0  # earlier investigations of the same ``changing`` target (E7)
    probe: bool = False  # a probe of a source (E8): it answers sooner


def now_ms() -> int:
    # time.time() rather than a monotonic clock: ids must agree across processes,
    # and freezegun patches time.time() in tests.
    return int(time.time() * 1000)


def encode_id(kind: str, target: str, created_ms: int | None = None, sources: list[str] | None = None,
              generation: int = 0, probe: bool = False) -> str:
    """Create a new engine id for an investigation submitted now (or at ``created_ms``);
    ``sources``: a re-run of those only; ``generation``: see ``Investigation``."""
    payload: dict[str, object] = {"k": kind, "t": target, "c": now_ms() if created_ms is None else created_ms}
    if sources is not None:
        payload["s"] = list(sources)
    if generation:
        payload["g"] = generation
    if probe:
        payload["p"] = 1
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = nonce + _CIPHER.encrypt(nonce, raw, None)
    return ID_PREFIX + base64.urlsafe_b64encode(sealed).decode("ascii").rstrip("=")


def decode_id(engine_id: str) -> Investigation | None:
    """Decode an engine id; ``None`` when it is not one this simulator issued."""
    if not engine_id.startswith(ID_PREFIX):
        return None
    encoded = engine_id[len(ID_PREFIX):]
    try:
        sealed = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        raw = _CIPHER.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, InvalidTag):  # not base64, too short for a nonce, or not ours
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
    generation = payload.get("g", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return None
    return Investigation(kind=kind, target=target, created_ms=created,
                         sources=None if sources is None else tuple(sources), generation=generation,
                         probe=payload.get("p") == 1)


def plan_for(kind: str, target: str, time_scale: float) -> Plan:
    """Duration (60..180 s times the scale), recipe count (4..12) and behaviour."""
    digest = target_digest(kind, target)
    behaviour = behaviour_of(kind, target)
    if behaviour == SLOW:
        base = MAX_DURATION_S
    else:
        base = MIN_DURATION_S + int.from_bytes(digest[:4], "big") % (MAX_DURATION_S - MIN_DURATION_S + 1)
    return Plan(duration_s=base * time_scale, recipes=recipes_for(kind, target), behaviour=behaviour)
