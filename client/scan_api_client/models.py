"""Typed results: every answer of the API as a dataclass.

Each object is built from the JSON body by ``from_dict``, which takes the fields it knows
(nested objects become their own dataclasses), leaves absent ones ``None`` (or empty), ignores
fields it does not know, and keeps the whole body on ``raw``: a newer service adding a field
breaks nothing, and ``raw`` still has it.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "Account",
    "Artifacts",
    "Batch",
    "Breach",
    "Contacts",
    "Counts",
    "Coverage",
    "Delivery",
    "DeliveryAttempt",
    "Failure",
    "Feedback",
    "Filtered",
    "Finding",
    "KeyAccess",
    "Page",
    "PhoneProfile",
    "Profile",
    "Profiles",
    "Progress",
    "Reason",
    "Rejected",
    "Result",
    "Risk",
    "Scan",
    "Source",
    "Watch",
    "WatchBatch",
    "WatchChanges",
    "WebhookEvent",
    "Windows",
]


def _build(tp: Any, value: Any) -> Any:
    """``value`` (parsed JSON) as type ``tp``: dataclasses, ``list[X]``, ``X | None``, or as it is."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_build(item, v) for v in value] if isinstance(value, list) else value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp.from_dict(value) if isinstance(value, dict) else value
    return value


class _Model:
    """``from_dict`` for the dataclasses below."""

    @classmethod
    def from_dict(cls, data: dict):
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__} is built from a JSON object, not {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name == "raw":
                values["raw"] = data
            elif f.name in data:
                values[f.name] = _build(hints[f.name], data[f.name])
        return cls(**values)


@dataclass
class Reason(_Model):
    """One part of the score: its points (all reasons add up to the score) and the findings behind it."""

    code: str = ""
    points: int = 0
    description: str = ""
    finding_ids: list[str] = field(default_factory=list)


@dataclass
class Risk(_Model):
    score: int | None = None
    band: str | None = None  # low, medium, high, critical
    reasons: list[Reason] = field(default_factory=list)  # empty when the engine explained nothing


@dataclass
class Counts(_Model):
    cases: int = 0
    entities: int = 0
    findings: int = 0


@dataclass
class Profile(_Model):
    platform: str = ""
    url: str = ""
    handle: str = ""
    display_name: str = ""
    confidence: float = 0.0


@dataclass
class Profiles(_Model):
    verified: list[Profile] = field(default_factory=list)
    weak: list[Profile] = field(default_factory=list)


@dataclass
class Contacts(_Model):
    emails: list[str] = field(default_factory=list)
    phones: list[str] = field(default_factory=list)


@dataclass
class Breach(_Model):
    name: str = ""
    date: str = ""  # YYYY-MM
    accounts: int = 0
    classes: list[str] = field(default_factory=list)


@dataclass
class PhoneProfile(_Model):
    e164: str = ""
    country_code: int | None = None
    region: str | None = None
    carrier: str = ""
    line_type: str = ""
    valid: bool = False
    timezones: list[str] = field(default_factory=list)


@dataclass
class Artifacts(_Model):
    pdf: str = ""
    person_card: str = ""


FAILED_SOURCE_STATUSES = ("error", "rate_limited", "timeout")
FEEDBACK_VERDICTS = ("false_positive", "confirmed")


@dataclass
class Source(_Model):
    """A source the engine asked: ``status`` is found, not_found, error, rate_limited, timeout or skipped."""

    id: str = ""
    name: str = ""
    status: str = ""
    checked_at: str | None = None
    latency_ms: int | None = None

    @property
    def failed(self) -> bool:
        """It could not answer: a re-run asks it again."""
        return self.status in FAILED_SOURCE_STATUSES


@dataclass
class Coverage(_Model):
    checked: int = 0  # sources asked (not skipped)
    found: int = 0
    failed: int = 0  # error, rate-limited or timed out
    ratio: float = 1.0  # (checked - failed) / checked; 1 when none was asked


@dataclass
class Feedback(_Model):
    verdict: str = ""  # false_positive or confirmed
    note: str = ""
    at: str | None = None
    # The scan it was given on: this one, or an earlier scan of the same target (feedback follows
    # a finding, whose id is the same in every scan of the target).
    scan_id: str | None = None


@dataclass
class Finding(_Model):
    """One item of the result (``path``, e.g. ``breaches[0]``), with the sources that found it. Its
    ``id`` is the same in every scan of the same target (whatever the item's place)."""

    id: str = ""
    path: str = ""
    source_ids: list[str] = field(default_factory=list)
    # How sure it is that the item is the person's (0 to 1): your feedback (1 confirmed, 0 false
    # positive), else the engine's estimate, else a base per kind of item; and what tied it to the target.
    confidence: float | None = None
    matched_on: list[str] = field(default_factory=list)
    feedback: Feedback | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Filtered(_Model):
    """What a ``min_confidence`` left out of a result: the minimum applied and how many findings."""

    min_confidence: float = 0.0
    findings_left_out: int = 0
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Result(_Model):
    """The investigation's result: always complete once the scan is ``completed``.

    ``sources``, ``coverage``, ``partial``, ``findings`` and ``risk.reasons`` explain it: empty
    (and ``partial`` False) when the engine reports no sources.
    """

    risk: Risk = field(default_factory=Risk)
    counts: Counts = field(default_factory=Counts)
    profiles: Profiles = field(default_factory=Profiles)
    contacts: Contacts = field(default_factory=Contacts)
    breaches: list[Breach] = field(default_factory=list)
    phone_profile: PhoneProfile | None = None
    ai_summary: str = ""
    artifacts: Artifacts = field(default_factory=Artifacts)
    sources: list[Source] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    partial: bool = False
    findings: list[Finding] = field(default_factory=list)
    # False when the scan did not find what its ``required`` rule asked: no items, its creation refunded.
    match: bool = True
    filtered: Filtered | None = None  # set when a min_confidence left findings out
    raw: dict = field(default_factory=dict, repr=False)

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)

    def item(self, finding: Finding) -> Any:
        """The item of the result a finding names (a Profile, an e-mail, a phone or a Breach)."""
        name, _, index = finding.path.rstrip("]").partition("[")
        group, _, member = name.partition(".")
        items = getattr(getattr(self, group), member) if member else getattr(self, group)
        return items[int(index)]

    @property
    def failed_sources(self) -> list[Source]:
        return [s for s in self.sources if s.failed]


@dataclass
class Failure(_Model):
    code: str = ""  # engine_failed, engine_timeout
    message: str = ""


@dataclass
class Progress(_Model):
    recipes_total: int = 0
    recipes_done: int = 0


@dataclass
class Scan(_Model):
    """A scan: from its creation (``recipes_to_run``, ``poll_url``), a read, a list or a batch.

    Which fields are set depends on ``status``: ``eta_seconds`` and ``progress`` while queued or
    running, ``completed_at`` and ``result`` once completed, ``failed_at`` and ``failure`` once failed.
    An erased scan (``erased``) keeps its status and times but has no ``target``, ``result`` or ``failure``.
    ``livemode`` is False for scans made with a test key.
    """

    scan_id: str = ""
    status: str = "queued"
    target: str | None = None
    kind: str | None = None
    purpose: str | None = None  # why the scan was made, as given at creation (or None)
    case_ref: str | None = None  # the case reference given at creation (or None)
    created_at: str | None = None
    min_confidence: float | None = None  # as given at creation (or None)
    required: str | None = None  # the match rule given at creation (or None)
    bulk_id: str | None = None
    rerun_of: str | None = None  # the scan this one re-runs the failed sources of
    watch_id: str | None = None  # the watch a run (``watches.run``) made it for
    livemode: bool | None = None
    eta_seconds: int | None = None
    progress: Progress | None = None
    recipes_to_run: int | None = None
    poll_url: str | None = None
    completed_at: str | None = None
    result: Result | None = None
    failed_at: str | None = None
    failure: Failure | None = None
    # Set once the scan was erased (on request or when the account's retention ended): its
    # target, result and failure are then None; ids, times and purpose stay.
    erased_at: str | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        """Completed or failed: it will not change any more."""
        return self.status in ("completed", "failed")

    @property
    def erased(self) -> bool:
        """Its target and result (or failure) were erased: only ids, times and purpose are left."""
        return self.erased_at is not None


@dataclass
class Rejected(_Model):
    """A bulk target refused at creation; ``index`` is its position in the request."""

    index: int = 0
    target: str | None = None
    kind: str | None = None
    error: str = ""
    message: str = ""


@dataclass
class Batch(_Model):
    """A bulk batch: its creation answer (``rejected``, ``aggregate_poll_url``) or its aggregate read
    (counts by status, ``rejected_count``, ``all_done``). ``scans`` in both."""

    bulk_id: str = ""
    total: int = 0
    queued: int = 0
    running: int | None = None
    completed: int | None = None
    failed: int | None = None
    rejected_count: int | None = None
    all_done: bool | None = None
    livemode: bool | None = None
    scans: list[Scan] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    aggregate_poll_url: str | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict):
        batch = super().from_dict(data)
        for scan in batch.scans:  # the entries of a batch are of its mode, which only the batch states
            if isinstance(scan, Scan) and scan.livemode is None:
                scan.livemode = batch.livemode
        return batch


@dataclass
class DeliveryAttempt(_Model):
    attempt: int = 0
    at: str | None = None
    outcome: str | None = None  # in_progress while the request is under way, then succeeded or failed
    http_status: int | None = None
    error: str | None = None
    duration_ms: int | None = None


@dataclass
class Event(_Model):
    """An event of your scans (``GET /api/v1/events``, the events stream): its id (a later event
    always has a larger one), kind, time, mode and the body a webhook endpoint receives."""

    event_id: str = ""
    event: str = ""
    created_at: str | None = None
    livemode: bool | None = None
    body: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def scan_id(self) -> str | None:
        return self.body.get("scan_id")


@dataclass
class Delivery(_Model):
    """A webhook delivery: its attempts (oldest first) and the exact ``body`` that is or was sent.

    ``body`` is the JSON text exactly as every attempt sends it (the bytes its signatures cover);
    ``payload`` is that body parsed, and ``scan`` the scan it describes. ``scan_id`` is None for a
    test event sent from the key's page; ``next_attempt_at`` is when the next attempt is due while
    ``pending``, None once finished.
    """

    delivery_id: str = ""
    endpoint_id: str | None = None  # the webhook endpoint it was sent to
    event: str = ""
    scan_id: str | None = None
    livemode: bool | None = None
    # pending, succeeded, failed, skipped (its endpoint was disabled; recover sends it), cancelled (its
    # scan was erased, or its endpoint deleted, before it was sent)
    status: str = ""
    created_at: str | None = None
    attempts: list[DeliveryAttempt] = field(default_factory=list)
    next_attempt_at: str | None = None  # while pending; None once finished
    body: str | None = None  # None once its scan was erased
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def payload(self) -> dict:
        """The body as a dict (empty when there is none)."""
        if isinstance(self.body, dict):
            return self.body
        return json.loads(self.body) if self.body else {}

    @property
    def scan(self) -> Scan:
        """The scan the body describes (its final state when the event was sent)."""
        return Scan.from_dict(self.payload)


@dataclass
class Endpoint(_Model):
    """A webhook endpoint of the key: where its events go, which ones, in what body. ``secret`` is
    set only in the answer that created it (or rolled its secret), never on a read."""

    endpoint_id: str = ""
    url: str = ""
    events: list[str] = field(default_factory=list)
    payload: str = "full"  # full, or thin (no target, result or failure message)
    enabled: bool = True
    description: str = ""
    disabled_at: str | None = None  # when it was disabled after failing for days
    secret_rotation_ends_at: str | None = None
    secret: str | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class ActivityEntry(_Model):
    """One entry of the activity log: an API call (``key_id``) or a portal action (``user_email``),
    its ``status``, the ``credits`` it cost, where it came from and the object it named."""

    activity_id: str = ""
    created_at: str | None = None
    livemode: bool | None = None
    action: str = ""  # scan.create, scan.read, scans.list, portal.login, ...
    key_id: str | None = None
    user_id: str | None = None
    user_email: str | None = None
    resource_id: str | None = None
    status: int = 0
    credits: int = 0
    client_address: str | None = None
    request_id: str | None = None
    purpose: str | None = None
    case_ref: str | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Windows(_Model):
    """Scans in flight, created in the last hour and in the last 24 hours (or the limits of each)."""

    inflight: int = 0
    hour: int = 0
    day: int = 0


@dataclass
class KeyAccess(_Model):
    """What the key that made the call may do: its ``scopes`` (``scans:write``, ``scans:read``,
    ``scans:erase``, ``webhooks``, ``activity:read``), ``expires_at`` (None: never) and
    ``allowed_ips`` (CIDR blocks; None: anywhere)."""

    key_id: str = ""
    livemode: bool | None = None
    scopes: list[str] = field(default_factory=list)
    expires_at: str | None = None
    allowed_ips: list[str] | None = None


@dataclass
class Account(_Model):
    """``GET /api/v1/account``: the balance after that call, the limits and the usage against them
    (a test key: its own test scans), and the calling key's access."""

    customer_id: str = ""
    tier: str = ""
    balance: int = 0
    limits: Windows | None = None
    usage: Windows | None = None
    key: KeyAccess | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class SourceHealth(_Model):
    """``GET /api/v1/sources``: one source the investigations consult and its health over the last
    hour. ``status``: healthy, degraded, down or broken; ``quarantined``: left out of new scans (they
    list it as skipped with ``reason: "quarantined"``) until it is back."""

    id: str = ""
    name: str = ""
    kinds: list[str] = field(default_factory=list)
    status: str = ""
    since: str | None = None
    answered_ratio: float | None = None
    p95_latency_ms: int | None = None
    last_probe_at: str | None = None
    last_probe_ok: bool | None = None
    quarantined: bool = False
    raw: dict = field(default_factory=dict, repr=False)


WATCH_INTERVALS = ("daily", "weekly", "monthly")
WATCH_STATUSES = ("active", "paused", "ended")


@dataclass
class WatchChanges(_Model):
    """What a watch's scan changed against its previous one: finding ids ``added`` and ``removed``
    (a finding keeps its id across the scans of a target) and ``risk`` ``{from: {score, band},
    to: {score, band}}``."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    risk: dict = field(default_factory=dict)


@dataclass
class Watch(_Model):
    """A watch: a target scanned again every ``interval`` (daily, weekly, monthly), its changes
    announced by ``watch.changed`` events. ``status`` is active, paused or ended; ``next_scan_at``
    is None unless active; ``last_error`` says why the last scheduled scan could not be made;
    ``last_changes`` is what the last change found. In a bulk creation's answer, ``index`` is the
    position of its target in the request."""

    watch_id: str = ""
    livemode: bool | None = None
    target: str | None = None
    kind: str | None = None
    interval: str = ""
    status: str = ""
    purpose: str | None = None
    case_ref: str | None = None
    created_at: str | None = None
    next_scan_at: str | None = None
    last_scan_id: str | None = None
    last_change_at: str | None = None
    last_error: str | None = None
    last_changes: WatchChanges | None = None
    min_confidence: float | None = None  # given to each of its scans (or None)
    required: str | None = None
    index: int | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class WatchBatch(_Model):
    """A bulk creation of watches: the ``watches`` created (in request order, each with its
    ``index``), the ``rejected`` targets with why (free of charge), and ``bulk_id``, the batch of
    the watches' first scans."""

    bulk_id: str | None = None
    livemode: bool | None = None
    total: int = 0
    created: int = 0
    watches: list[Watch] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Page:
    """One page of a list: ``data`` and whether more follow (``has_more``)."""

    data: list
    has_more: bool
    raw: dict = field(default_factory=dict, repr=False)

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


@dataclass
class WebhookEvent:
    """A verified webhook: ``event`` (``scan.completed`` or ``scan.failed``), its delivery id and the scan."""

    event: str
    delivery_id: str | None
    scan: Scan
    livemode: bool | None = None
    raw: dict = field(default_factory=dict, repr=False)
