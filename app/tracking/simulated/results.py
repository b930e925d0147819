"""Deterministic, realistic-looking investigation results (the shape of §2.2 and D6).

Everything is drawn from a ``random.Random`` seeded with ``sha256("kind:target")``, so the
same target always gives the same result, while different targets vary: some have no
breaches and some several, profile counts and the risk score differ.

About one result in five is deliberately a little messy, in ways the service must repair
(E2): a breach date as ``YYYY-MM-DD``, an unknown extra field, ``risk.band``
missing, or a score above 100. ``messiness_of`` tells which, so tests can tell them apart.
Artifact URLs are the only part that depends on the investigation rather than the target.

The simulator serves these results as they come (mess included); the service's sandbox
engine asks for them without the mess (``messy=False``).

Each result also explains itself (E6): ``sources`` (ten to twenty of ``SOURCES``, each found,
not found or skipped; a ``partial…`` target has some rate-limited or timed out),
``evidence`` (the sources behind each item, by its path) and ``risk.reasons`` (points that
add up to the score and name the items behind them). Each evidence entry carries the engine's
``confidence`` that the item is the person's and what it ``matched_on`` (E8): deterministic, weak
profiles mostly under 0.5, breaches at 0.95 or more. A re-run asks for some sources only
(``sources=``): its result lists those, none of them failing.

A ``changing…`` target's result grows with each investigation (E7): ``generation`` (how many of
the target the simulator ran before) adds that many breaches and one verified profile for every
two, drawn in a fixed order from those the result does not hold yet, so an item found once is
found again, alike, every time after (until the fictional catalogues run out).
"""
import random
import re

import phonenumbers
from phonenumbers import carrier, timezone

from app.tracking.simulated.conventions import PARTIAL, behaviour_of, target_digest

# One result in MESSY_ONE_IN is messy.
MESSY_ONE_IN = 5
FULL_DATE, EXTRA_FIELD, NO_BAND, HIGH_SCORE = "full_date", "extra_field", "no_band", "high_score"
_MESS_KINDS = (FULL_DATE, EXTRA_FIELD, NO_BAND, HIGH_SCORE)

# D6 bands: lower bound of each band, highest first.
_BANDS = ((75, "critical"), (50, "high"), (25, "medium"), (0, "low"))

_PLATFORMS = (
    ("github", "https://github.com/{}"),
    ("x", "https://x.com/{}"),
    ("instagram", "https://www.instagram.com/{}"),
    ("reddit", "https://www.reddit.com/user/{}"),
    ("linkedin", "https://www.linkedin.com/in/{}"),
    ("tiktok", "https://www.tiktok.com/@{}"),
    ("telegram", "https://t.me/{}"),
    ("medium", "https://medium.com/@{}"),
    ("gitlab", "https://gitlab.com/{}"),
    ("pinterest", "https://www.pinterest.com/{}"),
    ("twitch", "https://www.twitch.tv/{}"),
    ("keybase", "https://keybase.io/{}"),
    ("steam", "https://steamcommunity.com/id/{}"),
    ("mastodon", "https://mastodon.social/@{}"),
)

# Fictional services, so nobody mistakes simulated breaches for real ones.
_BREACHES = (
    ("ShopHub", "2019-03", 12_400_000, ["email_addresses", "passwords", "names"]),
    ("PixelForum", "2016-11", 2_100_000, ["email_addresses", "usernames", "ip_addresses"]),
    ("FitTrack", "2021-07", 61_000_000, ["email_addresses", "dates_of_birth", "genders"]),
    ("TravelNest", "2018-05", 8_700_000, ["email_addresses", "phone_numbers", "names"]),
    ("GameVault", "2020-01", 33_500_000, ["email_addresses", "passwords", "usernames"]),
    ("QuickLoan", "2022-09", 540_000, ["names", "phone_numbers", "physical_addresses"]),
    ("ChatCircle", "2017-02", 97_000_000, ["email_addresses", "passwords", "phone_numbers"]),
    ("DevBoard", "2023-04", 1_250_000, ["email_addresses", "usernames", "employers"]),
    ("MealMate", "2015-08", 4_300_000, ["email_addresses", "passwords", "physical_addresses"]),
    ("CloudNotes", "2024-02", 18_900_000, ["email_addresses", "names", "device_information"]),
    ("RideShareGo", "2019-12", 57_000_000, ["names", "phone_numbers", "geographic_locations"]),
    ("PetPals", "2014-06", 760_000, ["email_addresses", "passwords"]),
)
# Weights of 0, 1, 2, ... breaches: about a third of targets have none.
_BREACH_COUNT_WEIGHTS = (32, 24, 18, 12, 8, 6)

_FIRST_NAMES = ("Alex", "Maria", "Jonas", "Priya", "Sam", "Elena", "Tomás", "Aiko", "Noah", "Fatima")
_LAST_NAMES = ("Smith", "Novak", "García", "Okafor", "Larsen", "Rossi", "Kim", "Dubois", "Patel", "Weber")
_MAIL_DOMAINS = ("gmail.com", "outlook.com", "proton.me", "yahoo.com", "example.org")
# Fictional-use ranges (Ofcom drama numbers, NANP 555-01xx) for invented related phones.
_PHONE_PATTERNS = ("+44770090{:04d}", "+1415555{:04d}")


_PLATFORM_NAMES = {"github": "GitHub", "x": "X", "linkedin": "LinkedIn", "tiktok": "TikTok", "gitlab": "GitLab"}
# The sources an investigation consults (E6): (id, name). Profile platforms are sources of
# their own; the others back contacts and breaches.
BREACH_INDEX, PASTE_MONITOR, MAILBOX, GRAVATAR, CARRIER, CALLER_ID = (
    "breach_index", "paste_monitor", "mailbox_verifier", "gravatar", "carrier_lookup", "caller_id")
SOURCES = (
    (BREACH_INDEX, "Breach Index"), (PASTE_MONITOR, "Paste Monitor"), (MAILBOX, "Mailbox Verifier"),
    (GRAVATAR, "Gravatar"), (CARRIER, "Carrier Lookup"), (CALLER_ID, "Caller ID Directory"),
    *((name, _PLATFORM_NAMES.get(name, name.capitalize())) for name, _ in _PLATFORMS),
)
SOURCE_IDS = tuple(source_id for source_id, _ in SOURCES)
FAILED_STATUSES = ("rate_limited", "timeout")


def result_for(kind: str, target: str, artifact_base: str, *, messy: bool = True,
               sources: list[str] | None = None, checked_at: str | None = None, generation: int = 0) -> dict:
    """The engine result of a completed investigation.

    ``artifact_base`` is the absolute URL prefix of this investigation's artifacts,
    e.g. ``http://127.0.0.1:8700/_sim/artifacts/inv_...``. With ``messy=False`` the
    result never carries the flaw ``messiness_of`` names for its target. ``sources``:
    a re-run of these sources only; ``checked_at``: when the sources answered; ``generation``:
    earlier investigations of a changing target (see the module's docstring).
    """
    rng = random.Random(target_digest(kind, target))
    person = _person(rng)
    handle = _handle_for(kind, target, person, rng)
    verified, weak = _profiles(rng, handle, person)
    profile = phone_profile(target) if kind == "phone" else None
    contacts = _contacts(kind, target, rng, person, profile)
    breaches = _breaches(rng)
    if generation:
        breaches = _grown(breaches, verified, weak, handle, " ".join(person), generation)
    score = _risk_score(rng, breaches, verified, contacts)
    result = {
        "risk": {"score": score, "band": band_for(score)},
        "counts": _counts(rng, verified, weak, contacts, breaches),
        "profiles": {"verified": verified, "weak": weak},
        "contacts": contacts,
        "breaches": breaches,
        "phone_profile": profile,
        "ai_summary": _summary(kind, target, score, verified, weak, breaches),
        "artifacts": {"pdf": f"{artifact_base}.pdf", "person_card": f"{artifact_base}.card.json"},
    }
    _explain(result, kind, target, only=sources, checked_at=checked_at)
    mess = messiness_of(kind, target) if messy else None
    if mess:
        _roughen(result, mess)
    return result


def band_for(score: int) -> str:
    """The D6 band of a score in 0..100."""
    return next(name for floor, name in _BANDS if score >= floor)


def messiness_of(kind: str, target: str) -> str | None:
    """Which repairable flaw, if any, the result of this target carries."""
    digest = target_digest(kind, target)
    if digest[8] % MESSY_ONE_IN:
        return None
    return _MESS_KINDS[digest[9] % len(_MESS_KINDS)]


def phone_profile(target: str) -> dict | None:
    """The D6 phone profile, from the ``phonenumbers`` metadata; ``None`` if unparseable."""
    try:
        number = phonenumbers.parse(target, None)
    except phonenumbers.NumberParseException:
        return None
    region = phonenumbers.region_code_for_number(number) or _region_of_country(number.country_code)
    return {
        "e164": phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164),
        "country_code": number.country_code,
        "region": region,
        # phonenumbers knows carriers for mobile ranges of some countries only.
        "carrier": carrier.name_for_number(number, "en") or None,
        "line_type": phonenumbers.PhoneNumberType.to_string(phonenumbers.number_type(number)).lower(),
        "valid": phonenumbers.is_valid_number(number),
        "timezones": _timezones(number, region),
    }


def _region_of_country(country_code: int | None) -> str | None:
    # Invalid numbers (e.g. fictional ranges) have no region of their own; their
    # calling code still names the main one.
    if country_code is None:  # a parsed number has one; the stubs allow none
        return None
    region = phonenumbers.region_code_for_country_code(country_code)
    return None if region == phonenumbers.UNKNOWN_REGION else region


def _timezones(number: phonenumbers.PhoneNumber, region: str | None) -> list[str]:
    zones = _known_zones(number)
    if not zones and region:
        # Fall back to the zones of the region's example number rather than "Etc/Unknown".
        example = phonenumbers.example_number(region)
        zones = _known_zones(example) if example else []
    return zones


def _known_zones(number: phonenumbers.PhoneNumber) -> list[str]:
    return [z for z in timezone.time_zones_for_number(number) if z != timezone.UNKNOWN_TIMEZONE]


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES)


def _handle_for(kind: str, target: str, person: tuple[str, str], rng: random.Random) -> str:
    if kind == "username":
        return target.lstrip("@")
    if kind == "email":
        local = target.rpartition("@")[0] or target
        return "".join(c for c in local if c.isalnum() or c in "._-") or "user"
    first, last = person
    return _ascii(f"{first}{last[0]}{rng.randint(10, 99)}").lower()


def _ascii(text: str) -> str:
    return text.encode("ascii", "ignore").decode("ascii")


def _profiles(rng: random.Random, handle: str, person: tuple[str, str]) -> tuple[list, list]:
    n_verified, n_weak = rng.randint(0, 4), rng.randint(0, 5)
    platforms = rng.sample(_PLATFORMS, n_verified + n_weak)
    full_name = " ".join(person)
    verified = [_profile(p, handle, full_name, round(rng.uniform(0.8, 0.99), 2)) for p in platforms[:n_verified]]
    weak = [
        _profile(p, _variant(rng, handle), rng.choice((full_name, person[0], "")), round(rng.uniform(0.2, 0.6), 2))
        for p in platforms[n_verified:]
    ]
    return verified, weak


def _profile(platform: tuple[str, str], handle: str, display_name: str, confidence: float) -> dict:
    name, url = platform
    return {"platform": name, "url": url.format(handle), "handle": handle,
            "display_name": display_name, "confidence": confidence}


def _variant(rng: random.Random, handle: str) -> str:
    return rng.choice((f"{handle}{rng.randint(1, 999)}", f"{handle}_", f"real{handle}", handle.replace(".", "_")))


def _contacts(kind: str, target: str, rng: random.Random, person: tuple[str, str], profile: dict | None) -> dict:
    first, last = (_ascii(p).lower() for p in person)
    emails = [target] if kind == "email" else []
    emails += [f"{first}.{last}{rng.randint(1, 99)}@{rng.choice(_MAIL_DOMAINS)}" for _ in range(rng.randint(0, 2))]
    phones = [profile["e164"]] if profile else []
    phones += [rng.choice(_PHONE_PATTERNS).format(rng.randint(100, 199)) for _ in range(rng.randint(0, 2))]
    return {"emails": emails, "phones": phones}


def _breaches(rng: random.Random) -> list[dict]:
    count = rng.choices(range(len(_BREACH_COUNT_WEIGHTS)), weights=_BREACH_COUNT_WEIGHTS)[0]
    chosen = sorted(rng.sample(_BREACHES, count), key=lambda b: b[1], reverse=True)
    return [{"name": n, "date": d, "accounts": a, "classes": list(c)} for n, d, a, c in chosen]


def _grown(breaches: list[dict], verified: list, weak: list, handle: str, full_name: str, generation: int) -> list:
    """A changing target's breaches with ``generation`` more (newest first, as ``_breaches``),
    and ``verified`` with one more profile for every two generations, on platforms not used yet."""
    known = {b["name"] for b in breaches}
    more = [{"name": n, "date": d, "accounts": a, "classes": list(c)} for n, d, a, c in _BREACHES if n not in known]
    used = {p["platform"] for p in verified + weak}
    verified += [_profile(p, handle, full_name, 0.9) for p in _PLATFORMS if p[0] not in used][:generation // 2]
    return sorted(breaches + more[:generation], key=lambda b: b["date"], reverse=True)


def _risk_score(rng: random.Random, breaches: list, verified: list, contacts: dict) -> int:
    # Exposure drives the score, plus noise, so bands vary but make sense.
    raw = 12 * len(breaches) + 6 * len(verified) + 3 * len(contacts["phones"]) + rng.randint(0, 35)
    return min(100, raw)


def _counts(rng: random.Random, verified: list, weak: list, contacts: dict, breaches: list) -> dict:
    entities = len(verified) + len(weak) + len(contacts["emails"]) + len(contacts["phones"])
    findings = entities + sum(len(b["classes"]) for b in breaches)
    cases = (1 if entities or breaches else 0) + rng.randint(0, 2)
    return {"cases": cases, "entities": entities, "findings": findings}


_OVERALL = re.compile(r"Overall risk is \w+ \(\d+/100\)\.")


def _summary(kind: str, target: str, score: int, verified: list, weak: list, breaches: list) -> str:
    noun = {"email": "The e-mail address", "phone": "The phone number", "username": "The username"}[kind]
    if breaches:
        names = ", ".join(b["name"] for b in breaches)
        exposure = f"appears in {len(breaches)} known breach{'es' if len(breaches) > 1 else ''} ({names})"
    else:
        exposure = "appears in no known breach"
    return (f"{noun} {target} {exposure}, is linked to {len(verified)} verified and {len(weak)} weakly "
            f"matched online profile{'s' if len(verified) + len(weak) != 1 else ''}. "
            f"Overall risk is {band_for(score)} ({score}/100).")


def _explain(result: dict, kind: str, target: str, *, only: list[str] | None, checked_at: str | None) -> None:
    """Add ``sources``, ``evidence`` and ``risk.reasons`` (E6) to a result. Drawn from a
    random generator of their own, so that the rest of the result is as it always was."""
    rng = random.Random(target_digest(kind, target) + b"sources")
    evidence = _evidence(result, kind)
    cited = {source_id for _, ids in evidence for source_id in ids}
    skipped = {CARRIER} if kind != "phone" else set()
    if kind == "username":
        skipped.add(MAILBOX)
    # Ten to twenty sources: every one that backs an item, the others drawn.
    others = [s for s in SOURCE_IDS if s not in cited]
    count = max(len(cited), rng.randint(10, len(SOURCE_IDS) - 3))  # room for a partial's failures
    used = set(cited) | set(rng.sample(others, max(0, min(len(others), count - len(cited)))))
    statuses = {s: "found" if s in cited else "skipped" if s in skipped else "not_found" for s in used}
    if only is None and behaviour_of(kind, target) == PARTIAL:
        _fail_some(statuses, rng)
    elif only is not None:  # a re-run: the sources asked for (that this engine knows), none failing
        statuses = {s: statuses.get(s, "not_found") for s in SOURCE_IDS if s in only}
    failed = {s for s, status in statuses.items() if status in FAILED_STATUSES}
    result["sources"] = [{"id": s, "name": name, "status": statuses[s], "checked_at": checked_at,
                          "latency_ms": rng.randint(40, 1500) if statuses[s] != "skipped" else None}
                         for s, name in SOURCES if s in statuses]
    result["evidence"] = [{"path": path, "source_ids": [s for s in ids if s in statuses and s not in failed],
                           **_estimate(kind, target, path)} for path, ids in evidence]
    result["risk"]["reasons"] = _reasons(result)


# E8: the engine's estimate per kind of item, drawn from these ranges (weak profiles mostly under
# 0.5, breaches at 0.95 or more), and what ties each kind of item to each kind of target.
_ESTIMATES = {"profiles.verified": (0.72, 0.99), "profiles.weak": (0.12, 0.58), "contacts.emails": (0.55, 0.92),
              "contacts.phones": (0.55, 0.92), "breaches": (0.95, 0.99)}
_MATCHED_ON = {"profiles.verified": {"email": ["email", "name"], "phone": ["phone", "name"],
                                     "username": ["username", "photo"]},
               "profiles.weak": {"email": ["name"], "phone": ["name"], "username": ["username"]},
               "contacts.emails": {"email": ["email"], "phone": ["phone", "other"], "username": ["username"]},
               "contacts.phones": {"email": ["email", "other"], "phone": ["phone"], "username": ["other"]},
               "breaches": {"email": ["email"], "phone": ["phone"], "username": ["username"]}}


def _estimate(kind: str, target: str, path: str) -> dict:
    """E8's ``confidence`` and ``matched_on`` of the item at ``path``: the same for the same
    target and item every time (a generator seeded with both)."""
    name = path.partition("[")[0]
    low, high = _ESTIMATES[name]
    rng = random.Random(target_digest(kind, target) + b"confidence:" + path.encode())
    return {"confidence": round(rng.uniform(low, high), 2), "matched_on": list(_MATCHED_ON[name][kind])}


def _fail_some(statuses: dict[str, str], rng: random.Random) -> None:
    """Two or three sources rate-limited or timed out, among those that found nothing (every
    item keeps the sources behind it), asking more of the catalogue when too few were asked."""
    candidates = sorted(s for s, status in statuses.items() if status == "not_found")
    candidates += [s for s in SOURCE_IDS if s not in statuses]  # at least six: items cite at most 14
    for source_id in candidates[:rng.randint(2, 3)]:
        statuses[source_id] = rng.choice(FAILED_STATUSES)


def _evidence(result: dict, kind: str) -> list[tuple[str, list[str]]]:
    """The sources behind each item, by its path."""
    pairs = []
    for group in ("verified", "weak"):
        for index, profile in enumerate(result["profiles"][group]):
            pairs.append((f"profiles.{group}[{index}]", [profile["platform"]]))
    for index, _ in enumerate(result["contacts"]["emails"]):
        pairs.append((f"contacts.emails[{index}]", [GRAVATAR] if kind == "username" else [MAILBOX, GRAVATAR]))
    # The carrier lookup backs the number only when it named the carrier: a profile without one
    # beside a carrier source that "found" it would contradict itself.
    carrier_known = bool((result.get("phone_profile") or {}).get("carrier"))
    for index, _ in enumerate(result["contacts"]["phones"]):
        backed = [CARRIER] if kind == "phone" and index == 0 and carrier_known else [CALLER_ID]
        pairs.append((f"contacts.phones[{index}]", backed))
    for index, _ in enumerate(result["breaches"]):
        pairs.append((f"breaches[{index}]", [BREACH_INDEX] if index % 2 == 0 else [BREACH_INDEX, PASTE_MONITOR]))
    return pairs


def _reasons(result: dict) -> list[dict]:
    """The score as its parts, which add up to it: the weights of ``_risk_score`` for each
    item behind it, the rest as other signals; trimmed from the end where the score was capped."""
    breaches, verified = result["breaches"], result["profiles"]["verified"]
    phones = result["contacts"]["phones"]
    parts = [
        ("breaches", 12 * len(breaches), f"Appears in {len(breaches)} known breach(es).",
         [f"breaches[{i}]" for i in range(len(breaches))]),
        ("verified_profiles", 6 * len(verified), f"Linked to {len(verified)} verified online profile(s).",
         [f"profiles.verified[{i}]" for i in range(len(verified))]),
        ("phone_numbers", 3 * len(phones), f"{len(phones)} phone number(s) found.",
         [f"contacts.phones[{i}]" for i in range(len(phones))]),
    ]
    score = result["risk"]["score"]
    parts.append(("other_signals", score - sum(p[1] for p in parts), "Other signals seen by the engine.", []))
    reasons, left = [], score
    for code, points, description, paths in parts:
        points = min(points, left)
        left -= max(0, points)
        if points > 0:
            reasons.append({"code": code, "points": points, "description": description, "paths": paths})
    return reasons


def _roughen(result: dict, mess: str) -> None:
    """Introduce one flaw the service's normaliser must repair (E2)."""
    if mess == FULL_DATE and result["breaches"]:
        result["breaches"][0]["date"] += "-15"
    elif mess == NO_BAND:
        del result["risk"]["band"]
    elif mess == HIGH_SCORE:  # the reasons no longer add up to it either: the service drops them
        result["risk"] = {**result["risk"], "score": result["risk"]["score"] + 100, "band": "critical"}
        # The summary states the score the service keeps (clamped to 100), so that the two agree.
        result["ai_summary"] = _OVERALL.sub(f"Overall risk is {band_for(100)} (100/100).", result["ai_summary"])
    else:
        # EXTRA_FIELD, and FULL_DATE when there is no breach to hold the date.
        result["engine_build"] = {"version": "sim-1", "node": "sim-a"}
