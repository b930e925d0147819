# Frozen: app/scans/results.py as migration 13 ("results explained") last ran it (commit
# d45ed08, where it gained ``stored=True``). Never edit it: the live normaliser may change,
# this one must not. Only app/migrations.py imports it.
"""Validation and normalisation of the engine's result (E2, D6).

The engine's ``result`` is untrusted input. ``normalize_result`` keeps only the
fields of §2.2, fills what is missing with empty values, clamps the score to
0..100, derives the band from the (clamped) score, normalises breach dates to
``YYYY-MM`` and phone numbers to E.164, and keeps artifacts only when they are
absolute http(s) URLs. Anything that cannot be made valid raises ``InvalidResult``,
and the scan fails with ``engine_failed``.

The engine may add sources, evidence and reasons (E6, D23). They become ``sources``,
``coverage``, ``partial``, ``findings`` (one per item, with the sources that back it and a
stable id) and ``risk.reasons`` (naming findings by id). An engine without them gets the
same fields, empty. Reasons that do not add up to the score or name no item are dropped
(and logged), never the scan failed: they are an explanation, not the result.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import math
import re
from datetime import UTC, datetime
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

BANDS = (("low", 0, 24), ("medium", 25, 49), ("high", 50, 74), ("critical", 75, 100))
BAND_NAMES = {name for name, _, _ in BANDS}
DATE_RE = re.compile(r"^(\d{4})-(\d{1,2})(?:-\d{1,2})?(?:[T ].*)?$")
E164_RE = re.compile(r"^\+[1-9][0-9]{6,14}$")
MAX_ITEMS = 500
MAX_TEXT = 20_000
MAX_ID = 64
SOURCE_STATUSES = ("found", "not_found", "error", "rate_limited", "timeout", "skipped")
FAILED_STATUSES = frozenset({"error", "rate_limited", "timeout"})
# The lists whose items are findings, in the order of ``findings``.
FINDING_LISTS = ("profiles.verified", "profiles.weak", "contacts.emails", "contacts.phones", "breaches")
FEEDBACK_VERDICTS = ("false_positive", "confirmed")
PATH_RE = re.compile(r"^([a-z_.]+)\[(\d+)\]$")


class InvalidResult(ValueError):
    pass


def band_for(score: int) -> str:
    return next(name for name, low, high in BANDS if low <= score <= high)


def _int(value, default=0, *, minimum=0):
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)) and math.isfinite(value):
        return max(minimum, int(value))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return max(minimum, int(value.strip()))
    return default


def _text(value, default="") -> str:
    if value is None:
        return default
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)[:MAX_TEXT]
    return default


def _list(value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidResult("expected a list")
    return value[:MAX_ITEMS]


def _dict(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidResult("expected an object")
    return value


def _risk(raw) -> dict:
    raw = _dict(raw)
    score = raw.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        if score is None:
            score = 0
        else:
            raise InvalidResult("risk.score is not a number")
    score = min(100, max(0, round(score)))
    # D6 defines each band as a score range, so the band always follows the (clamped)
    # score: an absent, unknown or contradicting engine band is never kept.
    return {"score": score, "band": band_for(score)}


def _profile(raw) -> dict:
    raw = _dict(raw)
    confidence = raw.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not math.isfinite(confidence):
        confidence = 0.0
    return {
        "platform": _text(raw.get("platform")), "url": _text(raw.get("url")), "handle": _text(raw.get("handle")),
        "display_name": _text(raw.get("display_name")), "confidence": min(1.0, max(0.0, float(confidence))),
    }


def _absolute_url(value) -> str:
    """D6: artifacts are absolute http(s) URLs; anything else becomes ""."""
    text = _text(value).strip() if isinstance(value, str) else ""
    parts = urlsplit(text)
    return text if parts.scheme in ("http", "https") and parts.netloc else ""


def _breach(raw) -> dict:
    raw = _dict(raw)
    match = DATE_RE.match(_text(raw.get("date")).strip())
    date = ""
    if match and 1 <= int(match.group(2)) <= 12:
        date = f"{match.group(1)}-{int(match.group(2)):02d}"
    return {"name": _text(raw.get("name")), "date": date, "accounts": _int(raw.get("accounts")),
            "classes": [_text(c) for c in _list(raw.get("classes")) if _text(c)]}


def _phone_profile(raw):
    if raw is None:
        return None
    raw = _dict(raw)
    if not raw:
        return None
    region = raw.get("region")
    return {
        "e164": _text(raw.get("e164")), "country_code": _int(raw.get("country_code")),
        "region": region if isinstance(region, str) and region else None,
        "carrier": _text(raw.get("carrier")), "line_type": _text(raw.get("line_type")),
        "valid": bool(raw.get("valid")) if isinstance(raw.get("valid"), bool) else False,
        "timezones": [_text(t) for t in _list(raw.get("timezones")) if _text(t)],
    }


def _kept(values, clean) -> tuple[list, dict[int, int]]:
    """The values ``clean`` keeps (it answers None for one to drop), and which raw index
    became which kept one: the engine's evidence names items by their raw index."""
    kept: list = []
    moved: dict[int, int] = {}
    for index, value in enumerate(_list(values)):
        value = clean(value)
        if value is not None:
            moved[index] = len(kept)
            kept.append(value)
    return kept, moved


def _email(value):
    return _text(value) if isinstance(value, str) and "@" in value else None


def _phone(value):
    phone = re.sub(r"[ ()-]", "", _text(value))
    return phone if E164_RE.match(phone) else None


def normalize_result(raw, kind: str, *, scan_id: str | None = None, stored: bool = False) -> dict:
    """The result of §2.2 / D6 with the parts of E6 (D23); ``scan_id`` seeds the findings' ids,
    so that normalising one scan's result again gives the same ids. ``stored``: ``raw`` is a
    result this service normalised before, whose findings (their sources and the customer's
    feedback) and reasons by finding id are kept; an engine's ``findings`` are never read, so
    no engine can write a customer's feedback."""
    if not isinstance(raw, dict):
        raise InvalidResult("the result is not an object")
    try:
        counts = _dict(raw.get("counts"))
        profiles = _dict(raw.get("profiles"))
        contacts = _dict(raw.get("contacts"))
        artifacts = _dict(raw.get("artifacts"))
        emails, email_moves = _kept(contacts.get("emails"), _email)
        phones, phone_moves = _kept(contacts.get("phones"), _phone)
        result = {
            "risk": _risk(raw.get("risk")),
            "counts": {name: _int(counts.get(name)) for name in ("cases", "entities", "findings")},
            "profiles": {name: [_profile(p) for p in _list(profiles.get(name))] for name in ("verified", "weak")},
            "contacts": {"emails": emails, "phones": phones},
            "breaches": [_breach(b) for b in _list(raw.get("breaches"))],
            "phone_profile": _phone_profile(raw.get("phone_profile")) if kind == "phone" else None,
            "ai_summary": _text(raw.get("ai_summary")),
            "artifacts": {name: _absolute_url(artifacts.get(name)) for name in ("pdf", "person_card")},
        }
        moves = {"contacts.emails": email_moves, "contacts.phones": phone_moves}
        _add_explanation(result, raw, moves, scan_id, stored=stored)
        return result
    except InvalidResult:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidResult(str(exc)) from exc


# --- E6: sources, evidence, reasons (D23) ---------------------------------------------

def _add_explanation(result: dict, raw: dict, moves: dict[str, dict[int, int]], scan_id: str | None, *,
                     stored: bool) -> None:
    """Add ``sources``, ``coverage``, ``partial``, ``findings`` and ``risk.reasons`` to ``result``.

    A result this function already normalised (``stored``: findings in place of evidence,
    reasons naming finding ids) comes through unchanged, feedback included."""
    sources = _sources(raw.get("sources"))
    known = {source["id"] for source in sources}
    findings = _findings(result, scan_id)
    by_path = {finding["path"]: finding for finding in findings}
    earlier = _earlier_findings(raw.get("findings")) if stored else {}
    evidence = raw.get("evidence") if "evidence" in raw else [
        {"path": path, "source_ids": item.get("source_ids")} for path, item in earlier.items()]
    for path, source_ids in _evidence(evidence, moves):
        finding = by_path.get(path)
        if finding is not None:
            finding["source_ids"] += [s for s in source_ids if s in known and s not in finding["source_ids"]]
    for path, item in earlier.items():
        if path in by_path:
            by_path[path]["feedback"] = feedback_of(item.get("feedback"))
    paths_of = {item["id"]: path for path, item in earlier.items() if isinstance(item.get("id"), str)}
    result["risk"]["reasons"] = _reasons(_dict(raw.get("risk")).get("reasons"), result["risk"]["score"],
                                         by_path, moves, scan_id, paths_of)
    result["sources"] = sources
    result["coverage"] = coverage_of(sources)
    result["partial"] = result["coverage"]["failed"] > 0
    result["findings"] = findings


def _earlier_findings(raw) -> dict[str, dict]:
    """The findings of a result normalised before, by path."""
    return {item["path"]: item for item in _optional_list(raw)
            if isinstance(item, dict) and isinstance(item.get("path"), str)}


def feedback_of(raw) -> dict | None:
    """A finding's feedback ``{verdict, note, at}``, or None."""
    if not isinstance(raw, dict) or raw.get("verdict") not in FEEDBACK_VERDICTS:
        return None
    return {"verdict": raw["verdict"], "note": _text(raw.get("note"))[:1000], "at": _timestamp(raw.get("at"))}


def coverage_of(sources: list[dict]) -> dict:
    """``checked`` (not skipped), ``found``, ``failed`` (error, rate-limited, timed out) and the
    share of checked sources that answered (1 when none was checked)."""
    checked = sum(1 for s in sources if s["status"] != "skipped")
    failed = sum(1 for s in sources if s["status"] in FAILED_STATUSES)
    found = sum(1 for s in sources if s["status"] == "found")
    ratio = round((checked - failed) / checked, 4) if checked else 1.0
    return {"checked": checked, "found": found, "failed": failed, "ratio": ratio}


def failed_source_ids(result: dict | None) -> list[str]:
    """The ids of the sources a result's engine could not check (what a re-run asks for)."""
    return [s["id"] for s in (result or {}).get("sources") or [] if s.get("status") in FAILED_STATUSES]


def finding_id(scan_id: str | None, path: str) -> str:
    """A finding's id: derived from its scan and its path, so every read shows the same one."""
    digest = hashlib.sha256(f"{scan_id or ''}:{path}".encode()).digest()[:15]
    return "fnd_" + base64.urlsafe_b64encode(digest).decode("ascii")


def _findings(result: dict, scan_id: str | None) -> list[dict]:
    findings: list[dict] = []
    for name in FINDING_LISTS:
        group, _, member = name.partition(".")
        items = result[group][member] if member else result[group]
        for index in range(len(items)):
            path = f"{name}[{index}]"
            findings.append({"id": finding_id(scan_id, path), "path": path, "source_ids": [], "feedback": None})
    return findings


def _timestamp(value) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _source_id(value) -> str | None:
    text = _text(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return text[:MAX_ID] or None


def _optional_list(value) -> list:
    """An E6 list: anything but a list is taken as none (an engine's explanation never fails its scan)."""
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _latency(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _sources(raw) -> list[dict]:
    """Each source once (the first of a repeated id), its status one of SOURCE_STATUSES: an
    unknown one counts as an error, since the source gave no usable answer."""
    sources, seen = [], set()
    for item in _optional_list(raw):
        if not isinstance(item, dict):
            continue
        source_id = _source_id(item.get("id"))
        if source_id is None or source_id in seen:
            continue
        seen.add(source_id)
        status = item.get("status")
        latency = item.get("latency_ms")
        sources.append({
            "id": source_id,
            "name": _text(item.get("name")).strip()[:200] or source_id,
            "status": status if status in SOURCE_STATUSES else "error",
            "checked_at": _timestamp(item.get("checked_at")),
            "latency_ms": _latency(latency),
        })
    return sources


def _moved_path(path, moves: dict[str, dict[int, int]]) -> str | None:
    """The engine's path of an item as a path into the normalised result (None: no such item)."""
    match = PATH_RE.match(path.strip()) if isinstance(path, str) else None
    if match is None or match.group(1) not in FINDING_LISTS:
        return None
    name, index = match.group(1), int(match.group(2))
    if name in moves:
        moved = moves[name].get(index)
        return None if moved is None else f"{name}[{moved}]"
    return f"{name}[{index}]"


def _evidence(raw, moves) -> list[tuple[str, list[str]]]:
    pairs = []
    for item in _optional_list(raw):
        if not isinstance(item, dict):
            continue
        path = _moved_path(item.get("path"), moves)
        source_ids = item.get("source_ids")
        if path is None or not isinstance(source_ids, list):
            continue
        pairs.append((path, [s for s in map(_source_id, source_ids) if s]))
    return pairs


class _BadReasons(ValueError):
    pass


def _reasons(raw, score: int, by_path: dict[str, dict], moves, scan_id: str | None,
             paths_of: dict) -> list[dict]:
    """The reasons of the score, each naming its findings by id; all of them dropped (and
    logged, without their text) when they are malformed, name an item the result does not
    have, or do not add up to the score."""
    if raw is None:
        return []
    try:
        reasons = [_reason(item, by_path, moves, paths_of) for item in _list(raw)]
    except (_BadReasons, InvalidResult) as exc:
        log.warning("scan %s: the engine's risk reasons were dropped: %s", scan_id or "-", exc)
        return []
    total = sum(reason["points"] for reason in reasons)
    if reasons and total != score:
        log.warning("scan %s: the engine's risk reasons were dropped: their points add up to %d, not to the "
                    "score %d", scan_id or "-", total, score)
        return []
    return reasons


def _reason(item, by_path: dict[str, dict], moves, paths_of: dict) -> dict:
    if not isinstance(item, dict):
        raise _BadReasons("a reason is not an object")
    points = item.get("points")
    if isinstance(points, bool) or not isinstance(points, int):
        raise _BadReasons("a reason's points are not a whole number")
    code = _text(item.get("code")).strip()[:MAX_ID]
    if not code:
        raise _BadReasons("a reason has no code")
    finding_ids = []
    paths = item.get("paths")
    if paths is None and isinstance(item.get("finding_ids"), list):  # normalised before
        paths = [paths_of.get(finding) if isinstance(finding, str) else None for finding in item["finding_ids"]]
    if paths is not None and not isinstance(paths, list):
        raise _BadReasons("a reason's paths are not a list")
    for path in paths or []:
        finding = by_path.get(_moved_path(path, moves) or "")
        if finding is None:
            raise _BadReasons("a reason names an item the result does not have")
        if finding["id"] not in finding_ids:
            finding_ids.append(finding["id"])
    return {"code": code, "points": points, "description": _text(item.get("description")).strip()[:1000],
            "finding_ids": finding_ids}
