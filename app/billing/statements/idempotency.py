"""Idempotency records (D9): one row per customer, mode and ``Idempotency-Key``.

The unique index decides which of two concurrent requests owns a key (``insert`` says
None to the loser); the rules (how long a record lives, when a claim is abandoned) are
``app.billing.idempotency``'s.
"""
from __future__ import annotations

from datetime import datetime

from peewee import IntegrityError

from app.billing.models import IdempotencyRecord
from app.plumbing.db import db, execute, table


def insert(customer_id: str, key: str, *, endpoint: str, request_hash: str, livemode: bool) -> int | None:
    """The new record's id, or None when the customer already holds ``key`` in this mode.

    In its own savepoint, so a refused insert leaves an enclosing transaction usable."""
    try:
        with db.atomic():
            record = IdempotencyRecord.create(customer=customer_id, key=key, endpoint=endpoint,
                                              request_hash=request_hash, livemode=livemode)
        return record.id
    except IntegrityError:
        return None


def find(customer_id: str, key: str, livemode: bool) -> IdempotencyRecord | None:
    return IdempotencyRecord.get_or_none((IdempotencyRecord.customer == customer_id)
                                         & (IdempotencyRecord.livemode == livemode)
                                         & (IdempotencyRecord.key == key))


def delete_if_unchanged(record_id: int, created_at: datetime) -> int:
    """Delete the record if it is still the one created at ``created_at`` (another request may
    have taken the key over meanwhile)."""
    return IdempotencyRecord.delete().where((IdempotencyRecord.id == record_id)
                                            & (IdempotencyRecord.created_at == created_at)).execute()


def complete(record_id: int, *, status: int, body: str) -> None:
    IdempotencyRecord.update(done=True, response_status=status, response_body=body).where(
        IdempotencyRecord.id == record_id).execute()


def delete_unfinished(record_id: int) -> int:
    return IdempotencyRecord.delete().where((IdempotencyRecord.id == record_id)
                                            & (IdempotencyRecord.done == False)  # noqa: E712
                                            ).execute()


def delete_created_before(cutoff: datetime) -> int:
    return IdempotencyRecord.delete().where(IdempotencyRecord.created_at < cutoff).execute()


def answers_naming(customer_id: str, livemode: bool, scan_ids: list[str]) -> list[tuple[int, str]]:
    """``(record id, stored answer)`` of the customer's settled records (of one mode) whose answer
    names one of ``scan_ids``: the customer's own records only, which its index finds."""
    patterns = [f'%"{scan_id}"%' for scan_id in scan_ids]
    rows = execute(f"SELECT id, response_body FROM {table(IdempotencyRecord)} WHERE customer_id = ? AND livemode = ? "
                   f"AND done AND response_body LIKE ANY(?)", (customer_id, livemode, patterns)).fetchall()
    return [(int(record_id), str(body)) for record_id, body in rows]


def replace_answer(record_id: int, body: str) -> None:
    IdempotencyRecord.update(response_body=body).where(IdempotencyRecord.id == record_id).execute()
