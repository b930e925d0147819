"""The webhook events, in one registry: each kind's name, when it fires, the scan status it
reports and the fields of the scan its body carries. The body (``app.webhooks.outbox.event_body``
picks those fields from the scan's read), the body's OpenAPI schema (``app.scans.schemas``
builds it from the read's own fields), the document's text, the portal's filters and the
metrics all come from here.

A new kind is one entry here and one call where it fires (``app.webhooks.outbox.record_event``
with the kind). This module imports nothing of the app, so that every layer may use it.
"""
from __future__ import annotations

from dataclasses import dataclass

# The fields of a scan's read every event body starts with, in this order (after ``event``).
SCAN_FIELDS = ("scan_id", "bulk_id", "watch_id", "rerun_of", "livemode", "target", "kind", "status", "purpose",
               "case_ref")
# Absent unless the scan has one (a batch, a watch, a re-run's first).
OPTIONAL_FIELDS = frozenset({"bulk_id", "watch_id", "rerun_of"})
# A thin body (D20: a key's ``webhook_payload`` "thin") carries no personal data: these fields of
# the full one, and the receiver reads the rest through the API.
THIN_FIELDS = frozenset({"scan_id", "bulk_id", "watch_id", "rerun_of", "livemode", "status", "purpose", "case_ref",
                         "completed_at", "failed_at", "created_at"})
PAYLOADS = ("full", "thin")


@dataclass(frozen=True)
class EventKind:
    name: str                # the ``event`` of the body and the X-Service-Event header
    fires: str               # when it is sent, as customers read it
    schema: str              # the OpenAPI component of its body
    status: str              # the scan status it reports
    fields: tuple[str, ...]  # the fields of the scan's read the body carries, in order

    def body(self, scan_read: dict, *, thin: bool = False) -> dict:
        """The event's body from a scan's read body (``app.scans.reads.scan_view``); ``thin``:
        only its ``THIN_FIELDS``."""
        picked = {name: scan_read[name] for name in self.body_fields(thin=thin) if name in scan_read}
        return {"event": self.name, **picked}

    def body_fields(self, *, thin: bool = False) -> tuple[str, ...]:
        """The fields of its body, in order: all, or (``thin``) the thin body's."""
        return tuple(name for name in self.fields if not thin or name in THIN_FIELDS)


SCAN_COMPLETED = EventKind("scan.completed", "a scan completed: the body carries its result", "WebhookCompleted",
                           "completed", (*SCAN_FIELDS, "completed_at", "result"))
SCAN_FAILED = EventKind("scan.failed", "a scan failed: the body carries the failure's code and message",
                        "WebhookFailed", "failed", (*SCAN_FIELDS, "failed_at", "failure"))

# D22: sent once, when the engine starts work; only to the endpoints that list it. D26: always before
# the final event (``states.record_finals`` sends it first for a scan no look saw running).
SCAN_RUNNING = EventKind("scan.running", "the engine started work on a scan (sent only to endpoints that list it; "
                         "a scan that ends before it was seen running gets it just before its final event)",
                         "WebhookRunning", "running", (*SCAN_FIELDS, "created_at", "eta_seconds"))

EVENTS: tuple[EventKind, ...] = (SCAN_COMPLETED, SCAN_FAILED, SCAN_RUNNING)
NAMES: tuple[str, ...] = tuple(kind.name for kind in EVENTS)
# D22: an event about the key's endpoints, not about a scan (its body is ``app.webhooks.endpoints``').
ENDPOINT_DISABLED = "endpoint.disabled"
# D28: events about a watch (their bodies are ``app.watches.watch_changes``'): a change found, a watch
# paused after three intervals without a scan, a watch ended by an opt-out.
WATCH_CHANGED = "watch.changed"
WATCH_PAUSED = "watch.paused"
WATCH_ENDED = "watch.ended"
# The fields every watch event's body starts with (after ``event``), and what its full body adds to
# its thin one (D20: the person's target and what was found), last.
WATCH_FIELDS = ("watch_id", "livemode", "purpose", "case_ref")
WATCH_PERSONAL_FIELDS: tuple[str, ...] = ("target", "kind", "added_items")


@dataclass(frozen=True)
class WatchEventKind:
    name: str                # the ``event`` of the body and the X-Service-Event header
    fires: str               # when it is sent, as customers read it
    schema: str              # the OpenAPI component of its body
    fields: tuple[str, ...]  # the fields of its full body after ``event``, in order

    def body_fields(self, *, thin: bool = False) -> tuple[str, ...]:
        return tuple(name for name in self.fields if not thin or name not in WATCH_PERSONAL_FIELDS)


WATCH_KINDS: tuple[WatchEventKind, ...] = (
    WatchEventKind(WATCH_CHANGED, "a watch's scan found a finding added or removed, or the risk band changed, "
                   "against the watch's previous scan: the body lists them", "WebhookWatchChanged",
                   (*WATCH_FIELDS, "scan_id", "previous_scan_id", "changes", "target", "kind", "added_items")),
    WatchEventKind(WATCH_PAUSED, "a watch was paused after three intervals without a scan it could make (balance, "
                   "limits or its key): the body says why", "WebhookWatchPaused",
                   (*WATCH_FIELDS, "reason", "last_error", "target", "kind")),
    # No target: the watch forgot it when the person opted out (D25).
    WatchEventKind(WATCH_ENDED, "a watch ended because the person opted out of lookups", "WebhookWatchEnded",
                   (*WATCH_FIELDS, "reason", "kind")),
)
WATCH_EVENTS: tuple[str, ...] = tuple(kind.name for kind in WATCH_KINDS)


def thin_watch_body(body: dict) -> dict:
    """A watch event's thin body: its full body without the personal fields."""
    return {name: value for name, value in body.items() if name not in WATCH_PERSONAL_FIELDS}


def thin_body(body: dict) -> dict:
    """The thin body (D20) of any event's full body, by the rule of its kind: a scan event's thin
    fields, a watch event without its personal fields; an event about the key is its own."""
    name = body.get("event")
    for kind in EVENTS:
        if kind.name == name:
            return kind.body(body, thin=True)
    return thin_watch_body(body) if name in WATCH_EVENTS else body


# D30: events about one of the engine's sources, not about a customer's scan: its status changed
# (worse: degraded; back to healthy: recovered). Bodies ``{event, source_id, name, status,
# previous_status, at}`` (``app.sources.health``), no personal data; only to endpoints and
# streams that list them (``app.webhooks.outbox.record_service_event``).
SOURCE_DEGRADED = "source.degraded"
SOURCE_RECOVERED = "source.recovered"
SOURCE_EVENTS: tuple[str, ...] = (SOURCE_DEGRADED, SOURCE_RECOVERED)

# Events about a person the customer holds scans of (bodies: ``app.privacy.subjects``'), one per
# customer and mode, to every endpoint of its keys that lists it: ``{event, scan_ids, at}``, never the
# target. Sent only to endpoints that list them (like every kind but the default two), always in the feed.
SUBJECT_OPTED_OUT = "subject.opted_out"  # the person opted out: delete your own copies of these scans
SUBJECT_ERASED = "subject.erased"  # the person's scans were erased at their request
SUBJECT_EVENTS: tuple[str, ...] = (SUBJECT_OPTED_OUT, SUBJECT_ERASED)

# Every event a delivery may carry: what an endpoint may list and the deliveries' filters take.
DELIVERY_EVENTS: tuple[str, ...] = (*NAMES, ENDPOINT_DISABLED, *WATCH_EVENTS, *SOURCE_EVENTS, *SUBJECT_EVENTS)


def for_status(status: str) -> EventKind:
    """The event a scan that just reached ``status`` sends."""
    for kind in EVENTS:
        if kind.status == status:
            return kind
    raise ValueError(f"no event reports a scan {status!r}")
