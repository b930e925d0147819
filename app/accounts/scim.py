"""SCIM 2.0 provisioning of one customer's portal users (D32; resources of RFC 7643, protocol of RFC 7644).

A customer's identity provider holds a bearer token (``scim_`` + 256 random bits, shown once, stored
as its SHA-256 digest on the customer row, compared in constant time) and with it creates, reads,
lists, replaces, patches, deactivates and deletes the customer's portal users at ``/scim/v2/Users``.

What a SCIM ``User`` is here:
- ``userName`` is the user's login e-mail (the portal knows people by e-mail; single sign-on matches
  it), compared without case; it is unique across the service, so a name another customer's user
  holds is a 409 ``uniqueness`` as well (the answer says nothing of whose it is);
- ``roles``: one role per user, ``viewer``, ``developer`` or ``admin`` (several given: the most
  powerful, as roles nest; none: ``viewer``); ``owner`` is given by an owner in the portal only;
- ``active``: false disables the user and ends every session at once, as does a delete;
- ``externalId`` is kept as sent; ``emails`` is read only (the login e-mail); other attributes
  are ignored, in a body as in a PATCH path (providers send their whole attribute mapping).
An owner is listed and read but never changed by SCIM (403): the identity provider must not be able
to lock the customer out of its own portal (and the last-owner rule stays the portal's).

No flask here: ``app/accounts/routes/scim.py`` is the HTTP side; errors are the domain errors, whose ``code`` is
the SCIM ``scimType`` where RFC 7644 defines one.
"""
from __future__ import annotations

import json
import logging
import re
import secrets

from app.accounts import portal_roles, portal_users
from app.accounts.admin import get_customer
from app.accounts.models import PortalUser
from app.accounts.statements import customers as customer_store
from app.accounts.statements import users
from app.plumbing.crypto import SCIM_TOKEN_PREFIX, digest, same
from app.plumbing.db import transaction
from app.plumbing.errors import (  # RFC 7644's scimType values: the code of the domain error
    INVALID_FILTER,
    INVALID_PATH,
    INVALID_SYNTAX,
    INVALID_VALUE,
    MUTABILITY,
    NO_TARGET,
    UNIQUENESS,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotAuthenticated,
    NotFound,
)
from app.plumbing.models import iso, new_id, utcnow

log = logging.getLogger(__name__)

TOKEN_PREFIX = SCIM_TOKEN_PREFIX
MAX_TOKEN_LENGTH = 200
PROVISIONED_BY = "scim"  # ``PortalUser.provisioned_by`` of a user a SCIM client made

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
SEARCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"
SPC_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
RESOURCE_TYPE_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"
SCHEMA_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"

# The roles a SCIM client may give, most powerful first (``portal_roles.ROLES`` without the owner).
ROLES = tuple(role for role in portal_roles.ROLES if role != portal_roles.OWNER)
DEFAULT_ROLE = portal_roles.VIEWER
MAX_RESULTS = 200  # a page's most users (ServiceProviderConfig's filter.maxResults)
MAX_EXTERNAL_ID = 200


# ``attribute eq "value"``: the filter a provider sends to find a user before creating it.
_FILTER_RE = re.compile(r'^\s*(?:urn:ietf:params:scim:schemas:core:2\.0:User:)?(userName|externalId|id)\s+eq\s+'
                        r'("(?:[^"\\]|\\.)*")\s*$', re.IGNORECASE)
_ROLE_PATH_RE = re.compile(r"^roles(\[[^\]]*\])?(\.value)?$", re.IGNORECASE)
_CANONICAL = {"username": "userName", "externalid": "externalId", "active": "active", "roles": "roles",
              "emails": "emails", "id": "id", "meta": "meta", "schemas": "schemas"}
_READ_ONLY = ("emails", "id", "meta", "schemas")


# --- the customer's token -------------------------------------------------------------------------

def issue_token(customer_id: str) -> str:
    """A new token for the customer, replacing any earlier one; returned once, stored as its digest."""
    customer = get_customer(customer_id)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    customer_store.set_scim_token(customer.id, digest(token), utcnow())
    log.info("SCIM token issued for customer %s (an earlier one no longer works)", customer.id)
    return token


def revoke_token(customer_id: str) -> bool:
    """Revoke the customer's token; whether there was one."""
    customer = get_customer(customer_id)
    customer_store.set_scim_token(customer.id, None, None)
    if customer.scim_token_digest:
        log.info("SCIM token revoked for customer %s", customer.id)
    return customer.scim_token_digest is not None


def token_status(customer) -> dict:
    """What may be shown of the customer's token: whether one is set, and since when (never the token)."""
    return {"token_set": customer.scim_token_digest is not None, "token_set_at": iso(customer.scim_token_set_at)}


def authenticate(token: str | None) -> str:
    """The id of the customer whose live token this is, or raise ``NotAuthenticated``."""
    if not token:
        raise NotAuthenticated("send the header Authorization: Bearer <SCIM token>")
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        raise NotAuthenticated("the SCIM token is unknown or revoked", code="invalid_token")
    token_digest = digest(token)
    customer = customer_store.by_scim_token(token_digest)
    if customer is None or not same(customer.scim_token_digest or "", token_digest):
        raise NotAuthenticated("the SCIM token is unknown or revoked", code="invalid_token")
    return customer.id


# --- resources ------------------------------------------------------------------------------------

def user_resource(user: PortalUser, base_url: str) -> dict:
    body: dict = {"schemas": [USER_SCHEMA], "id": user.id}
    if user.scim_external_id is not None:
        body["externalId"] = user.scim_external_id
    body.update({
        "userName": user.email,
        "active": not user.disabled,
        "emails": [{"value": user.email, "type": "work", "primary": True}],
        "roles": [{"value": user.role}],
        # No lastModified: no time of a user's last change is kept (the portal changes users too).
        "meta": {"resourceType": "User", "created": iso(user.created_at), "location": f"{base_url}/Users/{user.id}"},
    })
    return body


def list_response(resources: list, *, total: int | None = None, start_index: int = 1) -> dict:
    return {"schemas": [LIST_SCHEMA], "totalResults": len(resources) if total is None else total,
            "startIndex": start_index, "itemsPerPage": len(resources), "Resources": resources}


ALWAYS_RETURNED = ("id", "schemas")


def select_attributes(resource: dict, *, attributes: str | None = None, excluded: str | None = None) -> dict:
    """``resource`` with only the ``attributes`` asked for, or without the ``excluded`` ones (RFC 7644
    section 3.4.2.5: comma-separated names, any case, with or without the schema's URN, ``parent.sub`` for a
    sub-attribute); ``id`` and ``schemas`` are always returned."""
    if attributes:
        wanted = _attribute_names(attributes)
        kept = {}
        for name, value in resource.items():
            subs = [sub for top, sub in wanted if top == name.lower()]
            if name in ALWAYS_RETURNED or None in subs:
                kept[name] = value
            elif subs:
                kept[name] = _sub_attributes(value, lambda key, subs=subs: key.lower() in subs)
        return kept
    if excluded:
        kept = dict(resource)
        for top, sub in _attribute_names(excluded):
            name = next((key for key in kept if key.lower() == top and key not in ALWAYS_RETURNED), None)
            if name is not None and sub is None:
                del kept[name]
            elif name is not None:
                kept[name] = _sub_attributes(kept[name], lambda key, sub=sub: key.lower() != sub)
        return kept
    return resource


def _attribute_names(text: str) -> list[tuple[str, str | None]]:
    names = []
    for part in text.split(","):
        part = part.strip()
        if part.lower().startswith(USER_SCHEMA.lower() + ":"):
            part = part[len(USER_SCHEMA) + 1:]
        top, _, sub = part.lower().partition(".")
        if top:
            names.append((top, sub or None))
    return names


def _sub_attributes(value, keep):
    if isinstance(value, list):
        return [_sub_attributes(item, keep) for item in value]
    if isinstance(value, dict):
        return {key: inner for key, inner in value.items() if keep(key)}
    return value


def get_user(customer_id: str, user_id: str, base_url: str) -> dict:
    return user_resource(_user(customer_id, user_id), base_url)


def list_users(customer_id: str, base_url: str, *, filter_text: str | None = None, start_index=None,
               count=None) -> dict:
    """A page of the customer's users, oldest first (``startIndex`` counts from 1)."""
    start = max(_integer(start_index, "startIndex", default=1), 1)
    size = min(max(_integer(count, "count", default=MAX_RESULTS), 0), MAX_RESULTS)
    match = parse_filter(filter_text) if filter_text else None
    total, page = users.customer_users_page(customer_id, match=match, offset=start - 1, limit=size)
    return list_response([user_resource(user, base_url) for user in page], total=total, start_index=start)


def parse_filter(text: str) -> tuple[str, str]:
    """``(attribute, value)`` of a filter ``userName eq "..."`` (or ``externalId``, ``id``), else ``invalidFilter``."""
    found = _FILTER_RE.match(text)
    if found is None:
        raise InvalidRequest('the filter must be userName eq "...", externalId eq "..." or id eq "..."',
                             code=INVALID_FILTER)
    attribute = _CANONICAL.get(found.group(1).lower(), found.group(1))
    value = json.loads(found.group(2))
    return attribute, portal_users.normalize_email(value) if attribute == "userName" else value


def create_user(customer_id: str, body, base_url: str) -> dict:
    fields = _fields_of(_resource_body(body))
    with transaction():
        users.lock_customer(customer_id)
        # None: taken, by this customer's user or by another's (whose request may be at the same moment)
        user = users.insert_unique_user(user_id=new_id("usr"), customer_id=customer_id, email=fields["email"],
                                        password_hash=portal_users.NO_PASSWORD, role=fields["role"],
                                        disabled=not fields["active"], provisioned_by=PROVISIONED_BY,
                                        scim_external_id=fields["external_id"])
        if user is None:
            raise _taken()
    log.info("portal user %s provisioned by SCIM with role %s", user.id, fields["role"])
    return user_resource(users.get(user.id), base_url)


def replace_user(customer_id: str, user_id: str, body, base_url: str) -> dict:
    """PUT: the user becomes what the body says (what it leaves out: the defaults)."""
    return _write(customer_id, user_id, lambda _user: _fields_of(_resource_body(body)), base_url)


def patch_user(customer_id: str, user_id: str, body, base_url: str) -> dict:
    """PATCH: each operation (add, replace, remove) applied in order to the user, all or none."""
    operations = _operations(body)
    return _write(customer_id, user_id, lambda user: _patched(user, operations), base_url)


def delete_user(customer_id: str, user_id: str) -> None:
    with transaction():
        users.lock_customer(customer_id)
        user = _managed(customer_id, user_id)
        users.delete_user(user.id)
    log.info("portal user %s deleted by SCIM (its sessions ended)", user.id)


def _write(customer_id: str, user_id: str, make_fields, base_url: str) -> dict:
    with transaction():
        users.lock_customer(customer_id)
        user = _managed(customer_id, user_id)
        fields = make_fields(user)
        if not users.set_provisioned(user.id, email=fields["email"], role=fields["role"],
                                     disabled=not fields["active"], scim_external_id=fields["external_id"]):
            raise _taken()
        ended = portal_users.end_user_sessions(user.id) if not fields["active"] else 0
    if fields["role"] != user.role or fields["active"] == bool(user.disabled):
        log.info("portal user %s changed by SCIM: role %s, %s, %d sessions ended", user.id, fields["role"],
                 "active" if fields["active"] else "deactivated", ended)
    return user_resource(users.get(user.id), base_url)


def _user(customer_id: str, user_id) -> PortalUser:
    user = users.customer_user(customer_id, user_id) if isinstance(user_id, str) and len(user_id) <= 40 else None
    if user is None:  # another customer's user is as unknown as a missing one
        raise NotFound("no such User")
    return user


def _managed(customer_id: str, user_id: str) -> PortalUser:
    user = _user(customer_id, user_id)
    if user.role == portal_roles.OWNER:
        raise Forbidden("an owner is managed in the portal, not by SCIM")
    return user


def _taken() -> Conflict:
    return Conflict("a user with this userName exists already", code=UNIQUENESS)


# --- reading what a client sent -------------------------------------------------------------------

def _resource_body(body) -> dict:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object", code=INVALID_SYNTAX)
    schemas = body.get("schemas")
    if schemas is not None and (not isinstance(schemas, list) or USER_SCHEMA not in schemas):
        raise InvalidRequest(f"schemas must list {USER_SCHEMA}", code=INVALID_SYNTAX)
    return _canonical(body)


def _canonical(values: dict) -> dict:
    """The attributes SCIM reads without case (RFC 7643, section 2.1), by their names here; others dropped."""
    kept = {}
    for name, value in values.items():
        bare = name.rsplit(":", 1)[-1] if name.lower().startswith(USER_SCHEMA.lower() + ":") else name
        if bare.lower() in _CANONICAL:
            kept[_CANONICAL[bare.lower()]] = value
    return kept


def _fields_of(attributes: dict) -> dict:
    """The user's fields from a whole resource's attributes (absent ones: the defaults)."""
    return {"email": _user_name(attributes.get("userName")), "role": _role(attributes.get("roles")),
            "active": _active(attributes.get("active", True)),
            "external_id": _external_id(attributes.get("externalId"))}


def _user_name(value) -> str:
    if value is None:
        raise InvalidRequest("userName is required", code=INVALID_VALUE)
    email = portal_users.normalize_email(value) if isinstance(value, str) else ""
    if "@" not in email or len(email) > 320 or any(c.isspace() for c in email):
        raise InvalidRequest("userName must be the user's e-mail address", code=INVALID_VALUE)
    return email


def _role(value) -> str:
    """The role of a ``roles`` value: a list of ``{value}`` objects (or of strings), or one of them."""
    if value is None:
        return DEFAULT_ROLE
    items = value if isinstance(value, list) else [value]
    given = set()
    for item in items:
        role = item.get("value") if isinstance(item, dict) else item
        role = role.strip().lower() if isinstance(role, str) else role
        if role not in ROLES:
            raise InvalidRequest(f"roles' values must be among {', '.join(ROLES)}", code=INVALID_VALUE)
        given.add(role)
    return next((role for role in ROLES if role in given), DEFAULT_ROLE)


def _active(value) -> bool:
    # Some providers send booleans as the strings "True" and "False".
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise InvalidRequest("active must be true or false", code=INVALID_VALUE)
    return value


def _external_id(value) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) > MAX_EXTERNAL_ID):
        raise InvalidRequest(f"externalId must be a string of at most {MAX_EXTERNAL_ID} characters",
                             code=INVALID_VALUE)
    return value


def _integer(value, name: str, *, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidRequest(f"{name} must be an integer", code=INVALID_VALUE) from None


def _operations(body) -> list[dict]:
    if not isinstance(body, dict) or PATCH_SCHEMA not in (body.get("schemas") or []):
        raise InvalidRequest(f"a PATCH body lists the schema {PATCH_SCHEMA}", code=INVALID_SYNTAX)
    operations = body.get("Operations", body.get("operations"))
    if not isinstance(operations, list) or not operations or not all(isinstance(op, dict) for op in operations):
        raise InvalidRequest("Operations must be a non-empty list of operations", code=INVALID_SYNTAX)
    return operations


def _patched(user: PortalUser, operations: list[dict]) -> dict:
    """The user's fields after ``operations``, checked as a whole resource's are."""
    attributes: dict = {"userName": user.email, "active": not user.disabled, "roles": user.role,
                        "externalId": user.scim_external_id}
    for operation in operations:
        op = str(operation.get("op", "")).lower()
        if op not in ("add", "replace", "remove"):
            raise InvalidRequest("op must be add, replace or remove", code=INVALID_SYNTAX)
        path, value = operation.get("path"), operation.get("value")
        if path is None:
            if op == "remove":
                raise InvalidRequest("remove needs a path", code=NO_TARGET)
            if not isinstance(value, dict):
                raise InvalidRequest("an operation without a path has an object value", code=INVALID_SYNTAX)
            attributes.update({name: v for name, v in _canonical(value).items() if name not in _READ_ONLY})
            continue
        name = _path_attribute(path)
        if name is None:
            continue
        if op == "remove":
            if name == "userName":
                raise InvalidRequest("userName is required: it cannot be removed", code=MUTABILITY)
            attributes[name] = True if name == "active" else None
        else:
            attributes[name] = value
    return _fields_of(attributes)


def _path_attribute(path) -> str | None:
    """The attribute a PATCH path changes, or None for one not kept here (``name.givenName``, ``title``,
    ``emails[type eq "work"].value``...: ignored, as in a whole body, since providers send their whole
    mapping); ``invalidPath`` for no path at all, ``mutability`` for ``id``, ``meta``, ``schemas``."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidRequest("path must be an attribute's name", code=INVALID_PATH)
    bare = path.strip()
    if bare.lower().startswith(USER_SCHEMA.lower() + ":"):
        bare = bare[len(USER_SCHEMA) + 1:]
    if _ROLE_PATH_RE.match(bare):
        return "roles"
    name = _CANONICAL.get(bare.lower())
    if name in ("id", "meta", "schemas"):
        raise InvalidRequest(f"{bare} is read only", code=MUTABILITY)
    return None if name == "emails" else name


# --- discovery ------------------------------------------------------------------------------------

def service_provider_config(base_url: str) -> dict:
    return {
        "schemas": [SPC_SCHEMA],
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [{
            "type": "oauthbearertoken", "name": "Bearer token", "primary": True,
            "description": "The customer's SCIM token (scim_...), issued by the operator: "
                           "Authorization: Bearer scim_..."}],
        "meta": {"resourceType": "ServiceProviderConfig", "location": f"{base_url}/ServiceProviderConfig"},
    }


def resource_types(base_url: str) -> list[dict]:
    return [{"schemas": [RESOURCE_TYPE_SCHEMA], "id": "User", "name": "User", "endpoint": "/Users",
             "description": "A user of the customer's portal", "schema": USER_SCHEMA,
             "meta": {"resourceType": "ResourceType", "location": f"{base_url}/ResourceTypes/User"}}]


def resource_type(type_id: str, base_url: str) -> dict:
    found = [item for item in resource_types(base_url) if item["id"] == type_id]
    if not found:
        raise NotFound("no such ResourceType")
    return found[0]


def _attribute(name: str, kind: str = "string", **overrides) -> dict:
    return {"name": name, "type": kind, "multiValued": False, "description": "", "required": False,
            "caseExact": False, "mutability": "readWrite", "returned": "default", "uniqueness": "none",
            **overrides}


def schemas(base_url: str) -> list[dict]:
    user = {
        "schemas": [SCHEMA_SCHEMA], "id": USER_SCHEMA, "name": "User", "description": "A user of the customer's portal",
        "attributes": [
            _attribute("userName", required=True, uniqueness="server",
                       description="The user's login e-mail address; unique across the service."),
            _attribute("active", "boolean", required=True,
                       description="False: the user cannot sign in, and its sessions end (absent: true)."),
            _attribute("emails", "complex", multiValued=True, mutability="readOnly",
                       description="The login e-mail, as the primary work address.",
                       subAttributes=[_attribute("value", mutability="readOnly"),
                                      _attribute("type", mutability="readOnly", canonicalValues=["work"]),
                                      _attribute("primary", "boolean", mutability="readOnly")]),
            _attribute("roles", "complex", multiValued=True, required=True,
                       description="The user's portal role: one of viewer, developer, admin (given several, the "
                                   "most powerful; absent: viewer).",
                       subAttributes=[_attribute("value", required=True, canonicalValues=list(ROLES))]),
        ],
        "meta": {"resourceType": "Schema", "location": f"{base_url}/Schemas/{USER_SCHEMA}"},
    }
    return [user]


def schema(schema_id: str, base_url: str) -> dict:
    found = [item for item in schemas(base_url) if item["id"] == schema_id]
    if not found:
        raise NotFound("no such Schema")
    return found[0]
