"""What a (kind, target) decides about a simulated investigation, and how it progresses.

Everything deterministic is derived from ``sha256("kind:target")`` (``target_digest``):
the number of recipes here, the result in ``app.tracking.simulated.results``. The behaviour is
chosen by the target (E3; case-insensitive; e-mail: local part, phone: last
digits, username: handle without a leading ``@``):

============  ==========  ==========================================================
text prefix   phone end   behaviour
============  ==========  ==========================================================
``fail``      ``0000``    ends in ``error`` ``engine_failed`` after its duration
``slow``      ``9999``    takes the longest duration
``hang``      ``8888``    stays ``running`` for ever, ``recipes_done`` below the total
``partial``   ``7777``    ends ``done``, some of its sources rate-limited or timed out (E6)
``junk``      ``6666``    (simulator only) ends ``done`` with a result no validator accepts
``changing``  ``4444``    (simulator only) each new investigation of the target finds more (E7)
============  ==========  ==========================================================

How long an investigation takes is the caller's choice (a ``Plan``): the simulator runs
60 to 180 s times its time scale, the sandbox ``SANDBOX_SCAN_SECONDS``. ``progress_at``
turns a plan and the time elapsed since submission into a status, so neither keeps state.
"""
import hashlib
import math
import re
from dataclasses import dataclass

KINDS = ("email", "phone", "username")

# Share of the duration spent "pending" before recipes start, so clients see every status.
PENDING_FRACTION = 0.05
MIN_RECIPES = 4
MAX_RECIPES = 12

NORMAL, FAIL, SLOW, HANG, PARTIAL, JUNK = "normal", "fail", "slow", "hang", "partial", "junk"
CHANGING = "changing"
# Marker for text targets (a prefix) and for phone targets (a suffix of the digits).
MARKERS = {FAIL: "0000", SLOW: "9999", HANG: "8888", PARTIAL: "7777", JUNK: "6666", CHANGING: "4444"}


@dataclass(frozen=True)
class Plan:
    """How an investigation of one (kind, target) runs."""

    duration_s: float
    recipes: int
    behaviour: str

    @property
    def eta_seconds(self) -> int:
        # Whole seconds, rounded up (E1).
        return math.ceil(self.duration_s)


@dataclass(frozen=True)
class Progress:
    """Where an investigation stands at a moment: status and recipes finished."""

    status: str
    recipes_done: int


def target_digest(kind: str, target: str) -> bytes:
    """The seed of everything deterministic about a (kind, target)."""
    return hashlib.sha256(f"{kind}:{target}".encode()).digest()


def behaviour_of(kind: str, target: str) -> str:
    """Which test convention, if any, the target asks for."""
    if kind == "phone":
        digits = re.sub(r"\D", "", target)
        return next((b for b, suffix in MARKERS.items() if digits.endswith(suffix)), NORMAL)
    text = target.rpartition("@")[0] if kind == "email" and "@" in target else target
    text = text.lstrip("@").lower()
    return next((b for b in MARKERS if text.startswith(b)), NORMAL)


def recipes_for(kind: str, target: str) -> int:
    """How many recipes (4 to 12) an investigation of this target runs."""
    return MIN_RECIPES + target_digest(kind, target)[4] % (MAX_RECIPES - MIN_RECIPES + 1)


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
