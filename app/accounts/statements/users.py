"""Portal users and their sessions (``PortalUser``, ``PortalSession``).

A session's id is the digest of its cookie token; ``app.accounts.portal_users`` makes
it and decides how long a session lives.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import cast

from peewee import IntegrityError, fn

from app.accounts.models import Customer, PortalRecoveryCode, PortalSession, PortalUser
from app.accounts.statements import customers
from app.plumbing.db import db


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


def insert_user(*, user_id: str, customer_id: str, email: str, password_hash: str, role: str,
                disabled: bool = False, provisioned_by: str | None = None,
                scim_external_id: str | None = None) -> PortalUser:
    return PortalUser.create(id=user_id, customer=customer_id, email=email, password_hash=password_hash, role=role,
                             disabled=disabled, provisioned_by=provisioned_by, scim_external_id=scim_external_id)


# What a SCIM filter may match on (``app.accounts.scim``): its attribute's column.
SCIM_FILTER_COLUMNS = {"userName": PortalUser.email, "externalId": PortalUser.scim_external_id, "id": PortalUser.id}


def customer_users_page(customer_id: str, *, match: tuple[str, str] | None, offset: int,
                        limit: int) -> tuple[int, list[PortalUser]]:
    """How many of the customer's users ``match`` (attribute, value: equal), and ``limit`` of them
    from ``offset``, oldest first."""
    query = PortalUser.select().where(PortalUser.customer == customer_id)
    if match is not None:
        query = query.where(SCIM_FILTER_COLUMNS[match[0]] == match[1])
    total = query.count()
    page = list(query.order_by(PortalUser.created_at, PortalUser.id).offset(offset).limit(limit)) if limit else []
    return total, page


def insert_unique_user(**fields) -> PortalUser | None:
    """``insert_user``, or None when the e-mail is taken (two customers' requests at once: the
    unique index decides), in a savepoint so that the caller's transaction goes on."""
    try:
        with db.atomic():
            return insert_user(**fields)
    except IntegrityError:
        return None


def set_provisioned(user_id: str, *, email: str, role: str, disabled: bool, scim_external_id: str | None) -> bool:
    """Write what a SCIM client sets of a user (its login e-mail, role, state and own id); False
    when the e-mail is another user's (the unique index decides), nothing written."""
    try:
        with db.atomic():
            PortalUser.update(email=email, role=role, disabled=disabled, scim_external_id=scim_external_id).where(
                PortalUser.id == user_id).execute()
    except IntegrityError:
        return False
    return True


def delete_user(user_id: str) -> int:
    """Remove the user; its sessions and recovery codes go with it (ON DELETE CASCADE)."""
    return PortalUser.delete().where(PortalUser.id == user_id).execute()


def customer_user(customer_id: str, user_id: str) -> PortalUser | None:
    return PortalUser.get_or_none((PortalUser.id == user_id) & (PortalUser.customer == customer_id))


def lock_customer(customer_id: str) -> None:
    """Serialise changes to the customer's users until the transaction ends (the last owner rule)."""
    customers.lock(customer_id)  # the admissions' lock: one strength of it, one order (customers.LOCK_CUSTOMER)


def enabled_owner_count(customer_id: str) -> int:
    return (PortalUser.select().where((PortalUser.customer == customer_id) & (PortalUser.role == "owner")
                                      & (PortalUser.disabled == False))  # noqa: E712 (peewee expression)
            .count())


def set_role(user_id: str, role: str) -> None:
    PortalUser.update(role=role).where(PortalUser.id == user_id).execute()


def set_password_token(user_id: str, token_digest: str | None, expires_at: datetime | None) -> None:
    PortalUser.update(password_token_digest=token_digest, password_token_expires_at=expires_at).where(
        PortalUser.id == user_id).execute()


def by_password_token(token_digest: str, now: datetime) -> PortalUser | None:
    return PortalUser.get_or_none((PortalUser.password_token_digest == token_digest)
                                  & (PortalUser.password_token_expires_at > now))


def use_password_token(token_digest: str, now: datetime, password_hash: str) -> str | None:
    """Set the password of the user whose live link this is and spend the link, in one
    conditional UPDATE (two uses at once: one wins); returns the user's id or None."""
    row = (PortalUser.update(password_hash=password_hash, password_token_digest=None, password_token_expires_at=None)
           .where((PortalUser.password_token_digest == token_digest) & (PortalUser.password_token_expires_at > now))
           .returning(PortalUser.id).execute())
    found = list(row)
    return found[0].id if found else None


def get_or_none(user_id: str) -> PortalUser | None:
    return PortalUser.get_or_none(PortalUser.id == user_id)


def set_pending_totp(user_id: str, secret_enc: str) -> None:
    """Store an enrolment's secret unless one is there already (two tabs opened at once keep the first)."""
    PortalUser.update(totp_secret_enc=secret_enc, totp_enabled_at=None, totp_last_step=None).where(
        (PortalUser.id == user_id) & PortalUser.totp_secret_enc.is_null()).execute()


def set_totp(user_id: str, *, secret_enc: str | None, enabled_at: datetime | None) -> None:
    PortalUser.update(totp_secret_enc=secret_enc, totp_enabled_at=enabled_at, totp_last_step=None).where(
        PortalUser.id == user_id).execute()


def enable_totp(user_id: str, enabled_at: datetime, step: int) -> bool:
    """Put the pending enrolment in force, once; False when it was already (or is gone)."""
    return bool(PortalUser.update(totp_enabled_at=enabled_at, totp_last_step=step)
                .where((PortalUser.id == user_id) & PortalUser.totp_enabled_at.is_null()
                       & PortalUser.totp_secret_enc.is_null(False)).execute())


def claim_totp_step(user_id: str, step: int) -> bool:
    """Record ``step`` as the last accepted code's, only when it is later than the last one:
    a code (or an earlier one) accepted once is never accepted again, even by two requests at once."""
    return bool(PortalUser.update(totp_last_step=step)
                .where((PortalUser.id == user_id)
                       & (PortalUser.totp_last_step.is_null() | (PortalUser.totp_last_step < step))).execute())


def replace_recovery_codes(user_id: str, digests: list[str]) -> None:
    PortalRecoveryCode.delete().where(PortalRecoveryCode.user == user_id).execute()
    PortalRecoveryCode.insert_many([{"user": user_id, "digest": d} for d in digests]).execute()


def use_recovery_code(user_id: str, code_digest: str, now: datetime) -> bool:
    return bool(PortalRecoveryCode.update(used_at=now)
                .where((PortalRecoveryCode.user == user_id) & (PortalRecoveryCode.digest == code_digest)
                       & PortalRecoveryCode.used_at.is_null()).execute())


def unused_recovery_codes(user_id: str) -> int:
    return PortalRecoveryCode.select().where((PortalRecoveryCode.user == user_id)
                                             & PortalRecoveryCode.used_at.is_null()).count()


def delete_recovery_codes(user_id: str) -> None:
    PortalRecoveryCode.delete().where(PortalRecoveryCode.user == user_id).execute()
