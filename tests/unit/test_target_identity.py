"""A target's identity (D25), as pure functions: one canonical form per kind, the one form an
opt-out is kept under (every spelling of a person's identifier reduces to it), and the spellings
accepted where a target is matched rather than scanned."""
import pytest

from app.targets.identity import TargetError, canonical, identify, opt_out_key


@pytest.mark.parametrize("kind, spelling, form", [
    ("email", "  Jane.Doe@Example.COM ", "jane.doe@example.com"),     # the whole address, local part too
    ("email", "Jane.Doe+News@Gmail.com", "jane.doe+news@gmail.com"),  # canonical keeps tags and dots
    ("email", "STRASSE@example.com", "strasse@example.com"),
    ("email", "Straße@example.com", "strasse@example.com"),           # case-folded, not just lower-cased
    ("username", "@SuppHandle", "supphandle"),
    ("username", "  supphandle ", "supphandle"),
    ("username", "Jane.Doe-99", "jane.doe-99"),
    ("phone", "+1 (415) 555-0199", "+14155550199"),
    ("phone", "+1.415.555.0199", "+14155550199"),
    ("phone", "+1-415-555-0199", "+14155550199"),
    ("phone", "+14155550199", "+14155550199"),
])
def test_one_canonical_form_per_kind(kind, spelling, form):
    assert canonical(kind, spelling) == form
    assert canonical(kind, form) == form  # a canonical form is its own


@pytest.mark.parametrize("key, spellings", [
    (("email", "jane.doe@example.com"),
     [("email", "Jane.Doe@Example.com"), ("email", "jane.doe+news@example.com"), ("email", "JANE.DOE+a+b@EXAMPLE.COM")]),
    (("email", "janedoe@gmail.com"),
     [("email", "Jane.Doe@gmail.com"), ("email", "j.a.n.e.d.o.e@Gmail.com"), ("email", "janedoe+x@googlemail.com"),
      ("email", "Jane.Doe@GoogleMail.com")]),
    (("username", "supphandle"), [("username", "@supphandle"), ("username", "SuppHandle"), ("username", " @SUPPHANDLE")]),
    (("phone", "+14155550199"),
     [("phone", "+1 (415) 555-0199"), ("phone", "+1.415.555.0199"), ("username", "14155550199"),
      ("username", "+14155550199"), ("username", "1-415-555-0199"), ("username", "1.415.555.0199"),
      ("username", "0014155550199")]),  # "00": the international call prefix
    (("phone", "+12345678"), [("username", "12345678"), ("phone", "+1 234 5678")]),                 # 8 digits
    (("phone", "+123456789012345"), [("username", "123456789012345")]),                              # 15 digits
])
def test_every_spelling_of_one_identifier_has_one_opt_out_key(key, spellings):
    assert opt_out_key(*key) == key
    for kind, spelling in spellings:
        assert opt_out_key(kind, spelling) == key, spelling


@pytest.mark.parametrize("one, other", [
    (("email", "jane.doe@example.com"), ("email", "janedoe@example.com")),   # dots count outside Gmail
    (("email", "jane@example.com"), ("email", "jane@example.org")),
    (("email", "+tag@example.com"), ("email", "+other@example.com")),        # nothing before the "+": no tag
    (("username", "1234567"), ("phone", "+1234567")),                         # 7 digits: a handle, not a number
    (("username", "1234567890123456"), ("phone", "+1234567890123456")),       # 16 digits: no phone number
    (("username", "jane"), ("email", "jane@example.com")),
])
def test_different_identifiers_keep_different_keys(one, other):
    assert opt_out_key(*one) != opt_out_key(*other)


@pytest.mark.parametrize("spelling, kind, expected", [
    ("+1.415.555.0199", None, ("phone", "+14155550199")),
    ("+1.415.555.0199", "phone", ("phone", "+14155550199")),
    ("+1 (415) 555-0199", None, ("phone", "+14155550199")),
    ("Jane.Doe@Example.com", None, ("email", "Jane.Doe@example.com")),  # D4's form: the legacy hash's input
    ("@SuppHandle", None, ("username", "SuppHandle")),
    ("+14155550199", "username", ("username", "+14155550199")),         # a number written as a username
])
def test_where_a_target_is_matched_more_spellings_are_accepted(spelling, kind, expected):
    assert identify(spelling, kind) == expected


@pytest.mark.parametrize("spelling, kind, code", [
    ("ab", None, "target_too_short"),
    ("jane@", None, "invalid_target"),
    ("+1.2", "phone", "invalid_target"),
    ("+12.34", "username", "invalid_target"),  # a "+" handle must be a phone number's digits
    ("abcd", "fax", "invalid_kind"),
])
def test_where_a_target_is_matched_invalid_ones_are_still_refused(spelling, kind, code):
    with pytest.raises(TargetError) as refused:
        identify(spelling, kind)
    assert refused.value.code == code
