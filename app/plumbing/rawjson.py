"""JSON bodies that embed stored JSON text as it is, without parsing it again.

A completed scan's result is stored as compact JSON (``Scan.result_json``), already
validated and normalised (D6) in the field order of ``ResultSchema``. A read used to
parse it and let marshmallow dump it again, which for a batch of 100 costs far more
than the rest of the request; ``RawJSON`` marks such text so that ``render`` splices it
into the body unchanged. The bytes are those ``jsonify`` would write for the parsed
value (compact separators, ASCII escapes, the stored key order).
"""
from __future__ import annotations

import json
import re
import secrets

_STAND_IN = re.compile(r'"([0-9a-f]{16}):([0-9]+)"')


class RawJSON:
    """JSON text to be embedded as a value, verbatim."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def value(self):
        return json.loads(self.text)


def parsed(obj):
    """``obj`` with every ``RawJSON`` replaced by its parsed value."""
    if isinstance(obj, RawJSON):
        return obj.value()
    if isinstance(obj, dict):
        return {k: parsed(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [parsed(v) for v in obj]
    return obj


def render(obj, dumps) -> str:
    """``dumps(obj)`` with each ``RawJSON`` written as its text.

    Each raw value is first stood in for by a string holding a random nonce, which no
    other string of the body can contain, then swapped for its text in one pass.
    """
    raws: list[str] = []
    nonce = secrets.token_hex(8)

    def stand_in(value):
        if isinstance(value, RawJSON):
            raws.append(value.text)
            return f"{nonce}:{len(raws) - 1}"
        if isinstance(value, dict):
            return {k: stand_in(v) for k, v in value.items()}
        if isinstance(value, list):
            return [stand_in(v) for v in value]
        return value

    text = dumps(stand_in(obj))
    if not raws:
        return text
    return _STAND_IN.sub(lambda m: raws[int(m.group(2))] if m.group(1) == nonce else m.group(0), text)
