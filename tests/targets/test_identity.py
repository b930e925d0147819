"""Target validation and kind inference (D4) and the order of its errors (D2)."""
import unicodedata

import pytest

from app.plumbing import crypto
from app.targets import identity as targets
from app.targets.identity import TargetError, normalize


@pytest.mark.parametrize("target,kind,expected", [
    ("  Jane.Doe@Example.COM ", None, ("email", "Jane.Doe@example.com")),
    ("+44 (7700) 900-123", None, ("phone", "+447700900123")),
    ("+1 415 555 2671", "phone", ("phone", "+14155552671")),
    ("@jane_doe", "username", ("username", "jane_doe")),
    ("jane.doe-99", "username", ("username", "jane.doe-99")),
    ("12345678", None, ("username", "12345678")),
    ("@alice_smith", None, ("username", "alice_smith")),       # a leading "@" marks a handle
    ("jane@example.com", None, ("email", "jane@example.com")),  # any other "@": an e-mail address
    ("a" * 64 + "@example.com", None, ("email", "a" * 64 + "@example.com")),
])
def test_valid_targets_are_normalised(target, kind, expected):
    assert normalize(target, kind) == expected


@pytest.mark.parametrize("target,kind,code", [
    ("ab", None, "target_too_short"),
    ("  ab  ", None, "target_too_short"),          # trimmed first
    ("ab", "fax", "target_too_short"),             # too short wins over invalid kind
    ("abcd", "fax", "invalid_kind"),
    ("abcd", "EMAIL", "invalid_kind"),
    ("not-an-email", "email", "invalid_target"),   # kind given, format checked for it
    ("jane@", None, "invalid_target"),
    ("+0123456789", None, "invalid_target"),       # E.164 has no leading zero
    ("+12345", "phone", "invalid_target"),         # too few digits
    ("+1234567890123456", "phone", "invalid_target"),
    ("@ab", "username", "invalid_target"),         # 3 characters, but a 2-character handle
    ("@jane@example.com", None, "invalid_target"),  # a handle (leading "@") cannot hold another "@"
    ("a" * 65 + "@example.com", None, "invalid_target"),  # local part longer than 64 characters
    ("a" * 65 + "@example.com", "email", "invalid_target"),
    ("bad handle!", None, "invalid_target"),
    ("a" * 65, "username", "invalid_target"),
    ("a" * 257, None, "invalid_target"),           # longer than 256
])
def test_invalid_targets_give_the_first_failing_code(target, kind, code):
    with pytest.raises(TargetError) as exc:
        normalize(target, kind)
    assert exc.value.code == code


def test_length_counts_characters_not_bytes():
    with pytest.raises(TargetError) as exc:
        normalize("äö", None)
    assert exc.value.code == "target_too_short"
    with pytest.raises(TargetError) as exc:
        normalize("äöü", None)
    assert exc.value.code == "invalid_target"  # 3 characters: long enough, but not a handle


def test_the_canonical_hash_is_one_per_identifier(conn):
    assert targets.canonical_hash("email", "Jane.Doe@Example.com") == crypto.target_hash("email", "jane.doe@example.com")
    assert targets.canonical_hash("username", "@SuppHandle") == targets.canonical_hash("username", "supphandle")
    assert targets.canonical_hash("phone", "+1 (415) 555-0199") == crypto.target_hash("phone", "+14155550199")
    assert targets.canonical_hash("email", "jane+x@example.com") != targets.canonical_hash("email", "jane@example.com")


def test_the_suppression_check_hashes_are_the_opt_out_key_and_the_old_form(conn):
    assert targets.suppression_hashes("email", "Jane.Doe+news@gmail.com") == {
        crypto.target_hash("email", "janedoe@gmail.com"),          # what an opt-out is stored under now
        crypto.target_hash("email", "Jane.Doe+news@gmail.com")}    # what it was stored under before
    assert targets.suppression_hashes("username", "14155550199") == {
        crypto.target_hash("phone", "+14155550199"), crypto.target_hash("username", "14155550199")}
    assert targets.suppression_hashes("phone", "+14155550199") == {
        crypto.target_hash("phone", "+14155550199"),
        crypto.target_hash("phone", "+114155550199")}  # "+1 (1) 415...": the earlier rule kept the trunk prefix


NFD_JOSE = unicodedata.normalize("NFD", "José.García@example.com")


def test_the_canonical_form_is_nfc_with_an_ascii_domain_and_no_trunk_prefix():
    assert NFD_JOSE != "José.García@example.com"
    assert targets.canonical("email", NFD_JOSE) == targets.canonical("email", "josé.garcía@example.com") \
        == "josé.garcía@example.com"
    assert targets.canonical("email", "Pat@BÜCHER.example") == targets.canonical("email", "pat@xn--bcher-kva.example") \
        == "pat@xn--bcher-kva.example"
    assert targets.canonical("phone", "+44 (0)20 7946 0958") == targets.canonical("phone", "+44 20 7946 0958") \
        == "+442079460958"
    assert targets.canonical("phone", "+39 06 1234 5678") == "+390612345678"  # Italy's leading 0 is the number's
    assert targets.opt_out_key("username", "4402079460958") == ("phone", "+442079460958")


def test_the_checks_find_what_the_earlier_rule_kept(conn):
    """Opt-outs and activity entries hashed before NFC, IDNA and trunk prefixes: only their keyed
    hashes exist, so the checks look for the forms the earlier rule gave each spelling."""
    earlier = {crypto.target_hash("email", NFD_JOSE.casefold()), crypto.target_hash("email", "pat@bücher.example"),
               crypto.target_hash("phone", "+4402079460958")}
    found = (targets.suppression_hashes("email", "josé.garcía@example.com")
             | targets.suppression_hashes("email", "pat@xn--bcher-kva.example")
             | targets.suppression_hashes("phone", "+442079460958"))
    assert earlier <= found
    assert crypto.target_hash("email", "pat@bücher.example") in targets.canonical_hashes("email", "pat@xn--bcher-kva.example")
    assert crypto.target_hash("phone", "+4402079460958") in targets.canonical_hashes("phone", "+44 20 7946 0958")


def test_the_e164_fast_path_agrees_with_phonenumbers():
    """A number no trunk prefix of its country starts skips phonenumbers.parse (some 100 us): the
    result is the same as parsing it, for numbers of every country code written with and without one."""
    import phonenumbers
    for code in sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE):
        for national in ("2079460958", "02079460958", "12025550123", "8495123456", "0612345678", "9115123456"):
            number = f"+{code}{national}"[:16]
            try:
                expected = phonenumbers.format_number(phonenumbers.parse(number), phonenumbers.PhoneNumberFormat.E164)
            except phonenumbers.NumberParseException:
                expected = number
            assert targets.canonical("phone", number) == expected, number
