"""``Idempotency-Key`` on the POST endpoints (D9).

A key is claimed by inserting a row (unique per customer and key) before the request
is processed; the unique index, not a read-then-write, decides which of two
concurrent requests owns it. The owner stores its answer only when it is a 202; any
other answer releases the key so a retry is processed afresh. A claim left behind by
a process that died mid-request is taken over after ``ABANDONED_AFTER``.
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

from app.billing.statements import idempotency as records
from app.plumbing.errors import Conflict, InvalidRequest
from app.plumbing.models import utcnow

TTL = timedelta(hours=24)
ABANDONED_AFTER = timedelta(minutes=2)
MAX_KEY_LENGTH = 255
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# Only this answer is stored and replayed; any other releases the key for a fresh retry.
STORED_STATUS = 202


def check_key(key: str) -> None:
    """Refuse an Idempotency-Key that cannot be stored or sent back (``InvalidRequest``)."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidRequest(f"Idempotency-Key must have 1 to {MAX_KEY_LENGTH} characters")
    if CONTROL_CHARS.search(key):  # not in a valid header value, and PostgreSQL cannot store a NUL
        raise InvalidRequest("Idempotency-Key must not contain control characters")


def claim_request(customer_id: str, key: str, endpoint: str, raw_body: bytes, livemode: bool = True):
    """Check ``key``, then ``claim`` it for this request (its endpoint and body). Keys are
    scoped by mode (D15): a test key's request never replays a live one's answer."""
    check_key(key)
    return claim(customer_id, key, endpoint, request_hash(endpoint, raw_body), livemode)


def settle(record_id: int, status: int, body, *, created: bool = False) -> None:
    """Store the answer of a claimed request when it is the one replayed, else release the key.
    ``body`` is the answer's text, or a function that gives it (read only when it is stored).
    ``created``: an answer that created something whatever its status (a watch's 201), stored
    so a retry replays it instead of creating again. (A creation answered 200 after waiting for
    its scan stores its 202: a replay reads nothing.)"""
    if status == STORED_STATUS or created:
        complete(record_id, status, body() if callable(body) else body)
    else:
        release(record_id)


def request_hash(endpoint: str, raw_body: bytes) -> str:
    """Hash of the body's JSON value (so key order and spacing do not matter), else its bytes."""
    try:
        canonical = json.dumps(json.loads(raw_body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON (or nested too deeply): its bytes
        canonical = raw_body
    return hashlib.sha256(endpoint.encode() + b"\0" + canonical).hexdigest()


def _conflict(message: str) -> Conflict:
    return Conflict(message)


def claim(customer_id: str, key: str, endpoint: str, body_hash: str, livemode: bool = True):
    """Returns ``("new", record_id)`` or ``("replay", status, body)``; raises 409 (Conflict) when the key is taken."""
    for _ in range(3):
        record_id = records.insert(customer_id, key, endpoint=endpoint, request_hash=body_hash, livemode=livemode)
        if record_id is not None:
            return ("new", record_id)
        existing = records.find(customer_id, key, livemode)
        if existing is None:
            continue  # released between our insert and read: try again
        now = utcnow()
        expired = existing.created_at < now - TTL
        abandoned = not existing.done and existing.created_at < now - ABANDONED_AFTER
        if expired or abandoned:
            records.delete_if_unchanged(existing.id, existing.created_at)
            continue
        if existing.endpoint != endpoint or existing.request_hash != body_hash:
            raise _conflict("this Idempotency-Key was used with a different request")
        if not existing.done:
            raise _conflict("a request with this Idempotency-Key is still being processed")
        return ("replay", existing.response_status, existing.response_body)
    raise _conflict("this Idempotency-Key is contended; retry")


def complete(record_id: int, status: int, body: str) -> None:
    records.complete(record_id, status=status, body=body)


def release(record_id: int) -> None:
    records.delete_unfinished(record_id)


def purge_expired() -> int:
    return records.delete_created_before(utcnow() - TTL)
