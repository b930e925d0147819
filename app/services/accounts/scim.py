"""SCIM 2.0 provisioning of portal users (D32; RFC 7643 and 7644), per customer.

A customer's identity provider holds a bearer token (``scim_`` + 43 random characters, shown
once by ``customers scim-token``; the database keeps its SHA-256 digest only, looked up by
digest and compared in constant time). With it, it creates, reads, lists (``filter`` on
``userName eq "..."``, ``startIndex``/``count``), replaces, patches and deletes the customer's
portal users: ``userName`` is the e-mail, ``active: false`` disables the user and ends every
session at once, ``roles`` (``viewer``, ``developer``, ``admin``, ``owner``) sets the role.
A user made here has no password: it signs in through the customer's single sign-on, or an
owner gives it a set-password link. The last enabled owner is never deactivated, demoted or
deleted. Every refusal is a ``ScimError`` (status, ``scimType``, detail), which the view
writes in SCIM's error schema. No flask here.
"""
from __future__ import annotations

import hmac
import logging
import re
import secrets

from app.db import transaction
from app.models import PortalUser, iso, new_id
from app.services.accounts import portal_roles, portal_users
from app.services.accounts.accounts import get_customer
from app.services.shared.crypto import digest
from app.store.accounts import scim as scim_store
from app.store.accounts import sso as sso_store
from app.store.accounts import users

log = logging.getLogger(__name__)

TOKEN_PREFIX = "scim_"  # noqa: S105 (a prefix, not a secret)
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
MAX_RESULTS = 200
PROVISIONED_BY_SCIM = "scim"
_FILTER = re.compile(r'\s*userName\s+eq\s+"((?:[^"\\]|\\.)*)"\s*', re.IGNORECASE)


class ScimError(Exception):
    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type

    def body(self) -> dict:
        found = {"schemas": [ERROR_SCHEMA], "status": str(self.status), "detail": self.detail}
        if self.scim_type:
            found["scimType"] = self.scim_type
        return found


# --- the token ----------------------------------------------------------------------------------


def issue_token(customer_id: str) -> str:
    """A new token for the customer (the previous one stops working); returned once, kept as its digest."""
    get_customer(customer_id)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    scim_store.set_token_digest(customer_id, digest(token))
    log.info("SCIM token of %s issued", customer_id)
    return token


def revoke_token(customer_id: str) -> bool:
    get_customer(customer_id)
    return bool(scim_store.set_token_digest(customer_id, None))


def authenticate(authorization: str | None) -> str:
    """The customer whose token the ``Authorization: Bearer`` header carries; 401 otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        raise ScimError(401, "a SCIM bearer token is needed")
    wanted = digest(token)
    customer = scim_store.customer_by_token_digest(wanted)
    if customer is None or not hmac.compare_digest(customer.scim_token_digest or "", wanted):
        raise ScimError(401, "the SCIM bearer token is not valid")
    return customer.id


# --- users ----------------------------------------------------------------------------------------


def resource(user: PortalUser, base_url: str) -> dict:
    return {"schemas": [USER_SCHEMA], "id": user.id, "userName": user.email, "active": not user.disabled,
            "emails": [{"value": user.email, "primary": True}],
            "roles": [{"value": user.role, "primary": True}],
            "meta": {"resourceType": "User", "created": iso(user.created_at),
                     "lastModified": iso(user.created_at), "location": f"{base_url}/Users/{user.id}"}}


def _user(customer_id: str, user_id: str) -> PortalUser:
    found = users.customer_user(customer_id, user_id) if isinstance(user_id, str) else None
    if found is None:
        raise ScimError(404, f"no user {str(user_id)[:60]}")
    return found


def _email(value) -> str:
    email = portal_users.normalize_email(value if isinstance(value, str) else "")
    if "@" not in email or len(email) > 320 or any(ch.isspace() for ch in email):
        raise ScimError(400, "userName must be an e-mail address", "invalidValue")
    return email


def _role(value) -> str:
    """``roles``: a list of ``{"value": role}`` (or of strings); the most powerful one given."""
    items = value if isinstance(value, list) else [value]
    names = [i.get("value") if isinstance(i, dict) else i for i in items]
    for name in names:
        if name not in portal_roles.ROLES:
            raise ScimError(400, f"roles must be of {', '.join(portal_roles.ROLES)}", "invalidValue")
    if not names:
        return portal_roles.VIEWER
    return next(r for r in portal_roles.ROLES if r in names)


def _active(value) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):  # some providers send strings
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ScimError(400, "active must be true or false", "invalidValue")
    return value


def _check_owner_kept(customer_id: str) -> None:
    if users.enabled_owner_count(customer_id) < 1:
        raise ScimError(400, "the account must keep at least one enabled owner", "mutability")


def create(customer_id: str, body) -> PortalUser:
    if not isinstance(body, dict):
        raise ScimError(400, "the body must be a SCIM User", "invalidSyntax")
    email = _email(body.get("userName"))
    role = _role(body.get("roles", []))
    active = _active(body.get("active", True))
    with transaction():
        users.lock_customer(customer_id)
        if users.by_email(email) is not None:
            raise ScimError(409, "a user with this userName exists already", "uniqueness")
        user = sso_store.insert_provisioned_user(user_id=new_id("usr"), customer_id=customer_id, email=email,
                                                 password_hash=portal_users.NO_PASSWORD, role=role,
                                                 provisioned_by=PROVISIONED_BY_SCIM)
        if not active:
            users.set_disabled(user.id, True)
    log.info("portal user %s made by SCIM for %s with role %s", user.id, customer_id, role)
    return users.get(user.id)


def get(customer_id: str, user_id: str) -> PortalUser:
    return _user(customer_id, user_id)


def parse_filter(text) -> str | None:
    """The e-mail of ``userName eq "..."`` (the one filter served), None without a filter."""
    if text is None or text == "":
        return None
    match = _FILTER.fullmatch(text) if isinstance(text, str) and len(text) <= 1000 else None
    if match is None:
        raise ScimError(400, 'only filter=userName eq "..." is supported', "invalidFilter")
    return portal_users.normalize_email(re.sub(r"\\(.)", r"\1", match.group(1)))


def _positive(value, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ScimError(400, f"{name} must be an integer", "invalidValue") from None
    return number


def list_users(customer_id: str, *, filter_text=None, start_index=None, count=None) -> tuple[int, int, list]:
    """(totalResults, startIndex, the page's users); RFC 7644 §3.4.2.4: a startIndex below 1 is 1,
    a negative count 0; at most ``MAX_RESULTS`` a page."""
    email = parse_filter(filter_text)
    start = max(1, _positive(start_index, "startIndex", 1))
    size = min(MAX_RESULTS, max(0, _positive(count, "count", MAX_RESULTS)))
    total, rows = scim_store.page(customer_id, email=email, offset=start - 1, limit=size)
    return total, start, rows


def _apply(customer_id: str, user: PortalUser, *, email=None, role=None, active=None) -> PortalUser:
    """The changes of a replace or a patch, in one transaction: the last owner rule holds after them,
    and a deactivation ends the user's sessions at once."""
    with transaction():
        users.lock_customer(customer_id)
        if email is not None and email != user.email:
            other = users.by_email(email)
            if other is not None:
                raise ScimError(409, "a user with this userName exists already", "uniqueness")
            scim_store.set_email(user.id, email)
        if role is not None and role != user.role:
            users.set_role(user.id, role)
        if active is not None and active == bool(user.disabled):
            users.set_disabled(user.id, not active)
            if not active:
                portal_users.end_user_sessions(user.id)
        _check_owner_kept(customer_id)
    if active is False and not user.disabled:
        log.info("portal user %s deactivated by SCIM; sessions ended", user.id)
    return users.get(user.id)


def replace(customer_id: str, user_id: str, body) -> PortalUser:
    user = _user(customer_id, user_id)
    if not isinstance(body, dict):
        raise ScimError(400, "the body must be a SCIM User", "invalidSyntax")
    return _apply(customer_id, user, email=_email(body.get("userName")), role=_role(body.get("roles", [])),
                  active=_active(body.get("active", True)))


def patch(customer_id: str, user_id: str, body) -> PortalUser:
    """RFC 7644 §3.5.2: ``add``/``replace`` of ``active``, ``roles``, ``userName`` (by path, or a
    value object without one); ``remove`` of ``roles`` (back to viewer)."""
    user = _user(customer_id, user_id)
    if not isinstance(body, dict) or PATCH_SCHEMA not in (body.get("schemas") or []) \
            or not isinstance(body.get("Operations"), list) or not body["Operations"]:
        raise ScimError(400, "the body must be a PatchOp with Operations", "invalidSyntax")
    changes: dict = {}
    for operation in body["Operations"]:
        if not isinstance(operation, dict):
            raise ScimError(400, "each operation must be an object", "invalidSyntax")
        op = str(operation.get("op", "")).lower()
        path = operation.get("path")
        value = operation.get("value")
        if op == "remove":
            if not isinstance(path, str) or path.lower() != "roles":
                raise ScimError(400, "only roles can be removed", "noTarget")
            changes["role"] = portal_roles.VIEWER
            continue
        if op not in ("add", "replace"):
            raise ScimError(400, "op must be add, replace or remove", "invalidSyntax")
        values = {path: value} if isinstance(path, str) else value
        if not isinstance(values, dict):
            raise ScimError(400, "an operation without a path takes an object", "invalidValue")
        for name, item in values.items():
            key = str(name).lower()
            if key == "active":
                changes["active"] = _active(item)
            elif key == "roles":
                changes["role"] = _role(item)
            elif key == "username":
                changes["email"] = _email(item)
            elif key not in ("schemas", "id", "meta", "emails", "name", "displayname"):
                raise ScimError(400, f"{str(name)[:60]} cannot be changed", "invalidPath")
    return _apply(customer_id, user, **changes)


def delete(customer_id: str, user_id: str) -> None:
    with transaction():
        users.lock_customer(customer_id)
        user = _user(customer_id, user_id)
        scim_store.delete_user(user.id)  # its sessions and recovery codes go with it (ON DELETE CASCADE)
        _check_owner_kept(customer_id)
    log.info("portal user %s deleted by SCIM", user_id)
