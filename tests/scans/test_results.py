"""normalize_result: the engine's untrusted result made into the §2.2 / D6 object (E2)."""
import json
import math
import re

import pytest

from app.scans.results import InvalidResult, band_for, failed_source_ids, finding_id, normalize_result

D6_FIELDS = ("risk", "counts", "profiles", "contacts", "breaches", "phone_profile", "ai_summary", "artifacts")
E6_FIELDS = ("sources", "coverage", "partial", "findings", "match")  # match: D29
TOP_LEVEL = {*D6_FIELDS, *E6_FIELDS}
NO_EXPLANATION = {"sources": [], "coverage": {"checked": 0, "found": 0, "failed": 0, "ratio": 1.0},
                  "partial": False}
PHONE_PROFILE_KEYS = {"e164", "country_code", "region", "carrier", "line_type", "valid", "timezones"}

EMPTY = {
    "risk": {"score": 0, "band": "low", "reasons": []},
    "counts": {"cases": 0, "entities": 0, "findings": 0},
    "profiles": {"verified": [], "weak": []},
    "contacts": {"emails": [], "phones": []},
    "breaches": [],
    "phone_profile": None,
    "ai_summary": "",
    "artifacts": {"pdf": "", "person_card": ""},
    **NO_EXPLANATION,
    "findings": [],
    "match": True,
}


def d6(result: dict) -> dict:
    """The fields of D6 only, ``risk`` without its reasons: what an engine without E6 sends."""
    out = {name: result[name] for name in D6_FIELDS}
    out["risk"] = {k: v for k, v in result["risk"].items() if k != "reasons"}
    return out


def full_result(**overrides):
    result = {
        "risk": {"score": 62, "band": "high"},
        "counts": {"cases": 2, "entities": 7, "findings": 11},
        "profiles": {
            "verified": [{"platform": "github", "url": "https://github.com/jane", "handle": "jane",
                          "display_name": "Jane Doe", "confidence": 0.93}],
            "weak": [{"platform": "x", "url": "https://x.com/jane_", "handle": "jane_",
                      "display_name": "", "confidence": 0.31}],
        },
        "contacts": {"emails": ["jane@example.com"], "phones": ["+447700900123"]},
        "breaches": [{"name": "ShopHub", "date": "2019-03", "accounts": 12400000,
                      "classes": ["email_addresses", "passwords"]}],
        "phone_profile": {"e164": "+447700900123", "country_code": 44, "region": "GB", "carrier": "",
                          "line_type": "mobile", "valid": False, "timezones": ["Europe/London"]},
        "ai_summary": "The e-mail address appears in 1 known breach.",
        "artifacts": {"pdf": "https://engine.example/a/1.pdf", "person_card": "https://engine.example/a/1.card.json"},
    }
    result.update(overrides)
    return result


def test_a_clean_result_comes_through_unchanged_for_a_phone():
    raw = full_result()
    assert d6(normalize_result(raw, "phone")) == raw


@pytest.mark.parametrize("kind", ["email", "username"])
def test_a_clean_result_loses_only_its_phone_profile_for_other_kinds(kind):
    out = d6(normalize_result(full_result(), kind))
    assert out["phone_profile"] is None
    assert {k: v for k, v in out.items() if k != "phone_profile"} == \
        {k: v for k, v in full_result().items() if k != "phone_profile"}


@pytest.mark.parametrize("kind", ["email", "phone", "username"])
def test_an_empty_object_is_filled_with_every_field(kind):
    assert normalize_result({}, kind) == EMPTY


def test_missing_nested_fields_are_filled():
    out = normalize_result({"risk": {}, "counts": {"cases": 3}, "profiles": {"verified": [{}]},
                            "contacts": {}, "breaches": [{}], "artifacts": {}}, "email")
    assert out["risk"] == {"score": 0, "band": "low", "reasons": []}
    assert out["counts"] == {"cases": 3, "entities": 0, "findings": 0}
    assert out["profiles"] == {"verified": [{"platform": "", "url": "", "handle": "", "display_name": "",
                                             "confidence": 0.0}], "weak": []}
    assert out["contacts"] == {"emails": [], "phones": []}
    assert out["breaches"] == [{"name": "", "date": "", "accounts": 0, "classes": []}]
    assert out["artifacts"] == {"pdf": "", "person_card": ""}


def test_null_values_are_filled_like_missing_ones():
    raw = dict.fromkeys(TOP_LEVEL)
    assert normalize_result(raw, "email") == EMPTY


@pytest.mark.parametrize("score, expected", [(150, 100), (100, 100), (101, 100), (-5, 0), (0, 0), (49.6, 50),
                                             (12.2, 12), (1e9, 100), (-1e9, 0)])
def test_score_is_clamped_to_0_100_and_made_an_integer(score, expected):
    out = normalize_result({"risk": {"score": score}}, "email")["risk"]
    assert out["score"] == expected
    assert out["reasons"] == []
    assert type(out["score"]) is int
    assert out["band"] == band_for(expected)


@pytest.mark.parametrize("score, band", [(0, "low"), (24, "low"), (25, "medium"), (49, "medium"), (50, "high"),
                                         (74, "high"), (75, "critical"), (100, "critical")])
def test_band_is_derived_from_the_score_when_absent_at_every_boundary(score, band):
    assert normalize_result({"risk": {"score": score}}, "email")["risk"] == {"score": score, "band": band,
                                                                             "reasons": []}


@pytest.mark.parametrize("band", ["severe", "", None, 3, "LOW", ["low"]])
def test_an_unknown_band_is_replaced_by_the_one_of_the_score(band):
    assert normalize_result({"risk": {"score": 80, "band": band}}, "email")["risk"] == \
        {"score": 80, "band": "critical", "reasons": []}


@pytest.mark.parametrize("score, band, expected", [(10, "critical", "low"), (90, "low", "critical"),
                                                   (250, "medium", "critical"), (-3, "high", "low")])
def test_a_band_that_contradicts_the_score_follows_the_score(score, band, expected):
    """D6 defines each band as a score range: a completed result never holds both a score and another band."""
    risk = normalize_result({"risk": {"score": score, "band": band}}, "email")["risk"]
    assert risk["band"] == expected == band_for(risk["score"])


@pytest.mark.parametrize("score", ["high", "50", True, False, math.nan, math.inf, -math.inf, [50], {"v": 5}])
def test_a_score_that_is_not_a_number_is_rejected(score):
    with pytest.raises(InvalidResult):
        normalize_result({"risk": {"score": score, "band": "low"}}, "email")


@pytest.mark.parametrize("raw", [None, [], [{"risk": {}}], "not an object", 42, 3.5, True, b"{}"])
def test_a_result_that_is_not_an_object_is_rejected(raw):
    with pytest.raises(InvalidResult):
        normalize_result(raw, "email")


@pytest.mark.parametrize("raw", [
    {"risk": "high"},
    {"counts": [1, 2, 3]},
    {"profiles": "github"},
    {"profiles": {"verified": "github"}},
    {"contacts": ["a@b.c"]},
    {"contacts": {"emails": "a@b.c"}},
    {"breaches": {"name": "ShopHub"}},
    {"breaches": ["ShopHub"]},
    {"breaches": [{"name": "ShopHub", "classes": "passwords"}]},
    {"artifacts": "https://x/y.pdf"},
])
def test_a_structure_of_the_wrong_type_cannot_be_made_valid(raw):
    with pytest.raises(InvalidResult):
        normalize_result(raw, "email")


@pytest.mark.parametrize("date, expected", [
    ("2019-03", "2019-03"),
    ("2019-03-15", "2019-03"),
    ("2019-3-5", "2019-03"),
    ("2019-3", "2019-03"),
    ("2019-12-31T23:59:59Z", "2019-12"),
    (" 2019-03-15 ", "2019-03"),
    ("2019-13", ""),
    ("2019-00-10", ""),
    ("March 2019", ""),
    ("2019", ""),
    ("19-03", ""),
    ("", ""),
    (None, ""),
    (201903, ""),
    ({"y": 2019}, ""),
])
def test_breach_dates_are_normalised_to_year_month_or_emptied(date, expected):
    out = normalize_result({"breaches": [{"name": "ShopHub", "date": date}]}, "email")
    assert out["breaches"][0]["date"] == expected


def test_breach_fields_are_typed():
    out = normalize_result({"breaches": [{"name": 7, "date": "2020-01", "accounts": "1200", "classes": [
        "passwords", "", None, 5, {"x": 1}]}]}, "email")
    assert out["breaches"] == [{"name": "7", "date": "2020-01", "accounts": 1200, "classes": ["passwords", "5"]}]
    out = normalize_result({"breaches": [{"accounts": -40}, {"accounts": "many"}, {"accounts": True}]}, "email")
    assert [b["accounts"] for b in out["breaches"]] == [0, 0, 0]


def test_unknown_fields_are_dropped_at_every_level():
    raw = full_result(engine_build={"version": "sim-1"}, debug=True)
    raw["risk"]["model"] = "v2"
    raw["counts"]["secrets"] = 4
    raw["profiles"]["rumoured"] = []
    raw["profiles"]["verified"][0]["internal_id"] = 99
    raw["contacts"]["faxes"] = ["+1 555"]
    raw["breaches"][0]["source"] = "forum dump"
    raw["phone_profile"]["raw_lookup"] = {"x": 1}
    raw["artifacts"]["debug_log"] = "https://engine.example/log"
    assert normalize_result(raw, "phone") == normalize_result(full_result(), "phone")


def test_counts_are_non_negative_integers():
    out = normalize_result({"counts": {"cases": -1, "entities": 3.9, "findings": "12"}}, "email")
    assert out["counts"] == {"cases": 0, "entities": 3, "findings": 12}
    assert all(type(v) is int for v in out["counts"].values())


def test_profile_items_are_shaped_and_confidence_is_clamped():
    out = normalize_result({"profiles": {"verified": [
        {"platform": "github", "url": "https://github.com/j", "handle": "j", "display_name": None,
         "confidence": 1.7, "extra": 1},
        {"platform": "x", "confidence": -0.2},
        {"platform": "reddit", "confidence": "high"},
    ]}}, "email")
    verified = out["profiles"]["verified"]
    assert [p["confidence"] for p in verified] == [1.0, 0.0, 0.0]
    assert all(set(p) == {"platform", "url", "handle", "display_name", "confidence"} for p in verified)
    assert verified[0]["display_name"] == ""


def test_contact_phones_keep_only_e164_and_are_normalised():
    out = normalize_result({"contacts": {"phones": [
        "+447700900123", "+44 7700 900124", "+1 (415) 555-0101", "07700900125", "+0123456789", "+12345",
        "+1234567890123456", "not a phone", None, 447700900126, "+44770090012x"]}}, "email")
    assert out["contacts"]["phones"] == ["+447700900123", "+447700900124", "+14155550101"]


def test_contact_emails_keep_only_strings_with_an_at_sign():
    out = normalize_result({"contacts": {"emails": ["a@example.com", "nobody", 5, None, {"e": "b@x"},
                                                    "b@example.org"]}}, "email")
    assert out["contacts"]["emails"] == ["a@example.com", "b@example.org"]


@pytest.mark.parametrize("kind", ["email", "username"])
def test_phone_profile_is_null_for_other_kinds_even_when_the_engine_sends_one(kind):
    assert normalize_result(full_result(), kind)["phone_profile"] is None


@pytest.mark.parametrize("profile", [None, {}])
def test_phone_profile_is_null_for_a_phone_without_one(profile):
    assert normalize_result({"phone_profile": profile}, "phone")["phone_profile"] is None


def test_phone_profile_fields_are_typed():
    out = normalize_result({"phone_profile": {"e164": "+14155550101", "country_code": "1", "region": "",
                                              "carrier": None, "line_type": "fixed_line_or_mobile",
                                              "valid": "yes", "timezones": ["America/Los_Angeles", "", 7],
                                              "extra": 1}}, "phone")["phone_profile"]
    assert set(out) == PHONE_PROFILE_KEYS
    assert out["country_code"] == 1 and type(out["country_code"]) is int
    assert out["region"] is None
    assert out["carrier"] == ""
    assert out["valid"] is False
    assert out["timezones"] == ["America/Los_Angeles", "7"]


def test_a_phone_profile_of_the_wrong_type_is_rejected():
    with pytest.raises(InvalidResult):
        normalize_result({"phone_profile": "GB"}, "phone")


@pytest.mark.parametrize("url, expected", [
    ("https://engine.example/a.pdf", "https://engine.example/a.pdf"),
    ("http://127.0.0.1:8700/_sim/artifacts/inv_x.pdf", "http://127.0.0.1:8700/_sim/artifacts/inv_x.pdf"),
    ("/relative/a.pdf", ""),
    ("a.pdf", ""),
    ("javascript:alert(1)", ""),
    ("https://", ""),
    (None, ""),
    (12, ""),
])
def test_artifacts_are_absolute_urls_or_empty(url, expected):
    """D6: ``artifacts.pdf`` and ``artifacts.person_card`` are absolute URLs ("" when the engine has none)."""
    out = normalize_result({"artifacts": {"pdf": url, "person_card": url}}, "email")
    assert out["artifacts"] == {"pdf": expected, "person_card": expected}


def test_text_fields_take_scalars_and_refuse_structures():
    assert normalize_result({"ai_summary": 12}, "email")["ai_summary"] == "12"
    assert normalize_result({"ai_summary": {"text": "x"}}, "email")["ai_summary"] == ""
    assert normalize_result({"ai_summary": "x" * 50_000}, "email")["ai_summary"] == "x" * 20_000


def test_long_lists_are_capped():
    out = normalize_result({"breaches": [{"name": str(i)} for i in range(2000)]}, "email")
    assert len(out["breaches"]) == 500


def test_the_normalised_result_round_trips_through_json():
    out = normalize_result(full_result(engine_build={"x": 1}), "phone")
    assert json.loads(json.dumps(out)) == out
    assert set(out) == TOP_LEVEL


def test_the_input_is_not_modified():
    raw = full_result(extra=1)
    raw["risk"]["score"] = 500
    snapshot = json.loads(json.dumps(raw))
    normalize_result(raw, "phone")
    assert raw == snapshot


# --- E6: sources, evidence, reasons, findings (D23) ----------------------------------------

def explained(**overrides):
    """A full result with the E6 parts: three sources (one timed out), evidence and reasons."""
    result = full_result(
        sources=[{"id": "github", "name": "GitHub", "status": "found", "checked_at": "2026-11-21T12:00:03Z",
                  "latency_ms": 120},
                 {"id": "breach_index", "name": "Breach Index", "status": "found",
                  "checked_at": "2026-11-21T13:00:03+01:00", "latency_ms": 300},
                 {"id": "caller_id", "name": "Caller ID", "status": "timeout", "checked_at": None,
                  "latency_ms": 5000},
                 {"id": "carrier", "name": "Carrier", "status": "skipped"}],
        evidence=[{"path": "profiles.verified[0]", "source_ids": ["github"]},
                  {"path": "breaches[0]", "source_ids": ["breach_index", "nobody"]}],
        **overrides)
    result["risk"]["reasons"] = [
        {"code": "breaches", "points": 40, "description": "Appears in a breach.", "paths": ["breaches[0]"]},
        {"code": "profiles", "points": 22, "description": "A verified profile.", "paths": ["profiles.verified[0]"]}]
    return result


def test_an_engine_without_sources_reads_as_nothing_checked_and_not_partial():
    out = normalize_result(full_result(), "phone", scan_id="scn_1")
    assert {k: out[k] for k in NO_EXPLANATION} == NO_EXPLANATION
    assert out["risk"]["reasons"] == []
    assert [f["path"] for f in out["findings"]] == ["profiles.verified[0]", "profiles.weak[0]", "contacts.emails[0]",
                                                    "contacts.phones[0]", "breaches[0]"]
    assert all(f["source_ids"] == [] and f["feedback"] is None for f in out["findings"])
    assert list(out) == [*D6_FIELDS, *E6_FIELDS]


def test_sources_give_coverage_and_partial():
    out = normalize_result(explained(), "phone", scan_id="scn_1")
    assert [s["status"] for s in out["sources"]] == ["found", "found", "timeout", "skipped"]
    assert out["sources"][1]["checked_at"] == "2026-11-21T12:00:03Z"  # made UTC
    assert out["sources"][3] == {"id": "carrier", "name": "Carrier", "status": "skipped", "checked_at": None,
                                 "latency_ms": None}
    assert out["coverage"] == {"checked": 3, "found": 2, "failed": 1, "ratio": 0.6667}
    assert out["partial"] is True
    assert failed_source_ids(out) == ["caller_id"]


def test_a_result_whose_sources_all_answered_is_not_partial():
    raw = explained()
    raw["sources"][2]["status"] = "not_found"
    out = normalize_result(raw, "phone")
    assert out["partial"] is False and out["coverage"]["ratio"] == 1.0 and failed_source_ids(out) == []


def test_sources_are_shaped_once_each_and_an_unknown_status_counts_as_failed():
    out = normalize_result({"sources": [{"id": "a", "status": "found"}, {"id": "a", "status": "timeout"},
                                        {"name": "no id", "status": "found"}, "github", {"id": "b", "status": "odd",
                                        "latency_ms": -4, "checked_at": "yesterday"}]}, "email")
    assert out["sources"] == [{"id": "a", "name": "a", "status": "found", "checked_at": None, "latency_ms": None},
                              {"id": "b", "name": "b", "status": "error", "checked_at": None, "latency_ms": None}]
    assert out["partial"] is True


@pytest.mark.parametrize("part", ["sources", "evidence"])
def test_e6_parts_of_the_wrong_type_are_ignored_not_fatal(part):
    out = normalize_result({part: "everything", "breaches": [{"name": "x"}]}, "email")
    assert out["sources"] == [] and out["findings"][0]["source_ids"] == []


def test_findings_carry_the_sources_of_their_evidence_known_ones_only():
    out = normalize_result(explained(), "phone", scan_id="scn_1")
    by_path = {f["path"]: f for f in out["findings"]}
    assert by_path["profiles.verified[0]"]["source_ids"] == ["github"]
    assert by_path["breaches[0]"]["source_ids"] == ["breach_index"]
    assert by_path["contacts.emails[0]"]["source_ids"] == []


def test_finding_ids_are_stable_per_scan_and_path_and_differ_between_scans():
    first = normalize_result(explained(), "phone", scan_id="scn_1")["findings"]
    again = normalize_result(explained(), "phone", scan_id="scn_1")["findings"]
    other = normalize_result(explained(), "phone", scan_id="scn_2")["findings"]
    assert [f["id"] for f in first] == [f["id"] for f in again]
    assert all(f["id"].startswith("fnd_") for f in first)
    assert len({f["id"] for f in first}) == len(first)
    assert not {f["id"] for f in first} & {f["id"] for f in other}
    assert first[0]["id"] == finding_id("scn_1", "profiles.verified[0]")


def test_reasons_that_add_up_name_their_findings_by_id():
    out = normalize_result(explained(), "phone", scan_id="scn_1")
    assert out["risk"]["reasons"] == [
        {"code": "breaches", "points": 40, "description": "Appears in a breach.",
         "finding_ids": [finding_id("scn_1", "breaches[0]")]},
        {"code": "profiles", "points": 22, "description": "A verified profile.",
         "finding_ids": [finding_id("scn_1", "profiles.verified[0]")]}]
    assert sum(r["points"] for r in out["risk"]["reasons"]) == out["risk"]["score"]


def test_evidence_and_reasons_follow_items_the_normaliser_dropped_or_moved():
    raw = full_result(contacts={"emails": ["not an address", "jane@example.com"], "phones": []},
                      evidence=[{"path": "contacts.emails[1]", "source_ids": ["gravatar"]},
                                {"path": "contacts.emails[0]", "source_ids": ["gravatar"]}],
                      sources=[{"id": "gravatar", "status": "found"}])
    raw["risk"]["reasons"] = [{"code": "email", "points": 62, "paths": ["contacts.emails[1]"]}]
    out = normalize_result(raw, "email", scan_id="scn_1")
    email = next(f for f in out["findings"] if f["path"] == "contacts.emails[0]")
    assert email["source_ids"] == ["gravatar"]
    assert out["risk"]["reasons"][0]["finding_ids"] == [email["id"]]
    raw["risk"]["reasons"] = [{"code": "email", "points": 62, "paths": ["contacts.emails[0]"]}]  # the dropped one
    assert normalize_result(raw, "email")["risk"]["reasons"] == []


@pytest.mark.parametrize("reasons", [
    [{"code": "a", "points": 40, "paths": ["breaches[0]"]}],                                  # short of the score
    [{"code": "a", "points": 62, "paths": ["breaches[3]"]}],                                  # no such item
    [{"code": "a", "points": 62, "paths": ["phone_profile"]}],                                # not an item
    [{"code": "a", "points": 62.0, "paths": []}],                                             # not whole
    [{"code": "a", "points": True, "paths": []}],
    [{"code": "", "points": 62, "paths": []}],                                                # no code
    [{"code": "a", "points": 62, "paths": "breaches[0]"}],
    ["a reason"],
    "reasons",
])
def test_reasons_that_do_not_add_up_or_name_nothing_are_dropped_and_the_result_kept(reasons, caplog):
    raw = explained()
    raw["risk"]["reasons"] = reasons
    out = normalize_result(raw, "phone", scan_id="scn_1")
    assert out["risk"] == {"score": 62, "band": "high", "reasons": []}
    assert out["partial"] is True and len(out["findings"]) == 5  # the rest of the explanation stays
    assert "reasons were dropped" in caplog.text and "scn_1" in caplog.text
    assert "jane" not in caplog.text.lower()  # nothing of the result in the log


def test_reasons_are_checked_against_the_clamped_score():
    raw = explained()
    raw["risk"]["score"] = 162  # clamped to 100: reasons adding up to 162 no longer explain it
    raw["risk"]["reasons"][0]["points"] = 140
    assert normalize_result(raw, "phone")["risk"]["reasons"] == []


def test_normalising_a_stored_result_changes_nothing_feedback_included():
    once = normalize_result(explained(), "phone", scan_id="scn_1")
    once["findings"][0]["feedback"] = {"verdict": "false_positive", "note": "not her", "at": "2026-11-21T12:00:00Z"}
    once["findings"][0]["confidence"] = 0.0  # the feedback's, as the service writes it with the feedback
    assert normalize_result(json.loads(json.dumps(once)), "phone", scan_id="scn_1", stored=True) == once


def test_an_engine_cannot_give_findings_or_feedback():
    raw = explained(findings=[{"id": "fnd_x", "path": "breaches[0]", "source_ids": ["github"],
                               "feedback": {"verdict": "confirmed", "note": "", "at": None}}])
    out = normalize_result(raw, "phone", scan_id="scn_1")
    assert all(f["feedback"] is None for f in out["findings"])
    assert next(f for f in out["findings"] if f["path"] == "breaches[0]")["source_ids"] == ["breach_index"]


# --- D26: a finding's id follows what it is --------------------------------------------------

def _item(result, path):
    """The item of a normalised result at ``path`` (``breaches[0]``, ``contacts.emails[1]``...)."""
    name, index = path[:-1].split("[")
    group, _, member = name.partition(".")
    items = result[group][member] if member else result[group]
    return items[int(index)]


def _ids_by_item(result) -> dict[str, str]:
    """Each finding's id by a plain description of its item (what it is, wherever it stands)."""
    described = {}
    for finding in result["findings"]:
        item = _item(result, finding["path"])
        if finding["path"].startswith("profiles."):
            key = f"profile {item['platform']}/{item['handle']}".lower()
        elif finding["path"].startswith("breaches"):
            key = f"breach {item['name']} {item['date']}".lower()
        else:
            key = f"contact {item}".lower()
        described[key] = finding["id"]
    return described


def reordered(raw: dict) -> dict:
    """The same items as ``raw`` in another order and spelling, a profile moved from verified to
    weak, and the evidence following its items."""
    raw = json.loads(json.dumps(raw))
    raw["profiles"] = {"verified": [], "weak": [raw["profiles"]["weak"][0], raw["profiles"]["verified"][0]]}
    raw["contacts"]["emails"] = ["NEW@example.com", raw["contacts"]["emails"][0].upper()]
    raw["breaches"] = [{"name": "GameVault", "date": "2020-01-15"}, *raw["breaches"]]
    raw["evidence"] = [{"path": "profiles.weak[1]", "source_ids": ["github"]},
                       {"path": "breaches[1]", "source_ids": ["breach_index"]}]
    raw["risk"]["reasons"] = [{"code": "breaches", "points": 62, "paths": ["breaches[1]", "profiles.weak[1]"]}]
    return raw


def test_an_items_finding_id_follows_what_it_is_not_where_it_stands(app):
    from app.scans.results import Owner
    first = normalize_result(explained(), "phone", scan_id="scn_1", owner=Owner("cus_a", "phone", "+447700900123"))
    later = normalize_result(reordered(explained()), "phone", scan_id="scn_2",
                             owner=Owner("cus_a", "phone", "+44 7700-900123"))  # another spelling of the target
    before, after = _ids_by_item(first), _ids_by_item(later)
    assert set(before) - set(after) == set() and len(after) == len(before) + 2  # two new items
    assert {item: after[item] for item in before} == before  # every kept item kept its id
    assert all(re.fullmatch(r"fnd_[A-Za-z0-9_-]{20}", fid) for fid in after.values())
    # The sources and the reasons follow the items too.
    moved = next(f for f in later["findings"] if f["id"] == before["profile github/jane"])
    assert moved["path"] == "profiles.weak[1]" and moved["source_ids"] == ["github"]
    assert later["risk"]["reasons"][0]["finding_ids"] == [before["breach shophub 2019-03"],
                                                          before["profile github/jane"]]


def test_finding_ids_differ_between_customers_and_targets_and_within_a_result(app):
    from app.scans.results import Owner
    raw = explained()
    raw["breaches"] = raw["breaches"] * 2  # an engine that repeats an item: two findings all the same
    ids = {owner: [f["id"] for f in normalize_result(raw, "phone", owner=Owner(*owner))["findings"]]
           for owner in [("cus_a", "phone", "+447700900123"), ("cus_b", "phone", "+447700900123"),
                         ("cus_a", "phone", "+447700900124")]}
    for fids in ids.values():
        assert len(set(fids)) == len(fids)
    all_ids = [fid for fids in ids.values() for fid in fids]
    assert len(set(all_ids)) == len(all_ids)
    assert ids[("cus_a", "phone", "+447700900123")] == [  # and the same again
        f["id"] for f in normalize_result(raw, "phone", owner=Owner("cus_a", "phone", "+447700900123"))["findings"]]


def test_a_reruns_result_is_merged_into_its_originals(app):
    from app.scans.results import Owner, merge_rerun
    owner = Owner("cus_a", "phone", "+447700900123")
    original = normalize_result(explained(), "phone", scan_id="scn_1", owner=owner)
    original["findings"][4]["feedback"] = {"verdict": "confirmed", "note": "", "at": "2026-11-21T12:00:00Z",
                                           "scan_id": "scn_1"}
    # The re-run asks the source that timed out: it answers, finds the breach again (listed first
    # now) and one new one, and scores higher.
    raw = full_result(breaches=[{"name": "GameVault", "date": "2020-01"}, {"name": "ShopHub", "date": "2019-03"}],
                      profiles={"verified": [], "weak": []}, contacts={"emails": [], "phones": []},
                      ai_summary="", risk={"score": 70},
                      sources=[{"id": "caller_id", "name": "Caller ID", "status": "found"}],
                      evidence=[{"path": "breaches[0]", "source_ids": ["caller_id"]},
                                {"path": "breaches[1]", "source_ids": ["caller_id"]}])
    raw["risk"]["reasons"] = [{"code": "breaches", "points": 70, "paths": ["breaches[0]", "breaches[1]"]}]
    merged = merge_rerun(original, normalize_result(raw, "phone", scan_id="scn_2", owner=owner), "scn_1")
    assert [s["id"] for s in merged["sources"]] == ["github", "breach_index", "caller_id", "carrier"]
    assert [s["status"] for s in merged["sources"]] == ["found", "found", "found", "skipped"]
    assert merged["coverage"] == {"checked": 3, "found": 3, "failed": 0, "ratio": 1.0} and merged["partial"] is False
    assert merged["breaches"] == [*original["breaches"], {"name": "GameVault", "date": "2020-01", "accounts": 0,
                                                          "classes": []}]
    for name in ("profiles", "contacts", "phone_profile", "ai_summary", "artifacts"):
        assert merged[name] == original[name]
    kept = {f["id"]: f for f in merged["findings"]}
    assert [f["id"] for f in merged["findings"][:5]] == [f["id"] for f in original["findings"]]
    shophub = kept[original["findings"][4]["id"]]
    assert shophub["source_ids"] == ["breach_index", "caller_id"] and shophub["feedback"]["verdict"] == "confirmed"
    gamevault = merged["findings"][5]
    assert gamevault["path"] == "breaches[1]" and gamevault["source_ids"] == ["caller_id"]
    assert merged["risk"]["score"] == 70 and merged["risk"]["band"] == "high"
    assert merged["risk"]["reasons"][0]["finding_ids"] == [gamevault["id"], shophub["id"]]
