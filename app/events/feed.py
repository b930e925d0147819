"""The event feed (D27): every event a customer's scans produce, stored once per customer and
mode whether or not an endpoint or a stream wants it, so that the events list, the stream and
the webhook endpoints agree.

``record`` runs in the transaction of the state change (``outbox._record`` calls it with the
full body whose bytes a full delivery sends too); a thin body is derived from the stored full
one by the registry's one rule (``events.thin_body``). Erasure (D20) leaves an
erased scan's events their thin bodies; retention removes events after ``DELIVERY_RETENTION_DAYS``.
Event ids are the stored numbers sealed (``event_id``): the numbers increase in commit order
(``app.events.statements.stored``) across customers, the ids a customer sees reveal neither them nor their order.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.events import kinds as events
from app.events import waits
from app.events.statements import stored as store
from app.plumbing import crypto, runtime
from app.plumbing.db import release_connection, transaction
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import iso, utcnow
from app.plumbing.rawjson import RawJSON

PREFIX = "evt_"
EXAMPLE_ID = "evt_6f1c2a9e0b4d47c8a3e5f7d9b1c3e5a7"
LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT = 20, 100
RETENTION_BATCH = 1000
PAYLOADS = events.PAYLOADS
# The kinds a list or stream without ``events=`` holds: all but the sources' (D30, never by default).
DEFAULT_KINDS = events.default_feed_events()
_THINNED = events.thinned()  # the kinds whose thin body differs


def event_id(number: int) -> str:
    """The id customers see of stored event ``number``: sealed (``crypto.seal_number``), as the
    numbers are one sequence across customers, which would show each how busy the others are."""
    return f"{PREFIX}{crypto.seal_number(number)}"


def parse_event_id(text: str, what: str) -> int:
    """The number of an event id ``evt_...`` this service gave; ``InvalidRequest`` naming
    ``what`` otherwise (a made-up or altered id, or one given under another ``SECRET_KEY``)."""
    number = crypto.open_number(text.removeprefix(PREFIX)) if text.startswith(PREFIX) else None
    if number is None:
        raise InvalidRequest(f"{what} must be an event id this service gave, such as {EXAMPLE_ID}",
                             details={what: ["not an event id"]})
    return number


NewEvent = store.NewEvent


def record(new: Sequence[store.NewEvent], now: datetime | None = None) -> list[int]:
    """Store events, each with its full body's text, in the caller's transaction and in that order
    (``outbox._record``, the one path of every event); their ids. Inside ``stored_last`` they
    are stored at its end: no ids yet."""
    held = getattr(_held, "events", None)
    if held is None:
        return store.add(list(new), now or utcnow())
    held.extend((event, now or utcnow()) for event in new)
    return []


_held = threading.local()  # the events a ``stored_last`` block of this thread holds back


@contextmanager
def stored_last() -> Iterator[None]:
    """The events recorded in the block are stored when it ends (in its transaction, one
    statement, in the order recorded): storing them takes their customers' event lock, held to
    the commit (``app.events.statements.stored``), so a transaction that stores them last holds it for that
    statement and its commit only, not for its other work; one customer's transactions then do
    that work side by side. A block inside another leaves them to the outer one. Nothing in the
    block may roll back a savepoint and go on: its events would be stored all the same."""
    if getattr(_held, "events", None) is not None:
        yield
        return
    _held.events = []
    try:
        yield
        held, _held.events = _held.events, None
        store.add([event for event, _ in held], [at for _, at in held])
    finally:
        _held.events = None


def thin_body(kind_name: str, body: str) -> str:
    """The thin body (no personal data, D20) of a stored full body, by its kind's rule
    (``events.thin_body``); an event about the key is its own thin body."""
    if kind_name not in _THINNED:
        return body
    return json.dumps(events.thin_body(json.loads(body)), separators=(",", ":"))


def check_filters(*, events_filter: str | None = None, scan_id: str | None = None, bulk_id: str | None = None,
                  watch_id: str | None = None, payload: str | None = None) -> tuple[store.Filters, bool]:
    """The list's and the stream's filters (``events``: comma-separated kinds) and whether the
    bodies are thin; ``InvalidRequest`` for a kind or payload that does not exist."""
    # Without ``events``, every kind but those about the service's sources, which go only where asked for.
    kinds: tuple[str, ...] | None = DEFAULT_KINDS
    if events_filter is not None:
        kinds = tuple(name.strip() for name in events_filter.split(",") if name.strip())
        unknown = [name for name in kinds if name not in events.delivery_events()]
        if unknown or not kinds:
            raise InvalidRequest(f"events must be a comma-separated list of {', '.join(events.delivery_events())}",
                                 details={"events": ["unknown event kind"]})
    if payload is not None and payload not in PAYLOADS:
        raise InvalidRequest(f"payload must be one of {', '.join(PAYLOADS)}", details={"payload": ["not valid"]})
    # No id holds a NUL (PostgreSQL cannot compare one) or is that long: such a filter matches nothing.
    nothing = any(value is not None and ("\x00" in value or len(value) > 40) for value in (scan_id, bulk_id, watch_id))
    return store.Filters(kinds, scan_id, bulk_id, watch_id, nothing=nothing), payload == "thin"


def entry(row: tuple, *, thin: bool) -> dict:
    """An event as the list shows it; its body spliced in as stored (or thinned)."""
    number, kind, created_at, livemode, body = row
    return {"event_id": event_id(number), "event": kind, "created_at": iso(created_at), "livemode": livemode,
            "body": RawJSON(thin_body(kind, body) if thin else body)}


def list_events(customer_id: str, *, livemode: bool, events_filter: str | None = None, scan_id: str | None = None,
                bulk_id: str | None = None, watch_id: str | None = None, payload: str | None = None,
                limit: int = LIST_DEFAULT_LIMIT, starting_after: str | None = None) -> dict:
    """The body of ``GET /events``: the customer's events of the calling key's mode, newest
    first (D17's paging: ``starting_after`` is the last event id of the previous page; any id
    this service gave pages, one removed by retention too, since the numbers they seal only increase)."""
    filters, thin = check_filters(events_filter=events_filter, scan_id=scan_id, bulk_id=bulk_id,
                                  watch_id=watch_id, payload=payload)
    before = parse_event_id(starting_after, "starting_after") if starting_after is not None else None
    limit = max(1, min(LIST_MAX_LIMIT, int(limit)))
    rows = store.newest_first(customer_id, livemode, filters, before=before, limit=limit + 1)
    return {"ok": True, "data": [entry(row, thin=thin) for row in rows[:limit]], "has_more": len(rows) > limit}


def events_after(customer_id: str, livemode: bool, filters: store.Filters, after: int,
                 limit: int = LIST_MAX_LIMIT) -> list[tuple]:
    """The stream's next events: up to ``limit`` after event ``after``, oldest first."""
    return store.oldest_first(customer_id, livemode, filters, after=after, limit=limit)


def last_event(customer_id: str, livemode: bool) -> int:
    return store.last_id(customer_id, livemode)


# --- the stream ---------------------------------------------------------------------------

# A comment line at least this often: proxies keep the connection, a gone client is found, and the
# key is asked again whether it may still read (``waits.KEY_CHECK_SECONDS``).
HEARTBEAT_SECONDS = waits.KEY_CHECK_SECONDS
KEY_REFUSED = ": this key may no longer read events\n\n"  # the stream's last line when its key is refused
GATHER_SECONDS = 0.2  # a woken stream waits this long for the rest of a burst before it reads


@dataclass(frozen=True)
class StreamFrom:
    """Where a stream starts: after event ``after`` (a resumed stream), or at the newest (None)."""

    after: int | None


def stream_start(last_event_id: str | None, after: str | None) -> StreamFrom:
    """The ``Last-Event-ID`` header (a reconnecting client's) or ``?after=``; neither: from now."""
    if last_event_id is not None:
        return StreamFrom(parse_event_id(last_event_id.strip(), "Last-Event-ID"))
    return StreamFrom(parse_event_id(after, "after") if after is not None else None)


def sse_message(row: tuple, *, thin: bool) -> str:
    """One event as a server-sent event: its id, kind and body (compact JSON: one line)."""
    number, kind, _, _, body = row
    return f"id: {event_id(number)}\nevent: {kind}\ndata: {thin_body(kind, body) if thin else body}\n\n"


def stream(customer_id: str, livemode: bool, filters: store.Filters, *, thin: bool, start: StreamFrom,
           held: waits.Held, allowed: Callable[[], bool] = lambda: True) -> Iterator[str]:
    """The text of a stream of the customer's events of that mode (D27), oldest first, from
    ``start``, until its key may no longer read them: woken by each stored event's announcement, reading the stored
    events again when woken and as ``waits.reread_due`` says (a lost announcement only delays one), a heartbeat
    comment every ``HEARTBEAT_SECONDS``. Its hold (``waits.hold``) is extended while it runs and released
    when the client goes (the server closes the generator).

    ``allowed`` (``pipeline.still_allowed``: one look-up by primary key) is asked at each heartbeat
    and after each read that found events, before they are sent: a key revoked, expired or
    narrowed ends its streams within a heartbeat, and no event stored after the change is sent."""
    waiter = waits.subscribe(waits.feed_topic(customer_id, livemode))  # before the first read
    try:
        after = start.after if start.after is not None else store.last_id(customer_id, livemode)
        release_connection()  # none held while writing to the client: a slow one would keep it
        yield f"retry: 2000\n: events after {event_id(after)}\n\n"
        beat = time.monotonic()
        due = True
        while True:
            if due:
                rows = store.oldest_first(customer_id, livemode, filters, after=after, limit=LIST_MAX_LIMIT)
                refused = bool(rows) and not allowed()  # asked after the read: the key could still see them
                release_connection()
                if refused:
                    yield KEY_REFUSED
                    return
                for row in rows:
                    after = row[0]
                    yield sse_message(row, thin=thin)
                if len(rows) == LIST_MAX_LIMIT:
                    continue  # more are stored: send them before sleeping
                read_at = time.monotonic()
            woken = waiter.sleep(min(waits.REREAD_SECONDS, max(0.0, beat + HEARTBEAT_SECONDS - time.monotonic())))
            due = woken or waits.reread_due(read_at)  # un-woken, a stream reads again only as a waiter does
            if woken:  # events come in bursts (a batch's scans change together): one read for the burst
                time.sleep(GATHER_SECONDS)
            if time.monotonic() - beat >= HEARTBEAT_SECONDS:
                refused = not allowed()
                release_connection()
                if refused:
                    yield KEY_REFUSED
                    return
                yield ": heartbeat\n\n"
                waits.extend(held, HEARTBEAT_SECONDS * 3)
                beat = time.monotonic()
    finally:
        waits.unsubscribe(waiter)
        waits.release(held)


def erase_for_scans(scan_ids: Sequence[str]) -> None:
    """Erased scans' events keep their thin bodies only (D20), in the caller's transaction."""
    rows = store.of_scans(scan_ids)
    store.replace_bodies([number for number, _, _ in rows], [thin_body(kind, body) for _, kind, body in rows])


def remove_past_retention(now: datetime | None = None) -> int:
    """Remove the events created more than ``DELIVERY_RETENTION_DAYS`` ago, in batches; how many."""
    cutoff = (now or utcnow()) - timedelta(days=runtime.config["DELIVERY_RETENTION_DAYS"])
    removed = 0
    while True:
        with transaction():
            count = store.delete_created_before(cutoff, batch=RETENTION_BATCH)
        removed += count
        if count < RETENTION_BATCH:
            return removed
