"""normalize_result: the engine's untrusted result made into the §2.2 / D6 object (E2)."""
import json
import math

import pytest

from app.services.results import InvalidResult, band_for, normalize_result

TOP_LEVEL = {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile", "ai_summary", "artifacts"}
PHONE_PROFILE_KEYS = {"e164", "country_code", "region", "carrier", "line_type", "valid", "timezones"}

EMPTY = {
    "risk": {"score": 0, "band": "low"},
    "counts": {"cases": 0, "entities": 0, "findings": 0},
    "profiles": {"verified": [], "weak": []},
    "contacts": {"emails": [], "phones": []},
    "breaches": [],
    "phone_profile": None,
    "ai_summary": "",
    "artifacts": {"pdf": "", "person_card": ""},
}


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
    assert normalize_result(raw, "phone") == raw


@pytest.mark.parametrize("kind", ["email", "username"])
def test_a_clean_result_loses_only_its_phone_profile_for_other_kinds(kind):
    out = normalize_result(full_result(), kind)
    assert out["phone_profile"] is None
    assert {k: v for k, v in out.items() if k != "phone_profile"} == \
        {k: v for k, v in full_result().items() if k != "phone_profile"}


@pytest.mark.parametrize("kind", ["email", "phone", "username"])
def test_an_empty_object_is_filled_with_every_field(kind):
    assert normalize_result({}, kind) == EMPTY


def test_missing_nested_fields_are_filled():
    out = normalize_result({"risk": {}, "counts": {"cases": 3}, "profiles": {"verified": [{}]},
                            "contacts": {}, "breaches": [{}], "artifacts": {}}, "email")
    assert out["risk"] == {"score": 0, "band": "low"}
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
    assert type(out["score"]) is int
    assert out["band"] == band_for(expected)


@pytest.mark.parametrize("score, band", [(0, "low"), (24, "low"), (25, "medium"), (49, "medium"), (50, "high"),
                                         (74, "high"), (75, "critical"), (100, "critical")])
def test_band_is_derived_from_the_score_when_absent_at_every_boundary(score, band):
    assert normalize_result({"risk": {"score": score}}, "email")["risk"] == {"score": score, "band": band}


@pytest.mark.parametrize("band", ["severe", "", None, 3, "LOW", ["low"]])
def test_an_unknown_band_is_replaced_by_the_one_of_the_score(band):
    assert normalize_result({"risk": {"score": 80, "band": band}}, "email")["risk"] == \
        {"score": 80, "band": "critical"}


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
    assert normalize_result(raw, "phone") == full_result()


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
