"""Simulated results: shape of §2.2/D6, determinism, variety, phone profiles, deliberate mess."""
import re

import pytest

from simulator.results import (
    EXTRA_FIELD,
    FULL_DATE,
    HIGH_SCORE,
    NO_BAND,
    band_for,
    messiness_of,
    phone_profile,
    result_for,
)

BASE = "http://sim.test/_sim/artifacts/inv_x"
TOP_LEVEL = {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile", "ai_summary", "artifacts",
             "sources", "evidence"}
PROFILE_KEYS = {"platform", "url", "handle", "display_name", "confidence"}
BREACH_KEYS = {"name", "date", "accounts", "classes"}
E164 = re.compile(r"^\+[1-9]\d{6,14}$")


def targets(kind, count):
    make = {"email": "person{}@example.com", "phone": "+4420794601{:02d}", "username": "handle_{}"}[kind]
    return [make.format(i) for i in range(count)]


def clean_targets(kind, count):
    return [t for t in targets(kind, count) if messiness_of(kind, t) is None]


def test_same_kind_and_target_give_the_same_result():
    assert result_for("email", "alice@example.com", BASE) == result_for("email", "alice@example.com", BASE)


def test_kind_is_part_of_the_seed():
    assert result_for("username", "alice", BASE) != result_for("email", "alice", BASE)


@pytest.mark.parametrize("kind", ["email", "phone", "username"])
def test_clean_results_have_exactly_the_documented_shape(kind):
    for target in clean_targets(kind, 40):
        result = result_for(kind, target, BASE)
        assert set(result) == TOP_LEVEL
        assert set(result["risk"]) == {"score", "band", "reasons"}
        assert 0 <= result["risk"]["score"] <= 100
        assert result["risk"]["band"] == band_for(result["risk"]["score"])
        assert set(result["counts"]) == {"cases", "entities", "findings"}
        assert all(isinstance(v, int) and v >= 0 for v in result["counts"].values())
        assert set(result["profiles"]) == {"verified", "weak"}
        for profile in result["profiles"]["verified"] + result["profiles"]["weak"]:
            assert set(profile) == PROFILE_KEYS
            assert profile["url"].startswith("https://") and profile["handle"] in profile["url"]
            assert 0 <= profile["confidence"] <= 1
        assert all(p["confidence"] >= 0.8 for p in result["profiles"]["verified"])
        assert set(result["contacts"]) == {"emails", "phones"}
        assert all("@" in e for e in result["contacts"]["emails"])
        assert all(E164.match(p) for p in result["contacts"]["phones"])
        for breach in result["breaches"]:
            assert set(breach) == BREACH_KEYS
            assert re.fullmatch(r"\d{4}-\d{2}", breach["date"])
            assert breach["accounts"] > 0 and breach["classes"]
        assert (result["phone_profile"] is None) == (kind != "phone")
        assert isinstance(result["ai_summary"], str) and target in result["ai_summary"]
        assert result["artifacts"] == {"pdf": BASE + ".pdf", "person_card": BASE + ".card.json"}


def test_results_vary_over_fifty_targets():
    results = [result_for("email", t, BASE) for t in targets("email", 50)]
    breach_counts = [len(r["breaches"]) for r in results]
    assert breach_counts.count(0) >= 5
    assert sum(1 for n in breach_counts if n >= 2) >= 5
    assert len({r["risk"]["score"] for r in results}) >= 15
    assert len({r["risk"].get("band") for r in results} - {None}) >= 3
    assert len({len(r["profiles"]["verified"]) for r in results}) >= 3


def test_email_target_is_among_its_contacts_and_phone_target_among_its_phones():
    assert result_for("email", "alice@example.com", BASE)["contacts"]["emails"][0] == "alice@example.com"
    assert result_for("phone", "+14155552671", BASE)["contacts"]["phones"][0] == "+14155552671"


def test_username_handle_is_used_for_verified_profiles():
    for target in clean_targets("username", 40):
        verified = result_for("username", target, BASE)["profiles"]["verified"]
        assert all(p["handle"] == target for p in verified)


def test_uk_fictional_mobile_phone_profile():
    assert phone_profile("+447700900123") == {
        "e164": "+447700900123",
        "country_code": 44,
        "region": "GB",
        "carrier": None,
        "line_type": "unknown",
        "valid": False,
        "timezones": ["Europe/London"],
    }


def test_us_phone_profile():
    assert phone_profile("+14155552671") == {
        "e164": "+14155552671",
        "country_code": 1,
        "region": "US",
        "carrier": None,
        "line_type": "fixed_line_or_mobile",
        "valid": True,
        "timezones": ["America/Los_Angeles"],
    }


def test_french_mobile_has_a_carrier():
    profile = phone_profile("+33612345678")
    assert (profile["region"], profile["carrier"], profile["line_type"], profile["valid"]) == ("FR", "SFR", "mobile", True)
    assert profile["timezones"] == ["Europe/Paris"]


def test_phone_profile_normalises_formatting_to_e164():
    assert phone_profile("+44 20 7946 0018")["e164"] == "+442079460018"


def test_unparseable_phone_has_no_profile():
    assert phone_profile("not a number") is None
    assert result_for("phone", "not a number", BASE)["phone_profile"] is None


def test_bands_follow_d6():
    assert [band_for(s) for s in (0, 24, 25, 49, 50, 74, 75, 100)] == \
        ["low", "low", "medium", "medium", "high", "high", "critical", "critical"]


def test_a_minority_of_results_is_messy_in_every_way():
    all_targets = targets("email", 400)
    messes = [messiness_of("email", t) for t in all_targets]
    messy = [m for m in messes if m]
    assert 0.1 < len(messy) / len(messes) < 0.3
    assert set(messy) == {FULL_DATE, EXTRA_FIELD, NO_BAND, HIGH_SCORE}


def test_each_kind_of_mess_is_repairable():
    seen = set()
    for target in targets("email", 400):
        mess = messiness_of("email", target)
        if mess is None:
            continue
        result = result_for("email", target, BASE)
        if mess == FULL_DATE and result["breaches"]:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", result["breaches"][0]["date"])
        elif mess == NO_BAND:
            assert "band" not in result["risk"] and 0 <= result["risk"]["score"] <= 100
        elif mess == HIGH_SCORE:
            assert result["risk"]["band"] == "critical"
            assert result["risk"]["score"] > 100
        else:
            assert set(result) == TOP_LEVEL | {"engine_build"}
        seen.add(mess)
    assert seen == {FULL_DATE, EXTRA_FIELD, NO_BAND, HIGH_SCORE}


# --- E6: sources, evidence and reasons that add up ------------------------------------------

ORDER = ("profiles.verified", "profiles.weak", "contacts.emails", "contacts.phones", "breaches")


def _order(path):
    name, _, index = path.rstrip("]").partition("[")
    return ORDER.index(name), int(index)


def _items(result):
    lists = {"profiles.verified": result["profiles"]["verified"], "profiles.weak": result["profiles"]["weak"],
             "contacts.emails": result["contacts"]["emails"], "contacts.phones": result["contacts"]["phones"],
             "breaches": result["breaches"]}
    return {f"{name}[{i}]" for name, items in lists.items() for i in range(len(items))}


@pytest.mark.parametrize("kind", ["email", "phone", "username"])
def test_sources_evidence_and_reasons_add_up(kind):
    for target in clean_targets(kind, 40):
        result = result_for(kind, target, BASE, checked_at="2026-11-21T12:00:00Z")
        sources = {s["id"]: s for s in result["sources"]}
        assert 10 <= len(sources) <= 20 and len(sources) == len(result["sources"])
        assert all(s["name"] and s["checked_at"] == "2026-11-21T12:00:00Z" for s in result["sources"])
        assert {s["status"] for s in result["sources"]} <= {"found", "not_found", "skipped"}
        # One evidence entry per item, each backed by sources that found something.
        assert [e["path"] for e in result["evidence"]] == sorted(_items(result), key=_order)
        for entry in result["evidence"]:
            assert entry["source_ids"] and all(sources[i]["status"] == "found" for i in entry["source_ids"])
        reasons = result["risk"]["reasons"]
        assert sum(r["points"] for r in reasons) == result["risk"]["score"]
        assert all(r["points"] > 0 and r["code"] and r["description"] for r in reasons)
        assert all(set(r["paths"]) <= _items(result) for r in reasons)


def test_a_high_score_mess_has_reasons_that_do_not_add_up():
    target = next(t for t in targets("email", 300) if messiness_of("email", t) == HIGH_SCORE)
    result = result_for("email", target, BASE)
    assert sum(r["points"] for r in result["risk"]["reasons"]) != result["risk"]["score"]


def test_partial_targets_have_some_sources_rate_limited_or_timed_out():
    for target, kind in (("partial.one@example.com", "email"), ("+14155557777", "phone"), ("partialjo", "username")):
        result = result_for(kind, target, BASE)
        failed = {s["id"] for s in result["sources"] if s["status"] in ("rate_limited", "timeout")}
        assert 2 <= len(failed) <= 3, target
        assert not failed & {i for e in result["evidence"] for i in e["source_ids"]}


def test_a_rerun_lists_the_sources_asked_for_none_failing():
    first = result_for("email", "partial.one@example.com", BASE)
    failed = [s["id"] for s in first["sources"] if s["status"] in ("rate_limited", "timeout")]
    rerun = result_for("email", "partial.one@example.com", BASE, sources=[*failed, "no_such_source"])
    assert [s["id"] for s in rerun["sources"]] == failed
    assert {s["status"] for s in rerun["sources"]} <= {"found", "not_found", "skipped"}
    assert rerun["breaches"] == first["breaches"]


def test_the_scenarios_page_lists_every_shipped_scenario():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "scenarios.md").read_text()
    shipped = sorted(path.stem for path in (root / "simulator" / "scenarios").glob("*.yaml"))
    assert shipped and [name for name in shipped if f"`{name}`" not in page] == []
