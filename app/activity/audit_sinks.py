"""Audit sinks (D32): every new activity entry of a customer pushed to its SIEM, batched.

An operator adds a sink (``customers audit-sink ID --url URL --token-stdin [--format
splunk_hec|ndjson]``); the workers' pusher (``workers.audit_sinks``) sends each due sink's next
batch: the entries after its position, in the order the audit export gives them (written by
transactions older than every one still running, so none is ever passed while being written).
A batch acknowledged (any 2xx) moves the position past it; a failed one is sent again, the same
entries from the same position, after the webhooks' retry schedule (``WEBHOOK_RETRY_SCHEDULE``,
its last delay repeated: a sink is a stream, never given up). Delivery is at least once (a
worker killed after the receiver took a batch sends it again): every event carries the entry's
``activity_id``, stable, for de-duplication.

The token is kept encrypted (``crypto.encrypt_secret``) and is never shown, logged or put in an
error; the URL passes the webhooks' SSRF checks when saved and again at each connection (the
guarded session of ``webhooks.webhook_urls``).
"""
from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.accounts import admin
from app.activity import entries as activity
from app.activity.audit_models import FORMATS, AuditSink
from app.activity.statements import audit_sinks as store
from app.activity.statements import entries as activity_store
from app.plumbing import crypto, metrics, runtime
from app.plumbing.db import transaction
from app.plumbing.errors import AccountError
from app.plumbing.models import iso, new_id, utcnow
from app.plumbing.outbound_urls import check_webhook_url

log = logging.getLogger(__name__)

BATCH_SIZE = 500
IDLE_SECONDS = 5.0  # a sink with nothing new looks again this much later: well within the minute
LEASE_MARGIN_SECONDS = 5  # a lease outlives the request's deadline by this much (its two short writes)
SOURCE, SOURCETYPE = "public-scan-api:activity", "_json"
MAX_TOKEN = 512


def _check_token(token: str) -> str:
    token = (token or "").strip()
    if not token or len(token) > MAX_TOKEN or not token.isprintable() or " " in token:
        raise AccountError(f"the token must be 1 to {MAX_TOKEN} printable characters without spaces")
    return token


def _view(sink: AuditSink) -> dict:
    """A sink as the operator sees it: never its token."""
    return {"sink_id": sink.id, "customer_id": sink.customer_id, "url": sink.url, "format": sink.format,
            "created_at": iso(sink.created_at), "delivered": sink.delivered, "failures": sink.failures,
            "last_status": sink.last_status, "last_error": sink.last_error,
            "next_attempt_at": iso(sink.next_attempt_at)}


def add(customer_id: str, *, url: str, token: str, format: str = "splunk_hec", now: datetime | None = None) -> dict:
    """A new sink for the customer: it receives the entries written from now on (the audit export
    reads the past). The URL is checked as a webhook URL is."""
    admin.get_customer(customer_id)
    if format not in FORMATS:
        raise AccountError(f"format must be one of {', '.join(FORMATS)}")
    check_webhook_url(url)
    encrypted = crypto.encrypt_secret(_check_token(token))
    now = now or utcnow()
    sink_id = new_id("snk")
    position = _now_position(customer_id)
    store.insert({"id": sink_id, "customer_id": customer_id, "url": url, "token_encrypted": encrypted,
                  "format": format, "created_at": now, "next_attempt_at": now, "after_xact": position[0],
                  "after_created_at": position[1], "after_id": position[2]})
    log.info("audit sink %s added for customer %s (%s)", sink_id, customer_id, format)
    sink = store.get(sink_id)
    if sink is None:  # removed by another command at once
        raise AccountError(f"no audit sink {sink_id}")
    return _view(sink)


def _now_position(customer_id: str) -> tuple[str, datetime | None, str]:
    """The position after the customer's entries exported so far (those older than every running
    transaction): a new sink starts there."""
    return activity_store.last_export_position(customer_id) or activity.START


def remove(sink_id: str) -> dict:
    if not store.delete(sink_id):
        raise AccountError(f"no audit sink {sink_id}")
    log.info("audit sink %s removed", sink_id)
    return {"sink_id": sink_id, "removed": True}


def list_sinks(customer_id: str) -> list[dict]:
    admin.get_customer(customer_id)
    return [_view(sink) for sink in store.of_customer(customer_id)]


# --- sending --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Batch:
    sink_id: str
    lease: str
    url: str
    headers: dict
    body: bytes
    position: tuple[str, datetime | None, str]
    count: int
    full: bool
    failures: int


def due(now: datetime | None = None, *, exclude: list[str], limit: int) -> list[str]:
    """The sinks due now that no lease holds, but ``exclude`` (those in flight in this process)."""
    return store.due_ids(now or utcnow(), exclude=exclude, limit=limit)


def _position(sink: AuditSink) -> tuple[str, datetime, str]:
    return sink.after_xact, sink.after_created_at or activity.START[1], sink.after_id


def _hec_event(entry: dict, host: str) -> dict:
    at = datetime.strptime(entry["created_at"], "%Y-%m-%dT%H:%M:%SZ")
    epoch = (at - datetime(1970, 1, 1)).total_seconds()  # noqa: DTZ001 - naive UTC, as every stored time
    return {"time": epoch, "host": host, "source": SOURCE, "sourcetype": SOURCETYPE, "event": entry}


def body_of(entries: list[dict], format: str) -> tuple[bytes, str]:
    """A batch's bytes and content type: Splunk HEC's concatenated event objects, or NDJSON."""
    if format == "splunk_hec":
        host = socket.gethostname()
        text = "".join(json.dumps(_hec_event(e, host), separators=(",", ":")) for e in entries)
        return text.encode(), "application/json"
    return "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries).encode(), "application/x-ndjson"


def take_batch(sink_id: str, now: datetime | None = None) -> Batch | None:
    """Lease the sink and make its next batch; None when it is not due, leased elsewhere, or has
    nothing new (then its next look is ``IDLE_SECONDS`` away)."""
    now = now or utcnow()
    token = new_id("lse")
    until = now + timedelta(seconds=runtime.config["WEBHOOK_TIMEOUT_SECONDS"] + LEASE_MARGIN_SECONDS)
    sink = store.take_lease(sink_id, token, now, until)
    if sink is None:
        return None
    rows = activity_store.export_rows(sink.customer_id, livemode=None, after=_position(sink), limit=BATCH_SIZE)
    if not rows:
        store.release(sink.id, token, now + timedelta(seconds=IDLE_SECONDS))
        return None
    entries = [activity.public_entry(row[:-1]) for row in rows]
    body, content_type = body_of(entries, sink.format)
    secret = crypto.decrypt_secret(sink.token_encrypted)
    scheme = "Splunk" if sink.format == "splunk_hec" else "Bearer"
    headers = {"Authorization": f"{scheme} {secret}", "Content-Type": content_type}
    last = rows[-1]
    return Batch(sink.id, token, sink.url, headers, body, (last[-1], last[1], last[0]), len(rows),
                 len(rows) == BATCH_SIZE, sink.failures)


def retry_delay(failures: int) -> float:
    """The wait after the ``failures``-th failure in a row: the webhooks' schedule, its last delay
    repeated."""
    schedule = runtime.config["WEBHOOK_RETRY_SCHEDULE"] or (0,)
    return float(schedule[min(failures - 1, len(schedule) - 1)])


def record(batch: Batch, *, status: int | None, error: str | None, now: datetime | None = None) -> str:
    """The outcome of sending ``batch``: ``acknowledged``, ``failed`` or ``stale`` (the lease was
    lost meanwhile: another worker sends from the position, nothing moves)."""
    now = now or utcnow()
    ok = error is None and status is not None and 200 <= status < 300
    with transaction():
        if ok and status is not None:
            next_at = now if batch.full else now + timedelta(seconds=IDLE_SECONDS)
            done = store.acknowledged(batch.sink_id, batch.lease, batch.position, batch.count, status, next_at)
        else:
            failures = batch.failures + 1
            next_at = now + timedelta(seconds=retry_delay(failures))
            done = store.failed(batch.sink_id, batch.lease, status=status, error=error or f"http_{status}",
                                next_at=next_at)
    outcome = ("acknowledged" if ok else "failed") if done else "stale"
    metrics.count_audit_sink_batch(outcome, batch.count)
    log.info("audit sink %s: %d entries %s (status %s%s)", batch.sink_id, batch.count, outcome, status,
             f", {error}" if error else "")
    return outcome
