"""Validation and normalisation of the engine's result (E2, D6).

The engine's ``result`` is untrusted input. ``normalize_result`` keeps only the
fields of §2.2, fills what is missing with empty values, clamps the score to
0..100, derives the band from the (clamped) score, normalises breach dates to
``YYYY-MM`` and phone numbers to E.164, and keeps artifacts only when they are
absolute http(s) URLs. Anything that cannot be made valid raises ``InvalidResult``,
and the scan fails with ``engine_failed``.
"""
from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

BANDS = (("low", 0, 24), ("medium", 25, 49), ("high", 50, 74), ("critical", 75, 100))
BAND_NAMES = {name for name, _, _ in BANDS}
DATE_RE = re.compile(r"^(\d{4})-(\d{1,2})(?:-\d{1,2})?(?:[T ].*)?$")
E164_RE = re.compile(r"^\+[1-9][0-9]{6,14}$")
MAX_ITEMS = 500
MAX_TEXT = 20_000


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


def normalize_result(raw, kind: str) -> dict:
    if not isinstance(raw, dict):
        raise InvalidResult("the result is not an object")
    try:
        counts = _dict(raw.get("counts"))
        profiles = _dict(raw.get("profiles"))
        contacts = _dict(raw.get("contacts"))
        artifacts = _dict(raw.get("artifacts"))
        return {
            "risk": _risk(raw.get("risk")),
            "counts": {name: _int(counts.get(name)) for name in ("cases", "entities", "findings")},
            "profiles": {name: [_profile(p) for p in _list(profiles.get(name))] for name in ("verified", "weak")},
            "contacts": {
                "emails": [_text(e) for e in _list(contacts.get("emails")) if isinstance(e, str) and "@" in e],
                "phones": [p for p in (re.sub(r"[ ()-]", "", _text(x)) for x in _list(contacts.get("phones")))
                           if E164_RE.match(p)],
            },
            "breaches": [_breach(b) for b in _list(raw.get("breaches"))],
            "phone_profile": _phone_profile(raw.get("phone_profile")) if kind == "phone" else None,
            "ai_summary": _text(raw.get("ai_summary")),
            "artifacts": {name: _absolute_url(artifacts.get(name)) for name in ("pdf", "person_card")},
        }
    except InvalidResult:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidResult(str(exc)) from exc
