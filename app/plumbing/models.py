"""Base model, id generation and the clock.

Ids are ``<prefix>_`` + 128 random bits, URL-safe (D2: unguessable, readable prefix).
Times are naive UTC datetimes in the database; ``utcnow`` is the one clock the code
uses, so freezegun moves all of it at once.
"""
import secrets
from datetime import UTC, datetime
from typing import Any

from peewee import Model

from app.plumbing.db import db


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(16)}"


def iso(dt: datetime | None) -> str | None:
    """ISO 8601 UTC as decided in D6: ``YYYY-MM-DDTHH:MM:SSZ``."""
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ") if dt else None


class BaseModel(Model):
    # What peewee adds to every model at run time, declared for the type checker.
    DoesNotExist: type[Exception]
    id: Any

    class Meta:
        database = db
        legacy_table_names = False
