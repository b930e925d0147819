"""Portal users and their sessions (``PortalUser``, ``PortalSession``).

A session's id is the digest of its cookie token; ``app.services.portal_users`` makes
it and decides how long a session lives.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import cast

from peewee import fn

from app.models import Customer, PortalSession, PortalUser


def by_email(email: str) -> PortalUser | None:
    return PortalUser.get_or_none(PortalUser.email == email)


def get(user_id: str) -> PortalUser:
    return PortalUser.get_by_id(user_id)


def delete_sessions_expired_by(now: datetime) -> int:
    return PortalSession.delete().where(PortalSession.expires_at <= now).execute()


def create_session(session_id: str, user_id: str, *, created_at: datetime, expires_at: datetime) -> None:
    PortalSession.create(id=session_id, user=user_id, created_at=created_at, expires_at=expires_at)


def set_last_login(user_id: str, at: datetime) -> None:
    PortalUser.update(last_login_at=at).where(PortalUser.id == user_id).execute()


def session_user(session_id: str, now: datetime) -> PortalUser | None:
    """The enabled user (with its customer) of the session ``session_id`` live at ``now``."""
    return (PortalUser.select(PortalUser, Customer)
            .join(Customer)
            .switch(PortalUser)
            .join(PortalSession)
            .where((PortalSession.id == session_id) & (PortalSession.expires_at > now)
                   & (PortalUser.disabled == False))  # noqa: E712 (peewee expression)
            .get_or_none())


def delete_session(session_id: str) -> int:
    return PortalSession.delete().where(PortalSession.id == session_id).execute()


def delete_user_sessions(user_id: str) -> int:
    return PortalSession.delete().where(PortalSession.user == user_id).execute()


def set_password_hash(user_id: str, password_hash: str) -> None:
    PortalUser.update(password_hash=password_hash).where(PortalUser.id == user_id).execute()


def set_disabled(user_id: str, disabled: bool) -> None:
    PortalUser.update(disabled=disabled).where(PortalUser.id == user_id).execute()


def live_session_counts(user_ids: list[str], now: datetime) -> dict[str, int]:
    """How many sessions live at ``now`` each of ``user_ids`` (a non-empty list) has; a user with none is absent."""
    rows = (PortalSession.select(PortalSession.user, fn.COUNT(PortalSession.id).alias("n"))
            .where(PortalSession.user.in_(user_ids) & (PortalSession.expires_at > now))
            .group_by(PortalSession.user).tuples())
    return dict(cast(Iterable[tuple[str, int]], rows))  # peewee types rows as models


def all_users(customer_id: str | None = None) -> list[PortalUser]:
    """Every portal user (of one customer when given), oldest first."""
    query = PortalUser.select().order_by(PortalUser.created_at, PortalUser.id)
    if customer_id:
        query = query.where(PortalUser.customer == customer_id)
    return list(query)
