"""The webhook events, in one registry: each kind's name, when it fires, the OpenAPI schema of
its body and the sentence customers read. Services (who sends what), schemas and the OpenAPI
document (enums, the callback's bodies), the portal (filters) and metrics all read it; the Python
client keeps its own copy, which a test holds equal to this one.

A new kind is an entry here, its body's schema, and the place that fires it (a call to
``services.webhooks.record_event``). The scan's final status says which final event fires
(``for_final_status``). This module imports nothing of the app, so that every layer may use it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EventKind:
    name: str          # the ``event`` of the body and the X-Service-Event header
    fires: str         # when it is sent, as customers read it
    schema: str        # the OpenAPI component of its body
    final_status: str  # the scan status it reports


SCAN_COMPLETED = EventKind("scan.completed", "a scan completed: the body carries its result", "WebhookCompleted",
                           "completed")
SCAN_FAILED = EventKind("scan.failed", "a scan failed: the body carries the failure's code and message",
                        "WebhookFailed", "failed")

EVENTS: tuple[EventKind, ...] = (SCAN_COMPLETED, SCAN_FAILED)
NAMES: tuple[str, ...] = tuple(kind.name for kind in EVENTS)


def for_final_status(status: str) -> EventKind:
    """The event a scan that just reached ``status`` sends."""
    for kind in EVENTS:
        if kind.final_status == status:
            return kind
    raise ValueError(f"no event reports a scan {status!r}")
