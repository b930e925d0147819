"""Audit sinks' statements (D32): the sink rows, the lease a worker takes on a due sink (a
compare-and-set: one worker at a time sends a sink's batch), and the position moved only by the
lease's holder."""
from __future__ import annotations

from datetime import datetime

from app.activity.audit_models import AuditSink
from app.plumbing.db import execute, table

SINK = table(AuditSink)


def insert(row: dict) -> None:
    AuditSink.insert(**row).execute()


def get(sink_id: str) -> AuditSink | None:
    return AuditSink.get_or_none(AuditSink.id == sink_id)


def of_customer(customer_id: str) -> list[AuditSink]:
    return list(AuditSink.select().where(AuditSink.customer_id == customer_id).order_by(AuditSink.created_at))


def delete(sink_id: str) -> bool:
    return AuditSink.delete().where(AuditSink.id == sink_id).execute() > 0


def due_ids(now: datetime, *, exclude: list[str], limit: int) -> list[str]:
    """Sinks whose next attempt is due and that no live lease holds, soonest first."""
    return [row[0] for row in execute(
        f"SELECT id FROM {SINK} WHERE next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?) "
        f"AND NOT (id = ANY(?)) ORDER BY next_attempt_at LIMIT ?", (now, now, exclude, limit)).fetchall()]


def take_lease(sink_id: str, token: str, now: datetime, until: datetime) -> AuditSink | None:
    """The sink, leased to ``token`` until ``until``, if it is due and no live lease holds it."""
    row = execute(f"UPDATE {SINK} SET lease_token = ?, lease_until = ? WHERE id = ? AND next_attempt_at <= ? "
                  f"AND (lease_until IS NULL OR lease_until < ?) RETURNING id", (token, until, sink_id, now, now))
    return get(sink_id) if row.fetchone() else None


def acknowledged(sink_id: str, token: str, position: tuple[str, datetime | None, str], count: int,
                 status: int, next_at: datetime) -> bool:
    """The lease holder's batch was acknowledged: move the position past it, reset the failures,
    release the lease. False when the lease was lost (another worker sends from the old position)."""
    xact, created_at, entry_id = position
    return execute(f"UPDATE {SINK} SET after_xact = ?, after_created_at = ?, after_id = ?, failures = 0, "
                   f"delivered = delivered + ?, last_status = ?, last_error = NULL, next_attempt_at = ?, "
                   f"lease_token = NULL, lease_until = NULL WHERE id = ? AND lease_token = ?",
                   (xact, created_at, entry_id, count, status, next_at, sink_id, token)).rowcount == 1


def failed(sink_id: str, token: str, *, status: int | None, error: str, next_at: datetime) -> bool:
    """The lease holder's batch failed: count it, say when to try again, release the lease."""
    return execute(f"UPDATE {SINK} SET failures = failures + 1, last_status = ?, last_error = ?, "
                   f"next_attempt_at = ?, lease_token = NULL, lease_until = NULL WHERE id = ? AND lease_token = ?",
                   (status, error, next_at, sink_id, token)).rowcount == 1


def release(sink_id: str, token: str, next_at: datetime) -> None:
    """Nothing to send: the lease goes, the next look is ``next_at``."""
    execute(f"UPDATE {SINK} SET next_attempt_at = ?, lease_token = NULL, lease_until = NULL "
            f"WHERE id = ? AND lease_token = ?", (next_at, sink_id, token))
