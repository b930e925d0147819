"""Request and response schemas of the scan endpoints (§2, §4; D5-D7).

Request schemas check only the body's shape (types, required fields) and refuse unknown fields:
the semantic checks (``target_too_short``, ``invalid_kind``, ``invalid_target``) run afterwards in
``app.targets.identity`` in the order D2 fixes. The document says those checks too (``TARGET_DOC``'s
pattern, ``app.blueprints._shape_schemas``), so that a request it calls valid is one the service takes.
"""
import copy

import marshmallow as ma
from marshmallow import RAISE, fields

from app.api.fields import UtcDateTime
from app.events import kinds as events
from app.events.waits import WAIT_RANGE, parse_wait
from app.plumbing.errors import InvalidRequest
from app.scans.models import MAX_BULK_TARGETS
from app.scans.purposes import CASE_REF_MAX, CASE_REF_PATTERN, PURPOSES
from app.targets.schemas import TARGET_DOC

KIND_DOC = {"description": "email, phone or username. When absent it is inferred from the target: a leading "
                          "`@` marks a username (`@janedoe`), any other `@` an e-mail address, `+` followed by "
                          "at least 7 digits, spaces, dashes or parentheses a phone number, anything else a "
                          "username.",
            "enum": ["email", "phone", "username"], "example": "email"}


PURPOSE_DOC = {"description": "Why you look this person up. Required when your account asks for it "
                              "(`purpose_required`); null or absent: none.",
               "enum": list(PURPOSES), "example": "fraud_prevention"}
CASE_REF_DOC = {"description": f"Your own reference for the case (1 to {CASE_REF_MAX} printable characters), "
                               "shown with the scan everywhere.", "example": "CASE-2026-0042"}
CASE_REF_REQUEST_DOC = {**CASE_REF_DOC, "minLength": 1, "maxLength": CASE_REF_MAX, "pattern": CASE_REF_PATTERN}
# Read back as a plain nullable string (no enum): generated clients make odd types of a nullable enum.
READ_PURPOSE_DOC = {"description": "The purpose given at creation (" + ", ".join(PURPOSES) + "), or null.",
                    "example": "fraud_prevention"}
READ_CASE_REF_DOC = {**CASE_REF_DOC, "description": "The case reference given at creation, or null."}
READ_TARGET_DOC = {"description": "The target as normalised. Absent once the scan was erased.",
                   "example": "jane.doe@example.com"}
ERASED_AT_DOC = {"format": "date-time", "example": "2026-11-21T09:30:00Z",
                 "description": "Only once the scan was erased (on your request or when your retention period "
                                "ended): its target, result and failure message are gone; its ids, times, purpose "
                                "and charges stay."}


MIN_CONFIDENCE_DOC = {
    "description": "Leave out of the result the findings whose `confidence` is under this number (0 to 1), with "
                   "their items and the score's reasons that rest only on them; `result.filtered` says how many. "
                   "Kept with the scan, returned on its reads, and used for its webhook bodies and events. "
                   "Absent or null: nothing is left out.",
    "minimum": 0, "maximum": 1, "example": 0.5}
REQUIRED_DOC = {
    "description": "What the scan must find (at or above `min_confidence`) for you to pay for it: the words "
                   "`profiles` (verified or weak), `profiles.verified`, `emails`, `phones`, `breaches` and "
                   "`phone_profile`, joined by `AND`, `OR` and parentheses (`AND` binds tighter). A completed scan "
                   "that does not match has `result.match: false`, no items (only its sources, coverage and the "
                   "codes of its reasons), and the credit its creation cost given back when it completes. A rule "
                   "that does not parse is 400 `invalid_required`, naming the position. Absent or null: every "
                   "completed scan matches.",
    "maxLength": 500, "example": "profiles.verified OR breaches"}


def min_confidence_field(**options) -> fields.Field:
    """``min_confidence`` in a creation's body: a number 0 to 1 (else 400 naming it), or null."""
    return fields.Float(allow_none=True, validate=ma.validate.Range(min=0, max=1), metadata=MIN_CONFIDENCE_DOC,
                        **options)


def required_field() -> fields.Field:
    """``required`` in a creation's body: checked by the service, so a rule that does not parse is
    its own code (``invalid_required``)."""
    return fields.Raw(allow_none=True, metadata={**REQUIRED_DOC, "type": "string"})


class ScanCreateSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    target = fields.String(required=True, metadata=TARGET_DOC)
    kind = fields.String(allow_none=True, metadata=KIND_DOC)
    # Raw: checked by the service, so that a wrong value is its own code (invalid_purpose).
    purpose = fields.Raw(allow_none=True, metadata={**PURPOSE_DOC, "type": "string"})
    case_ref = fields.Raw(allow_none=True, metadata={**CASE_REF_REQUEST_DOC, "type": "string"})
    min_confidence = min_confidence_field()
    required = required_field()


class BulkTargetSchema(ma.Schema):
    """One bulk target; documented only: each item is checked on its own (``app.intake.bulk``, which
    refuses unknown fields in it too), so a bad one is rejected, not fatal."""

    target = ScanCreateSchema._declared_fields["target"]
    kind = ScanCreateSchema._declared_fields["kind"]


class BulkCreateSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    # allow_none: a null item is one more item that is not an object, rejected on its own (D7).
    targets = fields.List(fields.Raw(allow_none=True), required=True, metadata={
        "description": f"1 to {MAX_BULK_TARGETS} targets, each {{target, kind}}. An item that is not a valid "
                       "`BulkTarget` (an empty or too short target, one in no known form, a kind it does not "
                       "match, an unknown field, null, not an object) does not make the call a 400: it is an "
                       "entry of `rejected` in the answer, with its error (`invalid_request`, "
                       "`target_too_short`, `invalid_kind`, `invalid_target`), free of charge, and the "
                       "valid targets are accepted.", "minItems": 1, "maxItems": MAX_BULK_TARGETS,
        "items": {"$ref": "#/components/schemas/BulkTarget"},
        "example": [{"target": "jane.doe@example.com", "kind": "email"}, {"target": "+447700900123"},
                    {"target": "@janedoe", "kind": "username"}]})
    purpose = fields.Raw(allow_none=True, metadata={**PURPOSE_DOC, "type": "string",
                                                    "description": "Why you look these people up (every target); "
                                                                   "null or absent: none."})
    case_ref = fields.Raw(allow_none=True, metadata={**CASE_REF_REQUEST_DOC, "type": "string"})
    min_confidence = min_confidence_field()
    required = required_field()


# --- result (D6) ------------------------------------------------------------------

FINDING_ID_DOC = {"description": "A finding's id. It names what the item is, not where it stands: the same "
                                 "profile, e-mail address, phone number or breach has the same id on every "
                                 "read of the scan and in every later scan of the same target by your "
                                 "account, wherever it appears in the lists. Another account's ids differ.",
                  "example": "fnd_75Ml5C0uCxYLlJdzJ7o9"}


class ReasonSchema(ma.Schema):
    code = fields.String(required=True, metadata={"description": "What raised the score, as a stable code.",
                                                  "example": "breaches"})
    points = fields.Integer(required=True, metadata={
        "description": "Its share of the score: the points of all reasons add up to the score.", "example": 24})
    description = fields.String(required=True, metadata={"example": "Appears in 2 known breaches."})
    finding_ids = fields.List(fields.String(), required=True, metadata={
        "description": "The findings behind this reason (`findings[].id`); empty for signals that name no item.",
        "example": ["fnd_75Ml5C0uCxYLlJdzJ7o9"]})


class RiskSchema(ma.Schema):
    score = fields.Integer(required=True, metadata={"minimum": 0, "maximum": 100, "example": 62})
    band = fields.String(required=True, metadata={"enum": ["low", "medium", "high", "critical"], "example": "high"})
    reasons = fields.List(fields.Nested(ReasonSchema), required=True, metadata={
        "description": "The score explained: points that add up to it, each naming its findings. Empty when the "
                       "engine gave no explanation (or one that did not add up)."})


class CountsSchema(ma.Schema):
    cases = fields.Integer(required=True, metadata={"example": 2})
    entities = fields.Integer(required=True, metadata={"example": 14})
    findings = fields.Integer(required=True, metadata={"example": 9})


class ProfileSchema(ma.Schema):
    platform = fields.String(required=True, metadata={"example": "github"})
    url = fields.String(required=True, metadata={"example": "https://github.com/janedoe"})
    handle = fields.String(required=True, metadata={"example": "janedoe"})
    display_name = fields.String(required=True, metadata={"example": "Jane Doe"})
    confidence = fields.Float(required=True, metadata={"minimum": 0, "maximum": 1, "example": 0.92})


class ProfilesSchema(ma.Schema):
    verified = fields.List(fields.Nested(ProfileSchema), required=True)
    weak = fields.List(fields.Nested(ProfileSchema), required=True)


class ContactsSchema(ma.Schema):
    emails = fields.List(fields.String(), required=True, metadata={"example": ["j.doe@example.org"]})
    phones = fields.List(fields.String(), required=True, metadata={"example": ["+447700900123"]})


class BreachSchema(ma.Schema):
    name = fields.String(required=True, metadata={"example": "ExampleForum"})
    date = fields.String(required=True, metadata={"pattern": r"^\d{4}-\d{2}$", "example": "2021-06"})
    accounts = fields.Integer(required=True, metadata={"example": 1200000})
    classes = fields.List(fields.String(), required=True, metadata={"example": ["emails", "passwords"]})


class PhoneProfileSchema(ma.Schema):
    e164 = fields.String(required=True, metadata={"example": "+447700900123"})
    country_code = fields.Integer(required=True, metadata={"example": 44})
    region = fields.String(required=True, allow_none=True, metadata={"example": "GB"})
    carrier = fields.String(required=True, metadata={"example": "Vodafone"})
    line_type = fields.String(required=True, metadata={"example": "mobile"})
    valid = fields.Boolean(required=True)
    timezones = fields.List(fields.String(), required=True, metadata={"example": ["Europe/London"]})


class ArtifactsSchema(ma.Schema):
    pdf = fields.String(required=True, metadata={"example": "https://engine.example/artifacts/inv_1.pdf"})
    person_card = fields.String(required=True, metadata={"example": "https://engine.example/artifacts/inv_1.card"})


SOURCE_STATUSES = ["found", "not_found", "error", "rate_limited", "timeout", "skipped"]


class SourceSchema(ma.Schema):
    id = fields.String(required=True, metadata={"example": "breach_index"})
    name = fields.String(required=True, metadata={"example": "Breach Index"})
    status = fields.String(required=True, metadata={
        "enum": SOURCE_STATUSES, "example": "found",
        "description": "found: it found something; not_found: it answered with nothing; error, rate_limited, "
                       "timeout: it could not answer (the result is partial; re-run the scan to ask it again); "
                       "skipped: not asked for this kind of target, or (with `reason`) left out by this service."})
    checked_at = fields.String(required=True, allow_none=True, metadata={"format": "date-time",
                                                                       "example": "2026-11-21T12:01:40Z"})
    latency_ms = fields.Integer(required=True, allow_none=True, metadata={"example": 412})
    reason = fields.String(metadata={
        "enum": ["quarantined"], "example": "quarantined",
        "description": "Present on a skipped source left out by this service: `quarantined` (it was down or "
                       "answered its checks wrongly when the scan was made; `GET /api/v1/sources`). A re-run asks it "
                       "once it is back. Coverage and `partial` count only the sources asked."})


class CoverageSchema(ma.Schema):
    checked = fields.Integer(required=True, metadata={"description": "Sources asked (not skipped).",
                                                      "example": 14})
    found = fields.Integer(required=True, metadata={"description": "Sources that found something.", "example": 6})
    failed = fields.Integer(required=True, metadata={
        "description": "Sources that could not answer (error, rate-limited, timed out).", "example": 2})
    ratio = fields.Float(required=True, metadata={
        "minimum": 0, "maximum": 1, "example": 0.8571,
        "description": "(checked - failed) / checked: the share of sources that answered; 1 when none was asked."})


class FeedbackSchema(ma.Schema):
    verdict = fields.String(required=True, metadata={"enum": ["false_positive", "confirmed"],
                                                     "example": "false_positive"})
    note = fields.String(required=True, metadata={"example": "Another person with the same name."})
    at = fields.String(required=True, allow_none=True, metadata={"format": "date-time",
                                                                 "example": "2026-11-21T12:30:00Z"})
    scan_id = fields.String(required=True, metadata={
        "description": "The scan the feedback was given on: this scan, or an earlier scan of the same target "
                       "(feedback follows the finding to your later scans of the target in the same mode).",
        "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})


class FindingSchema(ma.Schema):
    id = fields.String(required=True, metadata=FINDING_ID_DOC)
    path = fields.String(required=True, metadata={
        "description": "The item of the result this finding is: `profiles.verified[0]`, `profiles.weak[1]`, "
                       "`contacts.emails[0]`, `contacts.phones[0]` or `breaches[2]`.",
        "example": "breaches[0]"})
    source_ids = fields.List(fields.String(), required=True, metadata={
        "description": "The sources that found it (`sources[].id`).", "example": ["breach_index"]})
    confidence = fields.Float(required=True, metadata={
        "description": "How sure it is that the item belongs to the person, 0 to 1 with two decimals: your own "
                       "feedback when you gave some (`confirmed` 1, `false_positive` 0, also in your later scans of "
                       "the target), else the engine's estimate, else 0.9 for a verified profile, 0.4 for a weak "
                       "one, 0.7 for an e-mail address or phone number, 0.95 for a breach, plus 0.05 for each "
                       "further source that found it (at most 0.99).",
        "minimum": 0, "maximum": 1, "example": 0.95})
    matched_on = fields.List(fields.String(metadata={"enum": ["email", "phone", "username", "name", "photo",
                                                              "other"]}), required=True, metadata={
        "description": "What ties the item to the target, as the engine says: `email`, `phone`, `username`, "
                       "`name`, `photo`, `other`; empty when it does not say.", "example": ["email", "name"]})
    feedback = fields.Nested(FeedbackSchema, required=True, allow_none=True, metadata={
        "description": "Your latest feedback on this finding, given on this scan or on an earlier scan of the "
                       "same target, or null."})


class FilteredSchema(ma.Schema):
    min_confidence = fields.Float(required=True, metadata={
        "description": "The minimum applied: the read's `min_confidence` when it gave one, else the scan's.",
        "example": 0.5})
    findings_left_out = fields.Integer(required=True, metadata={
        "description": "How many findings were under it (with their items).", "example": 2})


class ResultSchema(ma.Schema):
    risk = fields.Nested(RiskSchema, required=True)
    counts = fields.Nested(CountsSchema, required=True)
    profiles = fields.Nested(ProfilesSchema, required=True)
    contacts = fields.Nested(ContactsSchema, required=True)
    breaches = fields.List(fields.Nested(BreachSchema), required=True)
    phone_profile = fields.Nested(PhoneProfileSchema, required=True, allow_none=True,
                                  metadata={"description": "null unless the target is a phone with a profile"})
    ai_summary = fields.String(required=True)
    artifacts = fields.Nested(ArtifactsSchema, required=True)
    sources = fields.List(fields.Nested(SourceSchema), required=True, metadata={
        "description": "The sources the engine asked, with what each answered; empty when the engine does not "
                       "report them."})
    coverage = fields.Nested(CoverageSchema, required=True, metadata={
        "description": "How many sources were asked, found something or could not answer."})
    partial = fields.Boolean(required=True, metadata={
        "description": "Some sources could not answer: the result may miss what they would have found. "
                       "`POST /api/v1/scan/{scan_id}/rerun` asks them again.", "example": False})
    findings = fields.List(fields.Nested(FindingSchema), required=True, metadata={
        "description": "One per item of `profiles.verified`, `profiles.weak`, `contacts.emails`, "
                       "`contacts.phones` and `breaches`, in that order: its id (for feedback), path, sources, "
                       "confidence and what it matched on."})
    match = fields.Boolean(required=True, metadata={
        "description": "Whether the scan found what its `required` rule asks for (true without a rule). When "
                       "false the result has no items, only its sources, coverage and the codes of its reasons, "
                       "and the scan's creation was refunded.", "example": True})
    filtered = fields.Nested(FilteredSchema, metadata={
        "description": "Only when a `min_confidence` applies (the scan's own, or the read's): what it left out."})


class FailureSchema(ma.Schema):
    code = fields.String(required=True, metadata={"enum": ["engine_failed", "engine_timeout"]})
    message = fields.String(required=True)


class ProgressSchema(ma.Schema):
    recipes_total = fields.Integer(required=True, metadata={"example": 8})
    recipes_done = fields.Integer(required=True, metadata={"example": 3})


# --- responses ---------------------------------------------------------------------

STATUS_DOC = {"enum": ["queued", "running", "completed", "failed"]}
TIME_DOC = {"format": "date-time", "example": "2026-11-21T12:00:00Z"}


WATCH_ID_DOC = {"description": "Only for a watch's scans (its first and every scheduled or requested one since): "
                                "the watch.", "example": "wch_T3JhbmdlIGp1aWNl"}
RERUN_OF_DOC = {"description": "Only for a re-run: the scan whose failed sources it asks again (its result is "
                               "that scan's, completed with the new answers).",
                "example": "scn_8aP2vR5nQx0wLk3mYt7c1d"}


class ScanCreatedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    scan_id = fields.String(required=True, metadata={"example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a scan made with a test key (`service_test_…`), true otherwise.", "example": True})
    kind = fields.String(required=True, metadata=KIND_DOC)
    recipes_to_run = fields.Integer(required=True, metadata={"example": 8})
    eta_seconds = fields.Integer(required=True, metadata={"example": 120})
    rerun_of = fields.String(metadata=RERUN_OF_DOC)
    poll_url = fields.String(required=True, metadata={
        "format": "uri", "example": "https://api.example.com/api/v1/scan/scn_3kT9wQ0vXl2mYp7aRz1b4Q"})


class ScanSchema(ma.Schema):
    """A scan in any state: which optional fields appear depends on ``status`` (D5)."""

    ok = fields.Boolean(required=True, metadata={"example": True})
    scan_id = fields.String(required=True)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a scan made with a test key (`service_test_…`), true otherwise.", "example": True})
    status = fields.String(required=True, metadata=STATUS_DOC)
    target = fields.String(metadata=READ_TARGET_DOC)
    kind = fields.String(required=True, metadata=KIND_DOC)
    purpose = fields.String(required=True, allow_none=True, metadata=READ_PURPOSE_DOC)
    case_ref = fields.String(required=True, allow_none=True, metadata=READ_CASE_REF_DOC)
    created_at = fields.String(required=True, metadata=TIME_DOC)
    min_confidence = fields.Float(metadata={**MIN_CONFIDENCE_DOC, "description": "Only when the scan was created "
                                            "with one: its `min_confidence`."})
    required = fields.String(metadata={**REQUIRED_DOC, "description": "Only when the scan was created with one: "
                                       "its `required` rule."})
    bulk_id = fields.String(metadata={"description": "Only for scans created by a bulk call."})
    watch_id = fields.String(metadata=WATCH_ID_DOC)
    rerun_of = fields.String(metadata=RERUN_OF_DOC)
    eta_seconds = fields.Integer(metadata={"description": "queued/running: remaining seconds, never negative."})
    progress = fields.Nested(ProgressSchema, metadata={"description": "queued/running only."})
    completed_at = fields.String(metadata={**TIME_DOC, "description": "completed only."})
    result = fields.Nested(ResultSchema, metadata={"description": "completed only."})
    failed_at = fields.String(metadata={**TIME_DOC, "description": "failed only."})
    failure = fields.Nested(FailureSchema, metadata={"description": "failed only, until erased."})
    erased_at = fields.String(metadata=ERASED_AT_DOC)


class RejectedSchema(ma.Schema):
    index = fields.Integer(required=True, metadata={"description": "Position in the request's targets."})
    target = fields.String(required=True, allow_none=True)
    kind = fields.String(required=True, allow_none=True)
    error = fields.String(required=True, metadata={
        "enum": ["invalid_request", "target_too_short", "invalid_kind", "invalid_target", "target_suppressed"]})
    message = fields.String(required=True)


class BulkScanEntrySchema(ma.Schema):
    scan_id = fields.String(required=True)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a scan made with a test key (`service_test_…`), true otherwise.", "example": True})
    target = fields.String(required=True)
    kind = fields.String(required=True, metadata=KIND_DOC)
    poll_url = fields.String(required=True, metadata={"format": "uri"})


class BulkCreatedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    bulk_id = fields.String(required=True, metadata={"example": "blk_Q2x0mV8rLk1cYt6nWb3a9g"})
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a batch made with a test key (`service_test_…`), true otherwise.", "example": True})
    total = fields.Integer(required=True, metadata={"description": "Targets submitted."})
    queued = fields.Integer(required=True, metadata={"description": "Targets accepted and queued."})
    rejected = fields.List(fields.Nested(RejectedSchema), required=True)
    scans = fields.List(fields.Nested(BulkScanEntrySchema), required=True)
    aggregate_poll_url = fields.String(required=True, metadata={"format": "uri"})


class BulkScanStateSchema(ma.Schema):
    scan_id = fields.String(required=True)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a scan made with a test key (`service_test_…`), true otherwise.", "example": True})
    status = fields.String(required=True, metadata=STATUS_DOC)
    target = fields.String(metadata=READ_TARGET_DOC)
    kind = fields.String(required=True, metadata=KIND_DOC)
    purpose = fields.String(required=True, allow_none=True, metadata=READ_PURPOSE_DOC)
    case_ref = fields.String(required=True, allow_none=True, metadata=READ_CASE_REF_DOC)
    min_confidence = ScanSchema._declared_fields["min_confidence"]
    required = ScanSchema._declared_fields["required"]
    completed_at = fields.String(metadata={**TIME_DOC, "description": "completed only."})
    result = fields.Nested(ResultSchema, metadata={"description": "completed only."})
    failed_at = fields.String(metadata={**TIME_DOC, "description": "failed only."})
    failure = fields.Nested(FailureSchema, metadata={"description": "failed only, until erased."})
    erased_at = fields.String(metadata=ERASED_AT_DOC)


class BulkStateSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    bulk_id = fields.String(required=True)
    livemode = fields.Boolean(required=True, metadata={
        "description": "false for a batch made with a test key (`service_test_…`), true otherwise.", "example": True})
    total = fields.Integer(required=True, metadata={"description": "Targets submitted."})
    queued = fields.Integer(required=True)
    running = fields.Integer(required=True)
    completed = fields.Integer(required=True)
    failed = fields.Integer(required=True)
    rejected_count = fields.Integer(required=True, metadata={
        "description": "Targets refused when the batch was created: total = queued + running + completed + "
                       "failed + rejected_count."})
    all_done = fields.Boolean(required=True, metadata={"description": "Every scan is completed or failed."})
    scans = fields.List(fields.Nested(BulkScanStateSchema), required=True)


# --- feedback on a finding -------------------------------------------------------------

class FeedbackCreateSchema(ma.Schema):
    class Meta:
        unknown = RAISE

    # Raw: checked by the service, so that every problem is named in one 400 with details.
    verdict = fields.Raw(required=True, metadata={"type": "string", "enum": ["false_positive", "confirmed"],
                                                  "description": "false_positive: this is not the person; "
                                                                 "confirmed: it is.",
                                                  "example": "false_positive"})
    note = fields.Raw(allow_none=True, metadata={"type": "string", "maxLength": 1000,
                                                 "description": "Why, in your words (at most 1000 characters).",
                                                 "example": "Another person with the same name."})


class FeedbackGivenSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    scan_id = fields.String(required=True, metadata={"example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    finding = fields.Nested(FindingSchema, required=True, metadata={
        "description": "The finding with your feedback, as reads of the scan now show it."})


# --- erasure --------------------------------------------------------------------------

class ScanErasedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    scan_id = fields.String(required=True, metadata={"example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})
    erased_at = fields.String(required=True, metadata={
        "format": "date-time", "example": "2026-11-21T09:30:00Z",
        "description": "When the scan was erased (the first time, when it is erased again)."})


class BulkErasedSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    bulk_id = fields.String(required=True, metadata={"example": "blk_Q2x0mV8rLk1cYt6nWb3a9g"})
    erased = fields.Integer(required=True, metadata={
        "description": "The batch's scans that are erased now (by this call or before).", "example": 98})
    in_flight = fields.Integer(required=True, metadata={
        "description": "The batch's scans still queued or running: not erased; erase the batch again once they "
                       "are done.", "example": 2})


# --- the scans list -----------------------------------------------------------------

WAIT_WORDS = (f"Wait up to this many seconds ({WAIT_RANGE[0]} to {WAIT_RANGE[1]}, in digits) for the answer: it "
              "comes as soon as the scan is completed or failed, else after that long with the state then (a key "
              "without the scope `scans:read` gets the creation's answer at once). Each key may have 100 such calls "
              "waiting at once; one more is refused with 429 `rate_limited` and `Retry-After`.")


class WaitSeconds(fields.Integer):
    """``?wait=``, parsed by the one parser of reads and creations (``waits.parse_wait``)."""

    def _deserialize(self, value, attr, data, **kwargs):
        try:
            return parse_wait(value)
        except InvalidRequest as exc:
            raise ma.ValidationError(exc.details["wait"]) from None


class WaitArgs(ma.Schema):
    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    wait = WaitSeconds(metadata={"description": WAIT_WORDS, "example": 30, "minimum": WAIT_RANGE[0],
                                 "maximum": WAIT_RANGE[1]})



class ScanListQuerySchema(ma.Schema):
    class Meta:
        unknown = RAISE  # an unknown query parameter is a 400 naming it

    status = fields.String(validate=ma.validate.OneOf(["queued", "running", "completed", "failed"]),
                           metadata={"description": "Only scans in this state.", "example": "completed"})
    kind = fields.String(validate=ma.validate.OneOf(["email", "phone", "username"]),
                         metadata={"description": "Only scans of this kind.", "example": "email"})
    # Ids are a prefix and URL-safe characters: anything else (a NUL byte PostgreSQL cannot even
    # compare) is a 400, not a query.
    bulk_id = fields.String(validate=[ma.validate.Length(min=1, max=40), ma.validate.Regexp(r"^[A-Za-z0-9_-]+$")],
                            metadata={"pattern": "^[A-Za-z0-9_-]+$",
                                      "description": "Only the scans of this bulk batch.",
                                      "example": "blk_Q2x0mV8rLk1cYt6nWb3a9g"})
    created_after = UtcDateTime(metadata={
        "description": "Only scans created after this time (ISO 8601; UTC when no offset is given).",
        "example": "2026-11-21T00:00:00Z"})
    created_before = UtcDateTime(metadata={
        "description": "Only scans created before this time (ISO 8601; UTC when no offset is given).",
        "example": "2026-11-22T00:00:00Z"})
    limit = fields.Integer(load_default=20, validate=ma.validate.Range(min=1, max=100), metadata={
        "description": "Page size, 1 to 100.", "example": 20})
    starting_after = fields.String(validate=[ma.validate.Length(min=1, max=40),
                                             ma.validate.Regexp(r"^[A-Za-z0-9_-]+$")], metadata={
        "pattern": "^[A-Za-z0-9_-]+$",
        "description": "The last `scan_id` of the previous page: the page starts with the scan created just "
                       "before it. A well-formed id that is not one of your scans (of the calling key's mode) is "
                       "refused with 400 `invalid_request`, as a malformed one is.",
        "example": "scn_3kT9wQ0vXl2mYp7aRz1b4Q"})


class ScanListEntrySchema(BulkScanStateSchema):
    created_at = fields.String(required=True, metadata=TIME_DOC)
    bulk_id = fields.String(metadata={"description": "Only for scans created by a bulk call."})
    watch_id = fields.String(metadata=WATCH_ID_DOC)


class ScanListSchema(ma.Schema):
    ok = fields.Boolean(required=True, metadata={"example": True})
    data = fields.List(fields.Nested(ScanListEntrySchema), required=True, metadata={
        "description": "Newest first."})
    has_more = fields.Boolean(required=True, metadata={
        "description": "More scans follow: ask again with `starting_after` = the last `scan_id` of `data`."})


# --- webhook bodies (documented only) -------------------------------------------------

def _webhook_body_schema(kind: events.EventKind, *, thin: bool = False) -> type[ma.Schema]:
    """The body schema of an event kind: ``event``, then the registry's fields (a thin body's
    only) with the read's own field definitions (ScanSchema), required unless optional, the
    status the event reports."""
    read = ScanSchema._declared_fields
    declared = {"event": fields.String(required=True, metadata={"enum": [kind.name]})}
    for name in kind.body_fields(thin=thin):
        field = copy.deepcopy(read[name])
        field.required = name not in events.OPTIONAL_FIELDS
        if name == "status":
            field.metadata = {"enum": [kind.status]}
        declared[name] = field
    return ma.Schema.from_dict(declared, name=kind.schema + ("Thin" if thin else ""))


# The body schema of each event kind (app.events.kinds names the component), full and thin, for the
# OpenAPI document.
WEBHOOK_BODY_SCHEMAS = {kind.schema: _webhook_body_schema(kind) for kind in events.EVENTS}
WEBHOOK_BODY_SCHEMAS.update({f"{kind.schema}Thin": _webhook_body_schema(kind, thin=True) for kind in events.EVENTS})
