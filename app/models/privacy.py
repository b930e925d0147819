"""Personal data about people who are not our customers (D20): the opt-outs of data subjects."""
from peewee import CharField, DateTimeField

from app.models.base import BaseModel, utcnow


class Suppression(BaseModel):
    """A data subject's opt-out: creations for this target are refused (403 ``target_suppressed``).

    Only the keyed hash of the normalised target is kept (``services.crypto.target_hash``), never
    the target: the list itself discloses nobody."""

    target_hash = CharField(max_length=64, primary_key=True)
    kind = CharField(max_length=10)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "suppression"
