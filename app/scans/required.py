"""``required``: a match rule over what a scan must find for its creation to be paid (D29).

The words name kinds of item (``WORDS``), joined by ``AND``, ``OR`` and parentheses, ``AND``
binding tighter: ``profiles.verified OR (emails AND breaches)``. A small recursive-descent
parser makes a tree of tuples, ``("word", w)``, ``("and", [...])``, ``("or", [...])``; nothing
is ever evaluated as code. A rule that does not parse is ``InvalidRequired`` (400
``invalid_required``) naming the character position (from 1) where it went wrong.

``matches`` decides a completed scan: each word is true when the result, shown at the scan's
``min_confidence``, has such an item (``phone_profile``: a phone profile at all, it has no
confidence). A scan that does not match keeps only ``unmatched`` of its result, and its creation
is refunded (``settle`` here and ``app.billing.refunds``, in the transaction that completes it).
"""
from __future__ import annotations

import json
import re
from typing import NoReturn

from app.plumbing.errors import InvalidRequired
from app.scans import confidence
from app.scans import statements as scan_store
from app.scans.models import COMPLETED

MAX_LENGTH = 500
MAX_DEPTH = 20
WORDS = ("profiles", "profiles.verified", "emails", "phones", "breaches", "phone_profile")
_TOKEN = re.compile(r"\s*(?:(\()|(\))|([A-Za-z_.]+))")


def _fail(message: str, position: int) -> NoReturn:
    text = f"required: {message} at position {position}"
    raise InvalidRequired(text, details={"required": [text]})


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """``(type, value, position)``: type ``(``, ``)``, ``and``, ``or`` or ``word``."""
    tokens, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None:
            position = at + len(text[at:]) - len(text[at:].lstrip()) + 1
            _fail(f"unexpected character {text[position - 1]!r}", position)
        group = match.lastindex or 0
        start, value = match.start(group) + 1, match.group(group)
        if value in ("(", ")"):
            tokens.append((value, value, start))
        elif value.upper() in ("AND", "OR"):
            tokens.append((value.lower(), value, start))
        elif value in WORDS:
            tokens.append(("word", value, start))
        else:
            _fail(f"unknown word {value[:40]!r} (one of {', '.join(WORDS)}, AND, OR, parentheses)", start)
        at = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _end(self) -> int:
        return len(self.text.rstrip()) + 1

    def expression(self, depth: int = 0) -> tuple:
        terms = [self.term(depth)]
        while (token := self._peek()) is not None and token[0] == "or":
            self.at += 1
            terms.append(self.term(depth))
        return terms[0] if len(terms) == 1 else ("or", terms)

    def term(self, depth: int) -> tuple:
        factors = [self.factor(depth)]
        while (token := self._peek()) is not None and token[0] == "and":
            self.at += 1
            factors.append(self.factor(depth))
        return factors[0] if len(factors) == 1 else ("and", factors)

    def factor(self, depth: int) -> tuple:
        token = self._peek()
        if token is None:
            _fail("a word or '(' is missing", self._end())
        kind, value, position = token
        if kind == "word":
            self.at += 1
            return ("word", value)
        if kind == "(":
            if depth >= MAX_DEPTH:
                _fail(f"more than {MAX_DEPTH} parentheses inside each other", position)
            self.at += 1
            inner = self.expression(depth + 1)
            closing = self._peek()
            if closing is None or closing[0] != ")":
                _fail("')' is missing", closing[2] if closing else self._end())
            self.at += 1
            return inner
        _fail(f"a word or '(' was expected, not {value!r}", position)


def parse(text) -> tuple | None:
    """The tree of a rule (None: no rule); ``InvalidRequired`` when it is not one."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidRequired("required must be a string", details={"required": ["must be a string"]})
    if len(text) > MAX_LENGTH:
        _fail(f"the rule is longer than {MAX_LENGTH} characters", MAX_LENGTH + 1)
    if not text.strip():
        _fail("the rule is empty", 1)
    parser = _Parser(text)
    tree = parser.expression()
    extra = parser._peek()
    if extra is not None:
        _fail(f"{extra[1]!r} was not expected", extra[2])
    return tree


def check(text) -> str | None:
    """The rule as stored (its text, trimmed), after it parsed; None for none."""
    parse(text)
    return text.strip() if isinstance(text, str) else None


def _has(result: dict, word: str) -> bool:
    if word == "phone_profile":
        return bool(result.get("phone_profile"))
    profiles = result.get("profiles") or {}
    contacts = result.get("contacts") or {}
    lists = {"profiles": (profiles.get("verified") or []) + (profiles.get("weak") or []),
             "profiles.verified": profiles.get("verified") or [], "emails": contacts.get("emails") or [],
             "phones": contacts.get("phones") or [], "breaches": result.get("breaches") or []}
    return bool(lists[word])


def _holds(tree: tuple, result: dict) -> bool:
    kind, value = tree
    if kind == "word":
        return _has(result, value)
    parts = (_holds(part, result) for part in value)
    return all(parts) if kind == "and" else any(parts)


def matches(rule: str | None, result: dict, minimum: float | None) -> bool:
    """Whether ``result`` meets ``rule`` with its findings under ``minimum`` left out; true
    without a rule. A stored rule that no longer parses (never: it parsed at creation) matches."""
    if not rule:
        return True
    try:
        tree = parse(rule)
    except InvalidRequired:
        return True
    return tree is None or _holds(tree, confidence.filtered(result, minimum))


def unmatched(result: dict) -> dict:
    """What a scan that did not match keeps: its sources, coverage and reasons' codes, no item."""
    reasons = ((result.get("risk") or {}).get("reasons")) or []
    return {
        "risk": {"score": 0, "band": "low",
                 "reasons": [{"code": r.get("code"), "points": 0, "description": "", "finding_ids": []}
                             for r in reasons]},
        "counts": {"cases": 0, "entities": 0, "findings": 0},
        "profiles": {"verified": [], "weak": []},
        "contacts": {"emails": [], "phones": []},
        "breaches": [],
        "phone_profile": None,
        "ai_summary": "",
        "artifacts": {"pdf": "", "person_card": ""},
        "sources": result.get("sources") or [],
        "coverage": result.get("coverage") or {"checked": 0, "found": 0, "failed": 0, "ratio": 1.0},
        "partial": bool(result.get("partial")),
        "findings": [],
        "match": False,
    }


# --- a completed scan that does not match: its items withheld (billing refunds its creation) ----

def settle(scans: list) -> list:
    """In the transaction that completes ``scans`` (after their findings carry the customer's
    feedback): each completed scan whose ``required`` its result does not meet keeps only
    ``unmatched`` of it (written, and in ``scan.result_json``, which its webhook body reads).
    Returns those scans, for ``app.billing.refunds.refund_unmatched``."""
    missed = []
    for scan in scans:
        if scan.status != COMPLETED or not scan.required or not scan.result_json:
            continue
        result = json.loads(scan.result_json)
        if matches(scan.required, result, scan.min_confidence):
            continue
        scan.result_json = json.dumps(unmatched(result), separators=(",", ":"))
        scan_store.set_result_json(scan.id, scan.result_json)
        missed.append(scan)
    return missed

