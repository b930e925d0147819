"""SCIM 2.0 at ``/scim/v2/`` (D32; RFC 7643, RFC 7644): a customer's identity provider provisions
its portal users with the customer's SCIM bearer token (``customers scim-token``).

Outside the scan API's document and accounting: a SCIM token is not an API key, a call costs
nothing, and every answer (errors included) is ``application/scim+json`` in SCIM's own shapes.
The rules are ``app.services.accounts.scim``'s.
"""
from __future__ import annotations

import json

from flask import Blueprint, Response, g, request

from app.db import db
from app.services.accounts import portal_roles, scim

PREFIX = "/scim/v2"
MEDIA_TYPE = "application/scim+json"
MAX_BODY_BYTES = 64 * 1024

blp = Blueprint("scim", __name__, url_prefix=PREFIX)


def answer(body: dict | None, status: int = 200, headers: dict | None = None) -> Response:
    text = "" if body is None else json.dumps(body)
    response = Response(text, status=status, headers=headers or {},
                        mimetype=MEDIA_TYPE if body is not None else None)
    response.headers["Cache-Control"] = "no-store"  # users' e-mails
    return response


@blp.errorhandler(scim.ScimError)
def scim_error(exc: scim.ScimError):
    headers = {"WWW-Authenticate": 'Bearer realm="scim"'} if exc.status == 401 else {}
    return answer(exc.body(), exc.status, headers)


@blp.before_request
def authenticate():
    g.scim_customer = None
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise scim.ScimError(413, f"the body is larger than {MAX_BODY_BYTES} bytes", "tooLarge")
    with db.connection_context():
        g.scim_customer = scim.authenticate(request.headers.get("Authorization"))


def body():
    data = request.get_json(force=True, silent=True)
    if not isinstance(data, dict):
        raise scim.ScimError(400, "the body must be a JSON object", "invalidSyntax")
    return data


def base_url() -> str:
    return request.url_root.rstrip("/") + PREFIX


@blp.get("/Users")
def list_users():
    with db.connection_context():
        total, start, rows = scim.list_users(g.scim_customer, filter_text=request.args.get("filter"),
                                             start_index=request.args.get("startIndex"),
                                             count=request.args.get("count"))
        resources = [scim.resource(u, base_url()) for u in rows]
    return answer({"schemas": [scim.LIST_SCHEMA], "totalResults": total, "startIndex": start,
                   "itemsPerPage": len(resources), "Resources": resources})


@blp.post("/Users")
def create_user():
    with db.connection_context():
        user = scim.create(g.scim_customer, body())
        made = scim.resource(user, base_url())
    return answer(made, 201, {"Location": made["meta"]["location"]})


@blp.get("/Users/<user_id>")
def get_user(user_id):
    with db.connection_context():
        return answer(scim.resource(scim.get(g.scim_customer, user_id), base_url()))


@blp.put("/Users/<user_id>")
def replace_user(user_id):
    with db.connection_context():
        return answer(scim.resource(scim.replace(g.scim_customer, user_id, body()), base_url()))


@blp.patch("/Users/<user_id>")
def patch_user(user_id):
    with db.connection_context():
        return answer(scim.resource(scim.patch(g.scim_customer, user_id, body()), base_url()))


@blp.delete("/Users/<user_id>")
def delete_user(user_id):
    with db.connection_context():
        scim.delete(g.scim_customer, user_id)
    return answer(None, 204)


@blp.get("/ServiceProviderConfig")
def service_provider_config():
    return answer({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"],
        "patch": {"supported": True}, "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": scim.MAX_RESULTS},
        "changePassword": {"supported": False}, "sort": {"supported": False}, "etag": {"supported": False},
        "authenticationSchemes": [{"type": "oauthbearertoken", "name": "Bearer token", "primary": True,
                                   "description": "The customer's SCIM token (scim_...), from its account manager."}],
        "meta": {"resourceType": "ServiceProviderConfig", "location": f"{base_url()}/ServiceProviderConfig"}})


def _user_resource_type() -> dict:
    return {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"], "id": "User", "name": "User",
            "endpoint": "/Users", "schema": scim.USER_SCHEMA, "description": "A portal user",
            "meta": {"resourceType": "ResourceType", "location": f"{base_url()}/ResourceTypes/User"}}


def _attribute(name, kind="string", **extra) -> dict:
    return {"name": name, "type": kind, "multiValued": False, "required": False, "caseExact": False,
            "mutability": "readWrite", "returned": "default", "uniqueness": "none", **extra}


def _user_schema() -> dict:
    return {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Schema"], "id": scim.USER_SCHEMA, "name": "User",
            "description": "A portal user: its e-mail is its userName",
            "attributes": [
                _attribute("userName", required=True, uniqueness="server",
                           description="The user's e-mail address"),
                _attribute("active", "boolean", description="false: the user cannot sign in; sessions end"),
                _attribute("emails", "complex", multiValued=True, mutability="readOnly",
                           subAttributes=[_attribute("value"), _attribute("primary", "boolean")]),
                _attribute("roles", "complex", multiValued=True,
                           description=f"One of {', '.join(portal_roles.ROLES)}",
                           subAttributes=[_attribute("value", canonicalValues=list(portal_roles.ROLES)),
                                          _attribute("primary", "boolean")]),
            ],
            "meta": {"resourceType": "Schema", "location": f"{base_url()}/Schemas/{scim.USER_SCHEMA}"}}


@blp.get("/ResourceTypes")
def resource_types():
    return answer({"schemas": [scim.LIST_SCHEMA], "totalResults": 1, "startIndex": 1, "itemsPerPage": 1,
                   "Resources": [_user_resource_type()]})


@blp.get("/ResourceTypes/User")
def resource_type_user():
    return answer(_user_resource_type())


@blp.get("/Schemas")
def schemas():
    return answer({"schemas": [scim.LIST_SCHEMA], "totalResults": 1, "startIndex": 1, "itemsPerPage": 1,
                   "Resources": [_user_schema()]})


@blp.get(f"/Schemas/{scim.USER_SCHEMA}")
def schema_user():
    return answer(_user_schema())
