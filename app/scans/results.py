"""Validation and normalisation of the engine's result (E2, D6).

The engine's ``result`` is untrusted input. ``normalize_result`` keeps only the
fields of §2.2, fills what is missing with empty values, clamps the score to
0..100, derives the band from the (clamped) score, normalises breach dates to
``YYYY-MM`` and phone numbers to E.164, and keeps artifacts only when they are
absolute http(s) URLs. Anything that cannot be made valid raises ``InvalidResult``,
and the scan fails with ``engine_failed``.

The engine may add sources, evidence and reasons (E6, D23). They become ``sources``,
``coverage``, ``partial``, ``findings`` (one per item, with the sources that back it and a
id that follows the item, D26) and ``risk.reasons`` (naming findings by id). An engine
without them gets the same fields, empty. Reasons that do not add up to the score or name no
item are dropped (and logged), never the scan failed: they are an explanation, not the result.

A re-run's result is merged into its original's (``merge_rerun``, D26): the whole picture.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import urlsplit

from app.plumbing import crypto
from app.scans import confidence
from app.scans.bands import BAND_NAMES, band_for
from app.targets import identity as targets

log = logging.getLogger(__name__)

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


def _int(value, default=0, *, minimum=0):
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)) and math.isfinite(value):
        return max(minimum, int(value))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return max(minimum, int(value.strip()))
    return default


def _text(value, default="") -> str:
    if value.__class__ is str:  # nearly every call (a result has thousands): the checks below say the same
        return value[:MAX_TEXT]
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


@dataclass(frozen=True)
class Owner:
    """Whose scan of which target a result is: what its findings' ids are keyed to (D26)."""
    customer_id: str
    kind: str
    target: str


def normalize_result(raw, kind: str, *, scan_id: str | None = None, owner: Owner | None = None,
                     stored: bool = False) -> dict:
    """The result of §2.2 / D6 with the parts of E6 (D23). With ``owner`` each finding's id
    follows its item (``item_finding_id``, D26); without, as before D26, ``scan_id`` and its
    path seed it (a sample body; the migration of D23). ``stored``: ``raw`` is a
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
        _add_explanation(result, raw, moves, scan_id, owner, stored=stored)
        return result
    except InvalidResult:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidResult(str(exc)) from exc


# What a batch look just wrote, by scan id: each result's JSON text and the dict it was dumped from.
JustWritten = Mapping[str, tuple[str, dict]]


def parsed_result(scan, just_written: JustWritten | None = None) -> dict:
    """``scan.result_json`` parsed; or, while that is still the text in ``just_written``, the dict it
    was written from: the writes that follow a batch look's finals (feedback carried, source answers
    counted) read its results without parsing again what it just wrote (a parse per write was a
    tenth of a look's CPU). Read only: the dict may be shared, never to be changed."""
    if just_written:
        text, result = just_written.get(scan.id, (None, None))
        if result is not None and text == scan.result_json:
            return result
    return json.loads(scan.result_json)


# --- E6: sources, evidence, reasons (D23) ---------------------------------------------

def _add_explanation(result: dict, raw: dict, moves: dict[str, dict[int, int]], scan_id: str | None,
                     owner: Owner | None, *, stored: bool) -> None:
    """Add ``sources``, ``coverage``, ``partial``, ``findings`` and ``risk.reasons`` to ``result``.

    A result this function already normalised (``stored``: findings in place of evidence,
    reasons naming finding ids) comes through unchanged, feedback included."""
    sources = _sources(raw.get("sources"))
    known = {source["id"] for source in sources}
    findings = _findings(result, scan_id, owner)
    by_path = {finding["path"]: finding for finding in findings}
    earlier = _earlier_findings(raw.get("findings")) if stored else {}
    evidence = raw.get("evidence") if "evidence" in raw else [
        {"path": path, "source_ids": item.get("source_ids"), "confidence": item.get("confidence"),
         "matched_on": item.get("matched_on")} for path, item in earlier.items()]
    estimates: dict[str, float] = {}
    for path, source_ids, estimate, matched in _evidence(evidence, moves):
        finding = by_path.get(path)
        if finding is not None:
            finding["source_ids"] += [s for s in source_ids if s in known and s not in finding["source_ids"]]
            finding["matched_on"] += [m for m in matched if m not in finding["matched_on"]]
            if estimate is not None:
                estimates[path] = max(estimate, estimates.get(path, 0.0))
    for path, item in earlier.items():
        if path in by_path:
            by_path[path]["feedback"] = feedback_of(item.get("feedback"))
    for path, finding in by_path.items():  # D29: one rule (app.scans.confidence)
        finding["confidence"] = confidence.confidence_of(_list_and_index(path)[0],  # type: ignore[index]
                                                         engine=estimates.get(path),
                                                         sources=len(finding["source_ids"]),
                                                         feedback=finding["feedback"])
    paths_of = {item["id"]: path for path, item in earlier.items() if isinstance(item.get("id"), str)}
    result["risk"]["reasons"] = _reasons(_dict(raw.get("risk")).get("reasons"), result["risk"]["score"],
                                         by_path, moves, scan_id, paths_of)
    result["sources"] = sources
    result["coverage"] = coverage_of(sources)
    result["partial"] = result["coverage"]["failed"] > 0
    result["findings"] = findings
    result["match"] = True  # D29: until a scan's ``required`` says otherwise when it completes


def _earlier_findings(raw) -> dict[str, dict]:
    """The findings of a result normalised before, by path."""
    return {item["path"]: item for item in _optional_list(raw)
            if isinstance(item, dict) and isinstance(item.get("path"), str)}


def feedback_of(raw) -> dict | None:
    """A finding's feedback ``{verdict, note, at, scan_id}`` (``scan_id``: the scan it was given
    on, D26), or None."""
    if not isinstance(raw, dict) or raw.get("verdict") not in FEEDBACK_VERDICTS:
        return None
    feedback = {"verdict": raw["verdict"], "note": _text(raw.get("note"))[:1000], "at": _timestamp(raw.get("at"))}
    if isinstance(raw.get("scan_id"), str):  # every feedback since D26 (migration 20 named it on those before)
        feedback["scan_id"] = raw["scan_id"]
    return feedback


def coverage_of(sources: list[dict]) -> dict:
    """``checked`` (not skipped), ``found``, ``failed`` (error, rate-limited, timed out) and the
    share of checked sources that answered (1 when none was checked)."""
    checked = sum(1 for s in sources if s["status"] != "skipped")
    failed = sum(1 for s in sources if s["status"] in FAILED_STATUSES)
    found = sum(1 for s in sources if s["status"] == "found")
    ratio = round((checked - failed) / checked, 4) if checked else 1.0
    return {"checked": checked, "found": found, "failed": failed, "ratio": ratio}


# A source this service left out of the submission because it was quarantined (D30).
QUARANTINED = "quarantined"


def failed_source_ids(result: dict | None) -> list[str]:
    """The ids of the sources a result's engine could not check (what a re-run asks for)."""
    return [s["id"] for s in (result or {}).get("sources") or [] if s.get("status") in FAILED_STATUSES]


def finding_id(scan_id: str | None, path: str) -> str:
    """A finding's id before D26, from its scan and its path (results with no ``Owner``)."""
    digest = hashlib.sha256(f"{scan_id or ''}:{path}".encode()).digest()[:15]
    return "fnd_" + base64.urlsafe_b64encode(digest).decode("ascii")


def item_finding_id(owner: Owner, identity: tuple) -> str:
    """A finding's id (D26): a keyed hash of the customer, the canonical target and what the item
    is (``_identities``), so the same item has the same id in every scan of the customer for the
    target, another customer's differs, and nothing of the item can be read from it."""
    return _item_id(_owner_part(owner), identity)


def _owner_part(owner: Owner) -> str:
    """The start of the message of every finding id of ``owner``'s result (once per result, not per item)."""
    return "\x1f".join((owner.customer_id, owner.kind, targets.canonical(owner.kind, owner.target)))


def _item_id(owner_part: str, identity: tuple) -> str:
    message = "\x1f".join((owner_part, *map(str, identity)))
    return "fnd_" + base64.urlsafe_b64encode(crypto.finding_digest(message)[:15]).decode("ascii")


def _fold(value) -> str:
    return _text(value).strip().casefold()


def _item_identity(name: str, item) -> tuple:
    """What an item is, whatever list or place it stands in: a profile is its platform and handle
    (its URL when it has no handle), whether verified or weak; an e-mail address, case-folded; a
    phone number in E.164; a breach its name and month."""
    if name.startswith("profiles."):
        return ("profile", _fold(item.get("platform")), _fold(item.get("handle")).removeprefix("@")
                or _fold(item.get("url")))
    if name == "contacts.emails":
        return ("email", _fold(item))
    if name == "contacts.phones":
        return ("phone", _text(item).strip())
    return ("breach", _fold(item.get("name")), _text(item.get("date")))


def _identities(result: dict) -> dict[str, tuple]:
    """Each item's identity by path; an item repeated in one result is told apart by its rank
    among the repeats (in the order of ``findings``), so ids stay unique within a result."""
    seen: Counter = Counter()
    identities = {}
    for name in FINDING_LISTS:
        for index, item in enumerate(_items(result, name)):
            identity = _item_identity(name, item)
            seen[identity] += 1
            identities[f"{name}[{index}]"] = (*identity, seen[identity]) if seen[identity] > 1 else identity
    return identities


def _items(result: dict, name: str) -> list:
    group, _, member = name.partition(".")
    items = result.get(group)
    if member:
        items = items.get(member) if isinstance(items, dict) else None
    return items if isinstance(items, list) else []


def _findings(result: dict, scan_id: str | None, owner: Owner | None = None) -> list[dict]:
    paths = [f"{name}[{index}]" for name in FINDING_LISTS for index in range(len(_items(result, name)))]
    if owner is not None:
        identities = _identities(result)
        owner_part = _owner_part(owner)  # once, not per item
        ids = [_item_id(owner_part, identities[path]) for path in paths]
    else:
        ids = [finding_id(scan_id, path) for path in paths]
    return [{"id": fid, "path": path, "source_ids": [], "confidence": 0.0, "matched_on": [], "feedback": None}
            for path, fid in zip(paths, ids)]


def _timestamp(value) -> str | None:
    return _timestamp_of(value) if isinstance(value, str) else None


@lru_cache(maxsize=4096)
def _timestamp_of(value: str) -> str | None:
    """``value`` as UTC ``...Z``, or None. Cached: a result's sources mostly answered at one time,
    and parsing and formatting it for each of them was a tenth of a normalisation."""
    if not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _source_id(value) -> str | None:
    if value.__class__ is str:  # nearly every one: the checks below say the same
        return value.strip()[:MAX_ID] or None
    text = _text(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return text[:MAX_ID] or None


def _optional_list(value) -> list:
    """An E6 list: anything but a list is taken as none (an engine's explanation never fails its scan)."""
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _latency(value) -> int | None:
    if value.__class__ is int and value >= 0:  # the common case: as it is
        return value
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
        if status not in SOURCE_STATUSES:
            status = "error"
        source = {"id": source_id, "name": _text(item.get("name")).strip()[:200] or source_id, "status": status,
                  "checked_at": _timestamp(item.get("checked_at")), "latency_ms": _latency(item.get("latency_ms"))}
        if status == "skipped" and item.get("reason") == QUARANTINED:
            source["reason"] = QUARANTINED  # left out by this service (D30), kept on every later read
        sources.append(source)
    return sources


@lru_cache(maxsize=4096)
def _list_and_index(path: str) -> tuple[str, int] | None:
    """The list of items and the index a path names (``profiles.weak[2]``: ``("profiles.weak", 2)``),
    or None. Cached: every result names the same few paths, several times each."""
    match = PATH_RE.match(path.strip())
    if match is None or match.group(1) not in FINDING_LISTS:
        return None
    return match.group(1), int(match.group(2))


def _moved_path(path, moves: dict[str, dict[int, int]]) -> str | None:
    """The engine's path of an item as a path into the normalised result (None: no such item)."""
    parsed = _list_and_index(path) if isinstance(path, str) else None
    if parsed is None:
        return None
    name, index = parsed
    if name in moves:
        moved = moves[name].get(index)
        return None if moved is None else f"{name}[{moved}]"
    return f"{name}[{index}]"


def _evidence(raw, moves) -> list[tuple[str, list[str], float | None, list[str]]]:
    """Each usable evidence entry: its item's path, its sources, and the engine's estimate and
    ``matched_on`` (E8, optional)."""
    entries = []
    for item in _optional_list(raw):
        if not isinstance(item, dict):
            continue
        path = _moved_path(item.get("path"), moves)
        source_ids = item.get("source_ids")
        if path is None or not isinstance(source_ids, list):
            continue
        entries.append((path, [s for s in map(_source_id, source_ids) if s],
                        confidence.engine_confidence(item.get("confidence")),
                        confidence.matched_on(item.get("matched_on"))))
    return entries


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


# --- re-runs (D26) -----------------------------------------------------------------------

def merge_rerun(original: dict, rerun: dict, original_scan_id: str) -> dict:
    """A re-run's result as the whole picture: the original's items and source answers, the
    re-asked sources' answers in place of theirs, and the items only the re-run found added at
    the end of their lists. A finding keeps the original's id (and feedback) and lists every
    source that found it in either; coverage and ``partial`` count all sources. The risk is the
    higher of the two scores with its reasons (the original's on a tie); summary, artifacts and
    phone profile are the original's unless it had none; each count the larger."""
    merged = copy.deepcopy(rerun)
    for name in FINDING_LISTS:  # the original's items first, in their places
        _set_items(merged, name, copy.deepcopy(_items(original, name)))
    ids, found = _merged_findings(original, rerun, merged, original_scan_id)
    merged["findings"] = found
    merged["sources"] = _merged_sources(original.get("sources"), rerun.get("sources") or [])
    merged["coverage"] = coverage_of(merged["sources"])
    merged["partial"] = merged["coverage"]["failed"] > 0
    merged["risk"] = _merged_risk(original.get("risk") or {}, rerun["risk"], ids)
    merged["counts"] = {name: max(_int((original.get("counts") or {}).get(name)), value)
                        for name, value in rerun["counts"].items()}
    for name in ("phone_profile", "ai_summary"):
        merged[name] = original.get(name) or rerun[name]
    merged["artifacts"] = {name: (original.get("artifacts") or {}).get(name) or url
                           for name, url in rerun["artifacts"].items()}
    return merged


def _set_items(result: dict, name: str, items: list) -> None:
    group, _, member = name.partition(".")
    if member:
        result[group][member] = items
    else:
        result[group] = items


def _merged_findings(original: dict, rerun: dict, merged: dict, original_scan_id: str) -> tuple[dict, list]:
    """The merged findings (adding the re-run's new items to ``merged``), and which id each of the
    re-run's findings has in them. Items are matched by what they are, not by id, so a result
    stored before ids followed items merges too."""
    by_identity = {identity: path for path, identity in _identities(original).items()}
    earlier = {f["path"]: f for f in original.get("findings") or [] if isinstance(f, dict) and "path" in f}
    findings = {}
    for path in _identities(original):
        finding = copy.deepcopy(earlier.get(path) or {"id": finding_id(original_scan_id, path), "path": path,
                                                      "source_ids": [], "feedback": None})
        if finding.get("feedback") is not None and not finding["feedback"].get("scan_id"):
            finding["feedback"] = {**finding["feedback"], "scan_id": original_scan_id}
        findings[path] = finding
    ids = {}
    later = {f["path"]: f for f in rerun["findings"]}
    rerun_items = {f"{name}[{index}]": item for name in FINDING_LISTS for index, item in enumerate(_items(rerun, name))}
    for path, identity in _identities(rerun).items():
        finding = later[path]
        if identity in by_identity:
            kept = findings[by_identity[identity]]
            kept["source_ids"] += [s for s in finding["source_ids"] if s not in kept["source_ids"]]
            _merge_confidence(kept, finding)
        else:
            name = PATH_RE.match(path).group(1)  # type: ignore[union-attr]  # paths are ours
            items = _items(merged, name)
            kept = {**finding, "path": f"{name}[{len(items)}]"}
            items.append(rerun_items[path])
            findings[kept["path"]] = kept
        ids[finding["id"]] = kept["id"]
    order = {name: rank for rank, name in enumerate(FINDING_LISTS)}

    def place(path: str) -> tuple[int, int]:
        match = PATH_RE.match(path)
        return order[match.group(1)], int(match.group(2))  # type: ignore[union-attr]

    return ids, [findings[path] for path in sorted(findings, key=place)]


def _merge_confidence(kept: dict, found: dict) -> None:
    """A finding both found (D29): what either said it matched on, and the higher of the two
    confidences, or of the rule's for every source that found it (the customer's feedback, kept
    with the original's finding, still wins)."""
    kept["matched_on"] = list(dict.fromkeys((kept.get("matched_on") or []) + (found.get("matched_on") or [])))
    if kept.get("feedback") is not None:
        confidence.with_feedback(kept)
        return
    name = PATH_RE.match(kept["path"]).group(1)  # type: ignore[union-attr]  # paths are ours
    kept["confidence"] = max(float(kept.get("confidence") or 0.0), float(found.get("confidence") or 0.0),
                             confidence.confidence_of(name, sources=len(kept["source_ids"])))


def _merged_sources(original, rerun: list[dict]) -> list[dict]:
    """The original's sources with the re-run's answers in their places; sources only the re-run
    asked come after."""
    answers = {source["id"]: source for source in rerun}
    sources = [answers.pop(s["id"], s) for s in original or [] if isinstance(s, dict) and "id" in s]
    return sources + list(answers.values())


def _merged_risk(original: dict, rerun: dict, ids: dict[str, str]) -> dict:
    if _int(original.get("score")) >= rerun["score"] and original.get("band") in BAND_NAMES:
        return copy.deepcopy(original)
    return {**rerun, "reasons": [{**reason, "finding_ids": [ids.get(f, f) for f in reason["finding_ids"]]}
                                 for reason in rerun.get("reasons") or []]}
