"""SCIM 2.0 provisioning's statements (D32): a customer's bearer token (its digest) and its users
as SCIM lists them. The rules are ``app.services.accounts.scim``'s."""
from __future__ import annotations

from app.models import Customer, PortalUser


def set_token_digest(customer_id: str, token_digest: str | None) -> int:
    return Customer.update(scim_token_digest=token_digest).where(Customer.id == customer_id).execute()


def customer_by_token_digest(token_digest: str) -> Customer | None:
    return Customer.get_or_none(Customer.scim_token_digest == token_digest)


def page(customer_id: str, *, email: str | None, offset: int, limit: int) -> tuple[int, list[PortalUser]]:
    """(how many match, the page of them), oldest first; ``email``: only that user name."""
    query = PortalUser.select().where(PortalUser.customer == customer_id)
    if email is not None:
        query = query.where(PortalUser.email == email)
    total = query.count()
    rows = list(query.order_by(PortalUser.created_at, PortalUser.id).offset(offset).limit(limit)) if limit else []
    return total, rows


def set_email(user_id: str, email: str) -> None:
    PortalUser.update(email=email).where(PortalUser.id == user_id).execute()


def delete_user(user_id: str) -> int:
    return PortalUser.delete().where(PortalUser.id == user_id).execute()
