"""The applied schema migrations (see ``app.migrations``)."""
from peewee import CharField, DateTimeField, IntegerField

from app.plumbing.models import BaseModel, utcnow


class SchemaVersion(BaseModel):
    version = IntegerField(primary_key=True)
    name = CharField()
    applied_at = DateTimeField(default=utcnow)
