"""A customer's single sign-on settings (``CustomerSso``, D32) and the users it provisions.

``app.accounts.sso`` owns the rules (which domains, which roles, when a role changes);
these are its statements.
"""
from __future__ import annotations

from datetime import datetime

from app.accounts.models import CustomerSso, PortalUser
from app.plumbing.models import utcnow


def get(customer_id: str) -> CustomerSso | None:
    return CustomerSso.get_or_none(CustomerSso.customer == customer_id)


def by_domain(domain: str) -> CustomerSso | None:
    """The settings whose domains include ``domain`` (lower case): at most one (the service keeps it so)."""
    return CustomerSso.get_or_none(CustomerSso.domains.contains(domain))


def owners_of(domains: list[str]) -> list[tuple[str, str]]:
    """(customer, domain) for each of ``domains`` some customer's settings hold already."""
    rows = CustomerSso.select(CustomerSso.customer, CustomerSso.domains).where(
        CustomerSso.domains.contains_any(domains))
    return [(row.customer_id, d) for row in rows for d in row.domains if d in domains]


def put(customer_id: str, **fields) -> None:
    """Create or replace the customer's settings in one statement."""
    fields["updated_at"] = utcnow()
    (CustomerSso.insert(customer=customer_id, **fields)
     .on_conflict(conflict_target=[CustomerSso.customer],
                  update={getattr(CustomerSso, name): value for name, value in fields.items()})
     .execute())


def delete(customer_id: str) -> int:
    return CustomerSso.delete().where(CustomerSso.customer == customer_id).execute()


def set_provisioned_role(user_id: str, role: str) -> None:
    PortalUser.update(role=role).where(PortalUser.id == user_id).execute()


def set_password_login_until(user_id: str, until: datetime | None) -> None:
    PortalUser.update(password_login_until=until).where(PortalUser.id == user_id).execute()


def insert_provisioned_user(*, user_id: str, customer_id: str, email: str, password_hash: str, role: str,
                            provisioned_by: str) -> PortalUser:
    return PortalUser.create(id=user_id, customer=customer_id, email=email, password_hash=password_hash,
                             role=role, provisioned_by=provisioned_by)
