"""SCIM 2.0 at ``/scim/v2/`` (D32): a customer's identity provider provisions its portal users.

Not the customer API: no API key, no credits, no activity entry, not in the OpenAPI document. Each
view is wrapped by ``scim_authenticated`` (the customer's SCIM bearer token, ``app.accounts.scim``),
and the app refuses to start with a view under ``/scim/`` that is not (``api_calls.check_accounted``).
Answers are ``application/scim+json``; errors, whatever raised them (a refusal, a 404 of an unknown
path, a 405, a body too large), are in SCIM's error schema (``app.errors.error_response``).
"""
from __future__ import annotations

from functools import wraps

from flask import Blueprint, Response, current_app, g, request
from werkzeug.exceptions import BadRequest, UnsupportedMediaType

from app.accounts import scim
from app.api.answers import base_url
from app.plumbing.errors import InvalidRequest

PREFIX = "/scim/v2"
MEDIA_TYPE = "application/scim+json"
BODY_TYPES = ("application/scim+json", "application/json")

blp = Blueprint("scim", __name__, url_prefix=PREFIX)


def scim_authenticated(view):
    """The view, run for the customer whose SCIM token the request presents (``g.scim_customer_id``);
    401 in SCIM's error schema otherwise. ``check_accounted`` looks for the mark it leaves."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        g.scim_customer_id = scim.authenticate(token.strip() if scheme.lower() == "bearer" else None)
        return view(*args, **kwargs)

    wrapper.scim_authenticated = True  # type: ignore[attr-defined]
    return wrapper


def _answer(body: dict | None, status: int = 200, location: str | None = None) -> Response:
    if body is None:
        return Response(status=status)
    response = Response(current_app.json.dumps(body), status=status, mimetype=MEDIA_TYPE)
    if location:
        response.headers["Location"] = location
    return response


def _base_url() -> str:
    """Where the resources are (``meta.location``, ``Location``): under ``PUBLIC_BASE_URL`` (production
    requires it), not a client's Host header."""
    return base_url() + PREFIX


def _body():
    """The request's JSON (``application/scim+json`` or ``application/json``), or an ``invalidSyntax`` refusal."""
    if request.mimetype not in BODY_TYPES:
        raise UnsupportedMediaType()
    try:
        return request.get_json(force=True)
    except BadRequest:
        raise InvalidRequest("the request body is not valid JSON", code=scim.INVALID_SYNTAX) from None


@blp.after_request
def no_store(response):
    # Users' e-mails and roles: no cache may keep them.
    response.headers["Cache-Control"] = "no-store"
    return response


@blp.get("/ServiceProviderConfig")
@scim_authenticated
def service_provider_config():
    return _answer(scim.service_provider_config(_base_url()))


@blp.get("/ResourceTypes")
@scim_authenticated
def resource_types():
    return _answer(scim.list_response(scim.resource_types(_base_url())))


@blp.get("/ResourceTypes/<type_id>")
@scim_authenticated
def resource_type(type_id):
    return _answer(scim.resource_type(type_id, _base_url()))


@blp.get("/Schemas")
@scim_authenticated
def schemas():
    return _answer(scim.list_response(scim.schemas(_base_url())))


@blp.get("/Schemas/<path:schema_id>")
@scim_authenticated
def schema(schema_id):
    return _answer(scim.schema(schema_id, _base_url()))


def _selected(resource: dict, given) -> dict:
    """The resource with the attributes the request asks for (``attributes``, ``excludedAttributes``)."""
    return scim.select_attributes(resource, attributes=given.get("attributes"),
                                  excluded=given.get("excludedAttributes"))


def _listed(given) -> Response:
    page = scim.list_users(g.scim_customer_id, _base_url(), filter_text=given.get("filter"),
                           start_index=given.get("startIndex"), count=given.get("count"))
    page["Resources"] = [_selected(resource, given) for resource in page["Resources"]]
    return _answer(page)


@blp.get("/Users")
@scim_authenticated
def list_users():
    return _listed(request.args)


@blp.post("/Users/.search")
@blp.post("/.search")
@scim_authenticated
def search_users():
    """A query sent as a body (RFC 7644, section 3.4.3): the same parameters as the list's. At the root too,
    where it searches every resource type: Users are the only one."""
    body = _body()
    if not isinstance(body, dict) or scim.SEARCH_SCHEMA not in (body.get("schemas") or []):
        raise InvalidRequest(f"a search body lists the schema {scim.SEARCH_SCHEMA}", code=scim.INVALID_SYNTAX)
    given = {name: ",".join(value) if isinstance(value, list) else value for name, value in body.items()}
    return _listed(given)


@blp.post("/Users")
@scim_authenticated
def create_user():
    body = scim.create_user(g.scim_customer_id, _body(), _base_url())
    return _answer(_selected(body, request.args), 201, location=body["meta"]["location"])


@blp.get("/Users/<user_id>")
@scim_authenticated
def get_user(user_id):
    return _answer(_selected(scim.get_user(g.scim_customer_id, user_id, _base_url()), request.args))


@blp.put("/Users/<user_id>")
@scim_authenticated
def replace_user(user_id):
    return _answer(_selected(scim.replace_user(g.scim_customer_id, user_id, _body(), _base_url()), request.args))


@blp.patch("/Users/<user_id>")
@scim_authenticated
def patch_user(user_id):
    return _answer(_selected(scim.patch_user(g.scim_customer_id, user_id, _body(), _base_url()), request.args))


@blp.delete("/Users/<user_id>")
@scim_authenticated
def delete_user(user_id):
    scim.delete_user(g.scim_customer_id, user_id)
    return _answer(None, 204)
