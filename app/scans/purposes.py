"""Why a customer looks a person up (D20): a purpose from a fixed list and the customer's own
case reference, checked at creation, stored with every scan and shown wherever the scan is.

A customer may require a purpose (``customers settings CUSTOMER_ID --require-purpose on``):
a creation without one is then 400 ``purpose_required``.
"""
from __future__ import annotations

import re

from app.plumbing.errors import InvalidRequest

PURPOSES = ("fraud_prevention", "kyc_aml", "due_diligence", "background_check", "security_research",
            "law_enforcement", "other")
CASE_REF_MAX = 128
# Printable ASCII and the Latin letters and signs of Latin-1 and Latin Extended-A: one rule that the
# OpenAPI document states as it is (a schema cannot say "printable" in every script).
CASE_REF_PATTERN = f"^[ -~\u00a1-\u00ac\u00ae-\u017f]{{1,{CASE_REF_MAX}}}$"
_CASE_REF = re.compile(CASE_REF_PATTERN)


def check(purpose: object, case_ref: object, *, required: bool) -> tuple[str | None, str | None]:
    """The creation's ``(purpose, case_ref)``, or the 400 that refuses them."""
    if purpose is None:
        if required:
            raise InvalidRequest("this account requires a purpose on every scan: one of " + ", ".join(PURPOSES),
                                 code="purpose_required")
    elif purpose not in PURPOSES:
        raise InvalidRequest("purpose must be one of " + ", ".join(PURPOSES), code="invalid_purpose")
    if case_ref is not None and not (isinstance(case_ref, str) and _CASE_REF.fullmatch(case_ref)):
        raise InvalidRequest(f"case_ref must be 1 to {CASE_REF_MAX} printable characters",
                             details={"case_ref": [f"1 to {CASE_REF_MAX} printable characters"]})
    return purpose, case_ref
