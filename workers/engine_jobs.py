"""The engine queue's jobs: asking the engine to forget an erased scan's investigation, and the
hand-over of a tracking job left in Redis from before the upgrade that retired them.

Scans in flight are tracked by due times in the database (``app.tracking.looks``, D24), not by
an RQ job each. A tracking job enqueued before the upgrade (or by a process of before it, still
running during a rolling upgrade) may still come due: ``track_scan`` keeps its dotted path so
that it runs, and only hands its scan to the batch looks. It never asks the engine nor writes a
state, so a duplicate, a replay or a job of a finished scan changes nothing.
"""
from __future__ import annotations

import logging

from app import recovery
from app.extensions import db
from app.plumbing import engine
from app.plumbing.logging_setup import log_context
from app.privacy import erasure

log = logging.getLogger(__name__)


def track_scan(scan_id: str) -> str:
    """A tracking job of before the upgrade: its scan, if in flight without a due look, is made
    due now (``recovery.hand_over``); ``handed_over``, else ``nothing`` (a due look tracks it
    already, or it is final, erased or never submitted)."""
    with log_context(scan_id=scan_id), db.connection_context():
        return "handed_over" if recovery.hand_over(scan_id) else "nothing"


def forget_investigation(deletion_id: str) -> str:
    """Ask the engine to delete an erased scan's investigation (D25, E7). An engine error raises:
    RQ tries again on ``app.plumbing.jobs.FORGET_RETRY_SCHEDULE``, then the recovery sweep does."""
    with db.connection_context():
        engine_id = erasure.engine_id_to_forget(deletion_id)
        if engine_id is None:
            return "done"  # a duplicate job: another one got the engine's answer
        outcome = engine.delete(engine_id)
        erasure.engine_answered(deletion_id, outcome)
        return outcome
