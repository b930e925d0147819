"""portal_roles: the one table of what each portal role may do (D21)."""
import pytest

from app.accounts import portal_roles as roles
from app.plumbing.errors import AccountError


def test_the_owner_holds_every_permission():
    assert roles.ROLE_PERMISSIONS[roles.OWNER] == roles.PERMISSIONS
    assert all(roles.allows(roles.OWNER, p) for p in roles.PERMISSIONS)


@pytest.mark.parametrize("role, allowed, refused", [
    (roles.VIEWER, {roles.READ, roles.ACCOUNT},
     {roles.SCANS, roles.WEBHOOKS, roles.DELIVERIES, roles.KEY_ACCESS, roles.ENDPOINTS, roles.USERS, roles.SETTINGS}),
    (roles.DEVELOPER, {roles.READ, roles.ACCOUNT, roles.SCANS, roles.WEBHOOKS, roles.DELIVERIES},
     {roles.KEY_ACCESS, roles.ENDPOINTS, roles.USERS, roles.SETTINGS}),
    (roles.ADMIN, {roles.READ, roles.SCANS, roles.WEBHOOKS, roles.DELIVERIES, roles.KEY_ACCESS, roles.ENDPOINTS},
     {roles.USERS, roles.SETTINGS}),
])
def test_each_role_holds_what_d21_gives_it_and_nothing_more(role, allowed, refused):
    assert all(roles.allows(role, p) for p in allowed)
    assert not any(roles.allows(role, p) for p in refused)


def test_roles_nest_each_holds_everything_below_it():
    ordered = [roles.ROLE_PERMISSIONS[r] for r in roles.ROLES]
    assert all(higher > lower for higher, lower in zip(ordered, ordered[1:], strict=False))


@pytest.mark.parametrize("role", [None, "", "root", "Owner"])
def test_an_unknown_role_holds_nothing(role):
    assert not any(roles.allows(role, p) for p in roles.PERMISSIONS)
    with pytest.raises(AccountError):
        roles.check_role(role)


def test_a_view_cannot_declare_a_permission_that_does_not_exist():
    with pytest.raises(ValueError, match="unknown portal permission"):
        roles.check_permission("webhook")
    assert roles.check_permission(roles.WEBHOOKS) == roles.WEBHOOKS
