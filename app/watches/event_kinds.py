"""The watches' event kinds (D28): a change found, a watch paused after three intervals without a
scan, a watch ended by an opt-out. Their bodies are ``app.watches.watch_changes``'; their OpenAPI
schemas (``app.watches.schemas``) and the document's text follow from ``WATCH_KINDS``. Declared to
the registry (``app.events.kinds``) by ``app.declared``."""
from __future__ import annotations

from dataclasses import dataclass

from app.events.kinds import Kind

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

KINDS = tuple(Kind(kind.name, personal=frozenset(WATCH_PERSONAL_FIELDS)) for kind in WATCH_KINDS)
