"""Targets: their validation and kind inference (D4, as amended), in the order D2 fixes, and
their identity wherever a target is matched (D25).

``normalize`` takes the raw ``target`` and ``kind`` (already known to be strings or
absent) and returns ``(kind, stored_target)`` or raises ``TargetError`` with the
first failing check: ``target_too_short``, then ``invalid_kind``, then
``invalid_target``. A scan keeps that form: what a customer sees never changes.

Matching (opt-outs, the activity log's ``target`` filter, watches) goes through the identity
functions at the end, the one place that says when two spellings are one person's identifier:
``canonical`` (one form per kind), ``canonical_hash`` (what the activity log keeps),
``opt_out_key`` (the form an opt-out is kept under, reduced further so that it errs towards
refusal) and ``suppression_hashes`` (what an opt-out check looks for).
"""
from __future__ import annotations

import re
import unicodedata

import idna
import phonenumbers
from email_validator import EmailNotValidError, validate_email

from app.plumbing import crypto
from app.plumbing.errors import InvalidRequest

KINDS = ("email", "phone", "username")
MIN_LENGTH = 3
MAX_LENGTH = 256

PHONE_INFER_RE = re.compile(r"^\+[0-9 ()-]{7,}$")
PHONE_SEPARATORS_RE = re.compile(r"[ ()-]")
E164_RE = re.compile(r"^\+[1-9][0-9]{6,14}$")
HANDLE_RE = re.compile(r"^[A-Za-z0-9._-]{3,64}$")
EMAIL_LOCAL_MAX = 64  # RFC 5321 4.5.3.1.1; email_validator does not enforce it


class TargetError(ValueError):
    def __init__(self, code: str, message: str, kind: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind


def infer_kind(target: str) -> str:
    # Amended D4: a leading "@" marks a handle ("@alice_smith"); any other "@" an address.
    if target.startswith("@"):
        return "username"
    if "@" in target:
        return "email"
    if PHONE_INFER_RE.match(target):
        return "phone"
    return "username"


def _email(target: str) -> str:
    try:
        # Syntax only: no DNS look-up (D4). test_environment admits reserved test domains.
        validate_email(target, check_deliverability=False, test_environment=True)
    except EmailNotValidError as exc:
        raise TargetError("invalid_target", f"target is not a valid e-mail address: {exc}", "email") from None
    local, _, domain = target.rpartition("@")
    if len(local) > EMAIL_LOCAL_MAX:
        raise TargetError("invalid_target",
                          f"target is not a valid e-mail address: the part before the @ has more than "
                          f"{EMAIL_LOCAL_MAX} characters", "email")
    return f"{local}@{domain.lower()}"


def _phone(target: str) -> str:
    number = PHONE_SEPARATORS_RE.sub("", target)
    if not E164_RE.match(number):
        raise TargetError("invalid_target",
                          "target is not an international phone number in E.164 form (+ and 7 to 15 digits)", "phone")
    return number


def _username(target: str) -> str:
    handle = target.removeprefix("@")
    if not HANDLE_RE.match(handle):
        raise TargetError("invalid_target",
                          "target is not a valid username (3 to 64 of A-Z, a-z, 0-9, '.', '_', '-')", "username")
    return handle


NORMALIZERS = {"email": _email, "phone": _phone, "username": _username}


def normalize(target: str, kind: str | None) -> tuple[str, str]:
    text = target.strip()
    if len(text) < MIN_LENGTH:
        raise TargetError("target_too_short", f"target must have at least {MIN_LENGTH} characters", kind)
    if kind is not None and kind not in KINDS:
        raise TargetError("invalid_kind", "kind must be one of email, phone, username", None)
    kind = kind or infer_kind(text)
    if len(text) > MAX_LENGTH:
        raise TargetError("invalid_target", f"target must have at most {MAX_LENGTH} characters", kind)
    return kind, NORMALIZERS[kind](text)


def normalize_or_refuse(target: str, kind: str | None, *, field: str | None = None) -> tuple[str, str]:
    """``normalize``, a refused target raised as the 400 a creation answers (``InvalidRequest``
    with the target's own code; ``field``: the request field named in its ``details`` too)."""
    return _refusing(normalize, target, kind, field)


def _refusing(check, target: str, kind: str | None, field: str | None) -> tuple[str, str]:
    try:
        return check(target, kind)
    except TargetError as exc:
        details = {field: [exc.message]} if field else None
        raise InvalidRequest(exc.message, code=exc.code, details=details) from None


# --- identity: when two spellings are one target (D25) ---------------------------------------

# A phone number as people write it: dots too, which D4 does not take for a scan's target.
PHONE_MATCH_RE = re.compile(r"^\+[0-9 ().-]{7,}$")
PHONE_MATCH_SEPARATORS_RE = re.compile(r"[ ().-]")
# A username that is a phone number's digits (8 to 15, D25), perhaps written with a "+", dots or dashes.
NUMBER_HANDLE_RE = re.compile(r"^\+?[0-9.-]+$")
NUMBER_HANDLE_DIGITS = (8, 15)
NUMBER_HANDLE_WITH_PLUS_RE = re.compile(r"^\+[0-9]{8,15}$")
GMAIL_DOMAINS = frozenset({"gmail.com", "googlemail.com"})  # one mailbox: dots in its name do not count


def canonical(kind: str, target: str) -> str:
    """The one form of a target of ``kind`` (any spelling a valid target has): an e-mail address
    trimmed, case-folded and NFC-normalised, its domain in its IDNA (ASCII) form; a username
    without its leading ``@``, case-folded; a phone number in E.164 without spaces, dashes, dots,
    brackets or a trunk prefix written after the country code (``+44 (0)20 …``)."""
    text = target.strip()
    if kind == "email":
        local, _, domain = text.rpartition("@")
        return f"{_nfc_folded(local)}@{_ascii_domain(domain)}"
    if kind == "username":
        return text.removeprefix("@").casefold()
    if kind == "phone":
        return _e164(PHONE_MATCH_SEPARATORS_RE.sub("", text))
    raise ValueError(f"no such kind: {kind!r}")


def _nfc_folded(text: str) -> str:
    """Case-folded and NFC-normalised: a composed "é" and "e" + U+0301 are one letter."""
    if text.isascii():  # the common case, at a hundredth of the cost: nothing to compose
        return text.lower()
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


def _ascii_domain(domain: str) -> str:
    """A domain as DNS knows it (IDNA 2008 with UTS 46 mapping, as ``email_validator`` checks it):
    ``bücher.example`` and ``xn--bcher-kva.example`` are one. One it cannot encode stays case-folded."""
    if domain.isascii():  # UTS 46 maps an ASCII name (already checked as an address's) to its lower case
        return domain.lower()
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError:
        return _nfc_folded(domain)


def _unicode_domain(ascii_domain: str) -> str:
    if "xn--" not in ascii_domain:  # no label in its ASCII form: the name is its own Unicode form
        return ascii_domain
    try:
        return idna.decode(ascii_domain)
    except idna.IDNAError:
        return ascii_domain


def _e164(number: str) -> str:
    """A ``+`` number in E.164 as ``phonenumbers`` reads it (a national trunk prefix after the
    country code dropped, Italy's leading zero kept); one it cannot read stays as written.
    ``phonenumbers.parse`` costs some 100 us: a number whose national part no trunk prefix of its
    country starts (most) is its own E.164 form without it."""
    split = _country_split(number)
    if split is None:
        return number
    _, national, metadata = split
    prefix = metadata.national_prefix_for_parsing or metadata.national_prefix
    if not prefix or not re.match(prefix, national):
        return number
    try:
        parsed = phonenumbers.parse(number)
    except phonenumbers.NumberParseException:
        return number
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _country_split(number: str):
    """``(country code, national part, the country's metadata)`` of ``+digits``, or None (country
    codes are prefix-free: the first of 1 to 3 digits that is one is the one)."""
    if not number.startswith("+") or not number[1:].isdigit():
        return None
    for length in (1, 2, 3):
        code = int(number[1:1 + length])
        region = phonenumbers.region_code_for_country_code(code)
        if region != phonenumbers.UNKNOWN_REGION:
            metadata = (phonenumbers.PhoneMetadata.metadata_for_nongeo_region(code) if region == "001"
                        else phonenumbers.PhoneMetadata.metadata_for_region(region))
            return (code, number[1 + length:], metadata) if metadata is not None else None
    return None


def _earlier_forms(kind: str, form: str) -> set[str]:
    """The canonical forms the rule before NFC, IDNA and trunk prefixes gave the spellings of the
    target whose canonical form is ``form`` (a case-folded address as written, a number without
    separators), which opt-outs and activity entries stored then were hashed from: kept hashes
    cannot be recomputed (only the keyed hash is stored), so a check looks for these too."""
    if kind == "email":
        local, _, domain = form.rpartition("@")
        return {f"{spelt}@{name}" for spelt in {local, unicodedata.normalize("NFD", local)}
                for name in {domain, _unicode_domain(domain)}}
    if kind == "phone" and (split := _country_split(form)):
        code, national, metadata = split
        trunk = metadata.national_prefix
        return {form, *([f"+{code}{trunk}{national}"] if trunk else [])}
    return {form}


def canonical_hash(kind: str, target: str) -> str:
    """The keyed hash of the canonical form: what the activity log keeps of a target."""
    return crypto.target_hash(kind, canonical(kind, target))


def _mailbox(address: str) -> str:
    """An address without a ``+tag`` in its local part, a Gmail address without dots in it (and
    googlemail.com as gmail.com): one mailbox, however its owner spelt it."""
    local, _, domain = address.rpartition("@")
    untagged = local.partition("+")[0]
    local = untagged or local  # "+x@example.com" has nothing before its "+": no tag to drop
    if domain in GMAIL_DOMAINS:
        return f"{local.replace('.', '')}@gmail.com"
    return f"{local}@{domain}"


def _number_digits(handle: str) -> str | None:
    """The digits of a username that is a phone number's (8 to 15 digits), else None. A leading
    ``00`` is the international call prefix, as ``+`` (no E.164 number starts with 0)."""
    if not NUMBER_HANDLE_RE.match(handle):
        return None
    digits = re.sub(r"[^0-9]", "", handle)
    digits = digits.removeprefix("00")
    low, high = NUMBER_HANDLE_DIGITS
    return digits if low <= len(digits) <= high else None


def opt_out_key(kind: str, target: str) -> tuple[str, str]:
    """``(kind, form)`` an opt-out of ``target`` is kept under, and a check looks for: the
    canonical form, reduced until every spelling of the person's identifier is one form, erring
    towards refusal (an address's mailbox, a username of a phone number's digits as that number)."""
    return _key(kind, canonical(kind, target))


def _key(kind: str, form: str) -> tuple[str, str]:
    """The opt-out key of a canonical ``form``."""
    key_kind, reduced = _reduced(kind, form)
    return key_kind, _e164(reduced) if key_kind == "phone" and kind != "phone" else reduced


def _reduced(kind: str, form: str) -> tuple[str, str]:
    if kind == "email":
        return kind, _mailbox(form)
    if kind == "username" and (digits := _number_digits(form)):
        return "phone", f"+{digits}"
    return kind, form


def canonical_hashes(kind: str, target: str) -> set[str]:
    """The keyed hashes a match of ``target`` (as ``normalize`` returns it) looks for among
    hashes of canonical forms (the activity log's): its canonical form's, those of the forms
    the earlier rule gave its spellings, and the normalised target's own (kept before canonical
    forms), so that entries kept then are found as they were."""
    form = canonical(kind, target)
    forms = {form, *_earlier_forms(kind, form)}
    return {crypto.target_hash(kind, form) for form in forms} | {crypto.target_hash(kind, target)}


def suppression_hashes(kind: str, target: str) -> set[str]:
    """The keyed hashes an opt-out check of ``target`` (as ``normalize`` returns it: a scan's
    stored target) looks for: its opt-out key's, those the earlier rule kept its spellings under
    (before NFC, IDNA and trunk prefixes: ``_earlier_forms``), and the one opt-outs were kept
    under before canonical forms (the normalised target's own), so that those keep refusing what
    they refused. Watches keep their opt-out hash the same way, so this set finds theirs too."""
    form = canonical(kind, target)
    keys = {_key(kind, form), *(_reduced(kind, earlier) for earlier in _earlier_forms(kind, form))}
    return {crypto.target_hash(*key) for key in keys} | {crypto.target_hash(kind, target)}


def identify(target: str, kind: str | None) -> tuple[str, str]:
    """``normalize`` for a target written where one is matched rather than scanned (an opt-out,
    the activity log's filter): a phone number may also be written with dots, a username may be
    a phone number's digits after a ``+``. ``(kind, normalised target)``, or ``TargetError``."""
    text = target.strip()
    if kind in (None, "phone") and PHONE_MATCH_RE.match(text):
        text = text.replace(".", "")
    if kind == "username" and NUMBER_HANDLE_WITH_PLUS_RE.match(text):
        return kind, text
    return normalize(text, kind)


def identify_or_refuse(target: str, kind: str | None, *, field: str | None = None) -> tuple[str, str]:
    """``identify``, a refused target raised as ``normalize_or_refuse`` raises it."""
    return _refusing(identify, target, kind, field)

