"""The webhook events, in one registry: the scans' own kinds (each one's name, when it fires,
the scan status it reports and the fields of the scan its body carries) and the kinds the other
domains declare in their own packages (``Kind``: the watches', the sources', the privacy's, the
key's endpoints'). The scans' bodies (``app.webhooks.outbox.event_body`` picks those fields from
the scan's read), their OpenAPI schemas (``app.scans.schemas`` builds them from the read's own
fields), the lists an endpoint, a filter or the portal offers, the thin bodies and the metrics'
series all come from here.

A new scan kind is one entry here and one call where it fires (``app.webhooks.outbox.record_event``
with the kind); a new kind of another domain is one entry in that domain's ``event_kinds`` module
and one call where it fires, in the same package. This module imports nothing of the app but the
plumbing's registry, so that every layer may use it; ``app.declared``, which ``import app`` runs
first, declares the other domains' kinds to it (``REGISTRY``) before any module can read them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from app.plumbing.registry import Registry

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


@dataclass(frozen=True)
class Kind:
    """An event kind a domain other than the scans' declares, in a module of its own package
    (``app/<domain>/event_kinds.py``, e.g. the watches' or the privacy's), with its body built
    where it fires; ``app.declared`` hands every one of them to ``REGISTRY.declare``."""
    name: str                                # the ``event`` of the body and the X-Service-Event header
    personal: frozenset[str] = frozenset()   # the fields of its full body its thin body (D20) leaves out
    in_default_feed: bool = True             # in the events list and stream asked for no ``events=``


# The kinds the other domains declare, in the order customers read them (``app.declared`` declares them).
REGISTRY: Registry[Kind] = Registry("event kinds", lambda kind: kind.name)


def declared() -> tuple[Kind, ...]:
    """The kinds the other domains declared."""
    return REGISTRY.items()


# What follows from the declared kinds is worked out once: they do not change once declared (a read
# before that raises, and is not remembered). The filters and the thin bodies ask on every call.
@functools.cache
def delivery_events() -> tuple[str, ...]:
    """Every event a delivery may carry: what an endpoint may list and the deliveries' and the
    feed's filters take, the scans' first."""
    return (*NAMES, *(kind.name for kind in declared()))


@functools.cache
def default_feed_events() -> tuple[str, ...]:
    """The kinds a list or stream holds when it names none (the sources' only where asked for, D30)."""
    return (*NAMES, *(kind.name for kind in declared() if kind.in_default_feed))


def thin_body(body: dict) -> dict:
    """The thin body (D20) of any event's full body, by the rule of its kind: a scan event's thin
    fields, another kind's body without its personal fields (most have none: the same body)."""
    name = body.get("event", "")
    for kind in EVENTS:
        if kind.name == name:
            return kind.body(body, thin=True)
    personal = _personal_fields().get(name)
    return {field: value for field, value in body.items() if field not in personal} if personal else body


@functools.cache
def _personal_fields() -> dict[str, frozenset[str]]:
    """Each declared kind's personal fields, by its name (only those that have some)."""
    return {kind.name: kind.personal for kind in declared() if kind.personal}


@functools.cache
def thinned() -> frozenset[str]:
    """The kinds whose thin body differs from their full one."""
    return frozenset((*NAMES, *_personal_fields()))


def for_status(status: str) -> EventKind:
    """The event a scan that just reached ``status`` sends."""
    for kind in EVENTS:
        if kind.status == status:
            return kind
    raise ValueError(f"no event reports a scan {status!r}")
