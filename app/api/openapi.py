"""The OpenAPI document's shared parts, for every view module of the API: the answer headers,
the error statuses with their codes and examples (D21's key refusals added to each operation),
the ``Idempotency-Key`` and ``?min_confidence=`` parameters. The parts that name events (the
``?wait=N`` parameter, the webhook callbacks of the creations) are the events' (``app.events.schemas``).

Nothing here runs per request: these are read when the blueprints are decorated.
"""
from __future__ import annotations

import functools

HEADERS = {
    "X-Credits-Remaining": {"description": "Balance after this call's charge.", "schema": {"type": "integer"}},
    "RateLimit-Policy": {"description": 'Quota policies, e.g. `"hour";q=100;w=3600, "day";q=1000;w=86400`.',
                         "schema": {"type": "string"}},
    "RateLimit": {"description": 'Remaining quota and seconds to reset, e.g. '
                                 '`"hour";r=42;t=1200, "day";r=900;t=50000`.',
                  "schema": {"type": "string"}},
    "X-Request-Id": {"description": "Also in error bodies and logs.", "schema": {"type": "string"}},
}
# The error envelope's schema by its component's name (the app registers ``ErrorSchema`` as
# ``Error``): every error status of every operation refers to it, in the same words as when the
# class was given. Given as the class, each ``alt_response`` made an instance of it, which each
# decorator stacked after it deep-copied with the view's documentation: 0.09 s of the 1.41 s of
# CPU an API process spent building its app at start (2026-11-29).
ERROR_REF = "Error"

ERROR_DOCS = {
    400: "`invalid_request` (body shape, with `details`), `target_too_short`, `invalid_kind`, `invalid_target`, "
         "`invalid_purpose`, `purpose_required` (your account asks for a purpose on every scan), "
         "`invalid_required` (the `required` rule does not parse; the message names the position)",
    401: "`unauthorized` (header missing or malformed), `invalid_token` (unknown or revoked key)",
    402: "`insufficient_balance`",
    403: "`forbidden` (another customer's resource)",
    404: "`not_found`",
    409: "`idempotency_conflict`",
    429: "`rate_limit_inflight`, `rate_limit_hour`, `rate_limit_day`; with `Retry-After`",
    502: "`engine_submit_failed`; with `Retry-After: 30`",
    503: "`service_unavailable` (database unreachable); with `Retry-After`",
}
# Every code a status really carries on these endpoints, with a message as the service words it:
# the OpenAPI document shows one example per code under its status.
ERROR_EXAMPLES = {
    "invalid_request": (400, "target: Not a valid string."),
    "target_too_short": (400, "target must have at least 3 characters"),
    "invalid_kind": (400, "kind must be one of email, phone, username"),
    "invalid_target": (400, "target is not a valid e-mail address"),
    "invalid_required": (400, "required: unknown word 'profile' (one of profiles, profiles.verified, emails, "
                              "phones, breaches, phone_profile, AND, OR, parentheses) at position 1"),
    "invalid_purpose": (400, "purpose must be one of fraud_prevention, kyc_aml, due_diligence, background_check, "
                             "security_research, law_enforcement, other"),
    "purpose_required": (400, "this account requires a purpose on every scan: one of fraud_prevention, ..."),
    "no_targets": (400, "targets must hold at least one target"),
    "too_many_targets": (400, "a bulk call takes at most 100 targets"),
    "unauthorized": (401, "the Authorization header must be 'Bearer <API key>'"),
    "invalid_token": (401, "the API key is unknown or revoked"),
    "key_expired": (401, "this API key has expired"),
    "ip_not_allowed": (403, "this API key may not be used from 198.51.100.7, the address this service sees "
                              "for your call"),
    "insufficient_scope": (403, "this API key lacks the scope scans:write, which this call needs"),
    "insufficient_balance": (402, "the account balance is below 1 credit"),
    "forbidden": (403, "this scan belongs to another customer"),
    "bulk_not_allowed": (403, "bulk calls are available on the Business and Enterprise tiers"),
    "target_suppressed": (403, "the person this target belongs to has opted out of lookups"),
    "not_found": (404, "no scan with this id"),
    "nothing_to_rerun": (409, "this scan has no source to re-run: every source answered"),
    "idempotency_conflict": (409, "this Idempotency-Key was used with a different request body"),
    "scan_in_flight": (409, "this scan is still in flight: erase it once it is completed or failed"),
    "rate_limit_inflight": (429, "too many scans in flight (10 of 10); retry when one finishes"),
    "rate_limit_hour": (429, "hourly scan quota reached (100 per hour)"),
    "rate_limit_day": (429, "daily scan quota reached (1000 per day)"),
    "rate_limited": (429, "this key already holds 100 waiting calls or streams; close one or wait without holding"),
    "engine_submit_failed": (502, "the investigation engine cannot be reached; retry in 30 seconds"),
    "service_unavailable": (503, "the service is temporarily unavailable; retry later"),
}
CODES = {
    400: ("invalid_request", "target_too_short", "invalid_kind", "invalid_target", "invalid_purpose",
          "purpose_required", "invalid_required"),
    401: ("unauthorized", "invalid_token"),
    402: ("insufficient_balance",),
    403: ("forbidden",),
    404: ("not_found",),
    409: ("idempotency_conflict",),
    429: ("rate_limit_inflight", "rate_limit_hour", "rate_limit_day"),
    502: ("engine_submit_failed",),
    503: ("service_unavailable",),
}


def error_examples(codes) -> dict:
    return {code: {"summary": code, "value": {"ok": False, "error": code, "message": ERROR_EXAMPLES[code][1],
                                              "request_id": "req_4f1c2a9e0b7d3c5a6e8f9a1b"}}
            for code in codes}


IDEMPOTENCY_HEADER = {"in": "header", "name": "Idempotency-Key", "required": False,
                      "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                                 "pattern": "^[^\\x00-\\x1f\\x7f]+$"},
                      "description": "Repeating a call with the same key within 24 hours replays its first 202 "
                                     "answer without creating or charging anything; the same key with a "
                                     "different body is 409 `idempotency_conflict`. 1 to 255 characters, no "
                                     "control characters."}
SECURITY = [{"bearerAuth": []}]
# ``?min_confidence=`` of the reads, parsed by the same wrapper.
MIN_CONFIDENCE_PARAMETER = {"in": "query", "name": "min_confidence", "required": False,
                            "schema": {"type": "number", "minimum": 0, "maximum": 1},
                            "description": "For this read only, in place of the scan's own `min_confidence`: leave "
                                           "out of each result the findings under this confidence (0 to 1), with "
                                           "their items and the score's reasons that rest only on them "
                                           "(`result.filtered` says how many)."}
# D21's refusals of the key, which every endpoint can answer, free of charge.
KEY_REFUSAL_DOCS = {
    401: "`key_expired` (the key's expiry has passed)",
    403: "`ip_not_allowed` (the key's IP allowlist does not hold your address), `insufficient_scope` (the key "
         "lacks the scope this call needs; the message names it); both free of charge",
}
KEY_REFUSAL_CODES = {401: ("key_expired",), 403: ("ip_not_allowed", "insufficient_scope")}


def with_key_refusals(docs: dict[int, str], codes: dict[int, tuple]) -> tuple[dict[int, str], dict[int, tuple]]:
    """``docs`` (status: the codes' words) and ``codes`` (status: codes) with D21's refusals added."""
    docs, codes = dict(docs), dict(codes)
    for status, text in KEY_REFUSAL_DOCS.items():
        docs[status] = f"{docs[status]}, {text}" if status in docs else text
        codes[status] = tuple(codes.get(status, ())) + KEY_REFUSAL_CODES[status]
    return dict(sorted(docs.items())), codes


def error_documenter(blueprint, examples: dict[str, str]):
    """The ``documented_errors`` of a blueprint whose statuses are described in words: each
    status's description names its codes in backticks, and every code named gets an example
    body with ``examples``' message; D21's refusals are added to every operation."""
    def examples_for(text: str) -> dict:
        return {code: {"summary": code, "value": {"ok": False, "error": code, "message": message,
                                                  "request_id": "req_4f1c2a9e0b7d3c5a6e8f9a1b"}}
                for code, message in examples.items() if f"`{code}`" in text}

    def documented_errors(statuses: dict):
        statuses, _ = with_key_refusals(statuses, {})

        def decorate(view):
            for status, text in reversed(list(statuses.items())):
                view = blueprint.alt_response(status, schema=ERROR_REF, description=f"Error codes: {text}.",
                                              examples=examples_for(text))(view)
            return view
        return decorate
    return documented_errors


def errors_of(blueprint):
    """``documented_errors`` for the operations of ``blueprint``, for a module whose views all
    document their errors there."""
    return functools.partial(documented_errors, blueprint=blueprint)


def documented_errors(*statuses, blueprint, overrides=None, codes=None):
    """Stack an ``alt_response`` per error status, naming the codes each can carry, with an example of each;
    every endpoint also names D21's refusals of the key (401, 403)."""
    docs, all_codes = with_key_refusals(
        {status: (overrides or {}).get(status, ERROR_DOCS[status]) for status in statuses},
        {status: (codes or {}).get(status, CODES[status]) for status in statuses})

    def decorate(view):
        for status, text in reversed(list(docs.items())):
            view = blueprint.alt_response(status, schema=ERROR_REF, description=f"Error codes: {text}.",
                                                   examples=error_examples(all_codes[status]))(view)
        return view
    return decorate
