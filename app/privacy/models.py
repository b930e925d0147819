"""Personal data about people who are not our customers (D20): the opt-outs of data subjects."""
from peewee import CharField, DateTimeField

from app.plumbing.models import BaseModel, utcnow


class Suppression(BaseModel):
    """A data subject's opt-out: creations for this target are refused (403 ``target_suppressed``).

    Only the keyed hash of the normalised target is kept (``app.plumbing.crypto.target_hash``), never
    the target: the list itself discloses nobody."""

    target_hash = CharField(max_length=64, primary_key=True)
    kind = CharField(max_length=10)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "suppression"


class EngineDeletion(BaseModel):
    """An erased scan's investigation still to be deleted at the engine (D25, E7).

    Erasure takes the engine id off the scan and writes it here, in one transaction; the job of
    ``app.plumbing.jobs.enqueue_engine_deletion`` asks the engine to delete it and removes the row once the
    engine answered 2xx or 404 (or 405: it does not offer deletion). The recovery sweep enqueues
    again the rows whose job Redis lost, so a deletion survives Redis being down at erasure."""

    id = CharField(max_length=40, primary_key=True)  # edl_...
    engine_id = CharField(max_length=2000)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "engine_deletion"
