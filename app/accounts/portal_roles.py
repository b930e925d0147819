"""Portal roles (D21): what each role may do, written once.

A portal view declares the one permission it needs (``app.portal.security.requires``);
this table says which roles hold it. Roles nest: each holds everything of the role below
it, and the owner holds everything.

- ``viewer``: reads only (every page), and the user's own login (two-factor enrolment).
- ``developer``: also webhooks (URL, secrets, test events), deliveries (redeliver) and scans.
- ``admin``: also keys' scopes, expiry and allowlists, webhook endpoints, and the sign-in and
  provisioning settings: single sign-on, SCIM and the audit sinks (to read: an operator sets them).
- ``owner``: also the users and the customer's settings.

No flask here: the portal asks, and the tests walk every role through every view with it.
"""
from __future__ import annotations

from app.plumbing.errors import AccountError

OWNER, ADMIN, DEVELOPER, VIEWER = "owner", "admin", "developer", "viewer"
ROLES = (OWNER, ADMIN, DEVELOPER, VIEWER)  # most powerful first

READ = "read"              # every page that shows something and changes nothing
ACCOUNT = "account"        # the user's own login: two-factor enrolment, recovery codes
SCANS = "scans"            # scan actions in the portal
WEBHOOKS = "webhooks"      # a key's webhook URL, payload, signing secrets, test events
DELIVERIES = "deliveries"  # redeliver a delivery
KEY_ACCESS = "key_access"  # a key's scopes, expiry and IP allowlist
ENDPOINTS = "endpoints"    # a key's webhook endpoints
SSO = "sso"                # the customer's SSO, SCIM and audit sink settings, read only (an operator sets them, D32)
USERS = "users"            # add users, change roles, disable users
SETTINGS = "settings"      # the customer's settings (two-factor required)

_VIEWER = frozenset({READ, ACCOUNT})
_DEVELOPER = _VIEWER | {SCANS, WEBHOOKS, DELIVERIES}
_ADMIN = _DEVELOPER | {KEY_ACCESS, ENDPOINTS, SSO}
_OWNER = _ADMIN | {USERS, SETTINGS}

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {OWNER: _OWNER, ADMIN: _ADMIN, DEVELOPER: _DEVELOPER, VIEWER: _VIEWER}
PERMISSIONS = _OWNER

ROLE_WORDS = {
    OWNER: "Owner: everything, including users and the account's settings",
    ADMIN: "Admin: keys' access (scopes, expiry, allowed addresses) and webhook endpoints, and all a developer does",
    DEVELOPER: "Developer: webhooks, deliveries and scans, and all a viewer sees",
    VIEWER: "Viewer: reads only",
}


def allows(role: str | None, permission: str) -> bool:
    """Whether ``role`` holds ``permission``; an unknown role holds nothing (fail closed)."""
    return permission in ROLE_PERMISSIONS.get(role or "", frozenset())


def check_role(role) -> str:
    if role not in ROLE_PERMISSIONS:
        raise AccountError(f"role must be one of {', '.join(ROLES)}")
    return role


def check_permission(permission: str) -> str:
    """A permission a view may declare (a typo must fail at start, not refuse everyone)."""
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown portal permission {permission!r}; one of {', '.join(sorted(PERMISSIONS))}")
    return permission
