"""How sure a finding is (D29): the one rule that makes a finding's ``confidence``, and what a
``min_confidence`` leaves out of a result.

The rule, in this order:
1. the customer's own feedback on the finding wins: ``confirmed`` 1.00, ``false_positive`` 0.00
   (on every later read, and on later scans of the target, which carry the feedback, D26);
2. else the engine's own estimate for the item (its evidence's ``confidence``, E8), 0 to 1;
3. else a base per kind of item (``BASE``), raised by ``PER_SOURCE`` for each source after the
   first that found it, at most ``CEILING``.
Always two decimals. ``matched_on`` is what the engine says ties the item to the target (words
of ``MATCHED_ON``; empty when it says nothing).

Filtering is done on the stored result when it is shown (a read, a webhook body, a watch's
comparison), never stored: the stored result keeps every finding, so a read that asks for a lower
``min_confidence`` than the scan's own sees what it left out. It parses and writes JSON only;
no query.
"""
from __future__ import annotations

import copy
import math
import re

from app.scans.bands import band_for

BASE = {"profiles.verified": 0.90, "profiles.weak": 0.40, "contacts.emails": 0.70, "contacts.phones": 0.70,
        "breaches": 0.95}
PER_SOURCE = 0.05
CEILING = 0.99
FEEDBACK = {"confirmed": 1.0, "false_positive": 0.0}
MATCHED_ON = ("email", "phone", "username", "name", "photo", "other")
_PATH = re.compile(r"^([a-z_.]+)\[(\d+)\]$")


def engine_confidence(value) -> float | None:
    """The engine's estimate as a number 0 to 1, or None when it gave none usable."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


def matched_on(value) -> list[str]:
    """The known words of an engine's ``matched_on``, each once, in its order."""
    if not isinstance(value, list):
        return []
    return list(dict.fromkeys(word for word in value if isinstance(word, str) and word in MATCHED_ON))


def confidence_of(list_name: str, *, engine: float | None = None, sources: int = 0,
                  feedback: dict | None = None) -> float:
    """The finding's confidence by the rule above; ``list_name`` is the list its item is in
    (``profiles.verified``...), ``sources`` how many sources found it."""
    verdict = feedback.get("verdict") if isinstance(feedback, dict) else None
    if verdict in FEEDBACK:
        return FEEDBACK[verdict]
    if engine is not None:
        return round(engine, 2)
    return round(min(CEILING, BASE[list_name] + PER_SOURCE * max(0, sources - 1)), 2)


def with_feedback(finding: dict) -> dict:
    """``finding`` with the confidence its (new) feedback gives it: the rule's first step."""
    verdict = (finding.get("feedback") or {}).get("verdict")
    if verdict in FEEDBACK:
        finding["confidence"] = FEEDBACK[verdict]
    return finding


def list_of(path: str) -> str | None:
    match = _PATH.match(path or "")
    return match.group(1) if match else None


def check_minimum(value, name: str = "min_confidence") -> float | None:
    """A ``min_confidence`` as given (a number 0 to 1, or a query's text), or None when absent;
    ``ValueError`` naming ``name`` when it is not one."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            # 32: any float as a client's JSON library writes it ("1.984976690197388e-217" is 22)
            value = float(text) if text and len(text) <= 32 else None
        except ValueError:
            value = None
    number = engine_confidence(value)
    if number is None or number != value:
        raise ValueError(f"{name} must be a number from 0 to 1")
    return number


def below(result: dict, minimum: float) -> set[str]:
    """The paths of the findings of ``result`` under ``minimum``."""
    return {f["path"] for f in result.get("findings") or []
            if isinstance(f, dict) and _confidence(f) < minimum and isinstance(f.get("path"), str)}


def _confidence(finding: dict) -> float:
    """A stored finding's confidence; one stored before confidences were given counts by the
    rule without the engine's estimate (so a minimum treats it as today's would be)."""
    value = finding.get("confidence")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    name = list_of(finding.get("path", ""))
    if name not in BASE:
        return 0.0
    return confidence_of(name, sources=len(finding.get("source_ids") or []), feedback=finding.get("feedback"))


def filtered(result: dict, minimum: float | None, *, fresh: bool = False) -> dict:
    """``result`` as shown with ``minimum``: findings under it left out of ``findings``, their
    items out of the item lists (the other findings' paths renumbered), reasons whose findings
    are all left out dropped (the others name only findings kept), the score the sum of the
    remaining reasons and its band derived again (a score without reasons stands), and
    ``filtered: {min_confidence, findings_left_out}``. ``minimum`` None: the result as it is.
    ``fresh``: ``result`` was just parsed for this and nothing else holds it, so it is changed in
    place (a read's copy would cost a third of its filtering)."""
    if minimum is None or not isinstance(result, dict):
        return result
    shown = result if fresh else copy.deepcopy(result)
    left_out = below(shown, minimum)
    if left_out:
        moved = _drop_items(shown, left_out)
        kept, gone = [], set()
        for finding in shown.get("findings") or []:
            if finding.get("path") in left_out:
                gone.add(finding.get("id"))
            else:
                kept.append({**finding, "path": moved.get(finding["path"], finding["path"])})
        shown["findings"] = kept
        risk = shown.get("risk")
        reasons = (risk or {}).get("reasons") or []
        if isinstance(risk, dict) and reasons:
            remaining = []
            for reason in reasons:
                ids = reason.get("finding_ids") or []
                if ids and all(fid in gone for fid in ids):
                    continue
                remaining.append({**reason, "finding_ids": [fid for fid in ids if fid not in gone]})
            risk["reasons"] = remaining
            risk["score"] = min(100, max(0, sum(int(r.get("points") or 0) for r in remaining)))
            risk["band"] = band_for(risk["score"])
    shown["filtered"] = {"min_confidence": minimum, "findings_left_out": len(left_out)}
    return shown


def _drop_items(result: dict, paths: set[str]) -> dict[str, str]:
    """Remove the items at ``paths`` from their lists; the new path of each item kept that moved."""
    moved: dict[str, str] = {}
    for name in BASE:
        group, _, member = name.partition(".")
        holder = result.get(group) if member else result
        key = member or group
        if not isinstance(holder, dict) or not isinstance(holder.get(key), list):
            continue
        items: list = holder[key]
        kept: list = []
        for index, item in enumerate(items):
            if f"{name}[{index}]" in paths:
                continue
            if len(kept) != index:
                moved[f"{name}[{index}]"] = f"{name}[{len(kept)}]"
            kept.append(item)
        holder[key] = kept
    return moved
