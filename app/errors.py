"""One error shape for every layer (D1).

Services raise the domain errors of ``app.plumbing.errors``; ``SERVICE_ERROR_STATUS``
below is the one table of their HTTP statuses and headers. ``ApiError`` is what the
HTTP layer itself raises. The handlers below turn both, webargs validation errors, werkzeug's
HTTP errors (404, 405, 413...) and anything
unexpected into ``{"ok": false, "error", "message", "request_id"[, "details"]}``
with ``Content-Type: application/json``. No stack trace or HTML page reaches a client.
"""
from __future__ import annotations

import logging

from flask import Flask, current_app, g, jsonify, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from app.plumbing import errors as domain
from app.plumbing.db import CONNECTION_ERRORS

log = logging.getLogger("app.errors")


class ApiError(Exception):
    """An answer that is an error: HTTP status, machine code, sentence for people."""

    def __init__(self, status: int, error: str, message: str, *, details=None, headers=None):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.details = details
        self.headers = headers or {}


# Each domain error's HTTP status (the first class that matches, so subclasses first).
SERVICE_ERROR_STATUS = (
    (domain.DeliveryNotFound, 404),
    (domain.EndpointNotFound, 404),
    (domain.DeliveryPending, 409),
    (domain.WebhookUrlMissing, 400),
    (domain.PayloadTooLarge, 413),
    (domain.InvalidRequired, 400),
    (domain.InvalidRequest, 400),
    (domain.NotAuthenticated, 401),
    (domain.CallbackRefused, 401),
    (domain.InsufficientBalance, 402),
    (domain.Forbidden, 403),
    (domain.NotFound, 404),
    (domain.Conflict, 409),
    (domain.RateLimited, 429),
    (domain.EngineUnavailable, 502),
    (domain.TryAgain, 503),
    (domain.ServiceError, 400),
)


def from_service_error(exc: domain.ServiceError) -> ApiError:
    """The HTTP answer of a domain error: its status, and the headers its data calls for."""
    status = next(code for cls, code in SERVICE_ERROR_STATUS if isinstance(exc, cls))
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = exc.retry_after
    if isinstance(exc, domain.NotAuthenticated):
        challenge = 'Bearer realm="api"'
        headers["WWW-Authenticate"] = challenge + (f', error="{exc.code}"' if exc.code != "unauthorized" else "")
    return ApiError(status, exc.code, exc.message, details=exc.details, headers=headers)


# Messages for werkzeug's own errors, so 404/405/413 read like the rest of the API.
HTTP_CODES = {
    400: ("invalid_request", "the request could not be understood"),
    404: ("not_found", "no such resource"),
    405: ("method_not_allowed", "this method is not allowed on this path"),
    413: ("payload_too_large", "the request body is too large"),
    415: ("unsupported_media_type", "the request body must be application/json"),
    431: ("headers_too_large", "the request headers are too large"),
}



def allow_header(methods) -> str:
    """The ``Allow`` value of a path: the methods that act on it. OPTIONS, which every path
    answers (for free, with this header), is left out, so ``/api/v1/scan/bulk`` says ``POST``."""
    return ", ".join(sorted(m for m in methods if m != "OPTIONS"))


SCIM_PATH = "/scim/"
SCIM_ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"


def scim_error_response(status, error, message, *, headers=None):
    """An error of ``/scim/`` in SCIM's error schema (RFC 7644, section 3.12): the status as a string, and
    ``scimType`` when the error's code is one SCIM defines."""
    body = {"schemas": [SCIM_ERROR_SCHEMA], "status": str(status), "detail": message}
    if error in domain.SCIM_TYPES:
        body["scimType"] = error
    response = current_app.response_class(current_app.json.dumps(body), status=status,
                                          mimetype="application/scim+json")
    for name, value in (headers or {}).items():
        response.headers[name] = str(value)
    return response


def error_response(status, error, message, *, details=None, headers=None):
    if request.path.startswith(SCIM_PATH):  # the identity providers' protocol has its own error body
        return scim_error_response(status, error, message, headers=headers)
    body = {"ok": False, "error": error, "message": message, "request_id": g.get("request_id")}
    if details:
        body["details"] = details
    response = jsonify(body)
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = str(value)
    return response


def service_unavailable():
    return error_response(503, "service_unavailable", "the database cannot be reached; try again shortly",
                          headers={"Retry-After": 5})


def size_words(size: int) -> str:
    """A byte count as people write it: 262144 -> "256 KB", 1048576 -> "1 MB"."""
    for unit, factor in (("MB", 1024 * 1024), ("KB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size:,} bytes"


def _validation_details(data) -> dict:
    """webargs nests messages by location ({"json": {field: [...]}}); clients want fields, each with a
    list of sentences (the documented shape): an item's messages are under ``field[index]``."""
    messages = (data or {}).get("messages") or {}
    details: dict[str, list] = {}
    for location_messages in messages.values():
        if isinstance(location_messages, dict):
            for field, found in location_messages.items():
                _flatten(str(field), found, details)
        else:
            details.setdefault("_schema", []).extend(location_messages)
    return details


def _flatten(where: str, found, details: dict) -> None:
    if isinstance(found, dict):
        for key, inner in found.items():
            _flatten(f"{where}[{key}]" if str(key).isdigit() else f"{where}.{key}", inner, details)
    else:
        details.setdefault(where, []).extend(str(m) for m in (found if isinstance(found, list) else [found]))


UNKNOWN_FIELD = "Unknown field."  # marshmallow's message for a field no schema declares


def query_error(details: dict) -> ApiError:
    """400 naming the query parameters that are invalid or unknown (``details``: name -> messages)."""
    names = sorted(details)
    unknown = all(details[name] == [UNKNOWN_FIELD] for name in names)
    plural = "s" if len(names) > 1 else ""
    message = f"{'unknown' if unknown else 'invalid'} query parameter{plural}: {', '.join(names)}"
    return ApiError(400, "invalid_request", message, details=details)


def handle_api_error(exc: ApiError):
    return error_response(exc.status, exc.error, exc.message, details=exc.details, headers=exc.headers)


def handle_service_error(exc: domain.ServiceError):
    return handle_api_error(from_service_error(exc))


def handle_http_exception(exc: HTTPException):
    if isinstance(exc, CSRFError):
        # Why, for the operator ("The referrer does not match the host.", "The CSRF token is missing."):
        # the customer sees one message for all, as a form that cannot be trusted says no more.
        log.warning("CSRF check failed: %s", exc.description)
        if current_app.config.get("SESSION_COOKIE_SECURE") and not request.is_secure:
            # The session cookie (and the CSRF secret in it) is Secure: over plain HTTP the
            # browser never sends it back, so every form fails. Say so rather than "reload".
            return error_response(400, "csrf_failed", "the portal must be reached over HTTPS: over plain HTTP "
                                  "the browser does not send the session cookie, so no form can be accepted")
        return error_response(400, "csrf_failed", "the form is missing a valid CSRF token; reload the page and retry")
    data = getattr(exc, "data", None)
    if exc.code in (400, 422) and data and "messages" in data:
        details = _validation_details(data)
        fields = sorted({f.split("[")[0].split(".")[0] for f in details if f != "_schema"})
        if "query" in data["messages"]:
            return handle_api_error(query_error(details))
        if fields:
            where = "a query parameter is" if "query" in (data.get("messages") or {}) else "the request body is"
            message = f"{where} invalid: {', '.join(fields)}"
        elif any("JSON" in m for m in details.get("_schema", [])):
            message = "the request body is not valid JSON"
        else:
            message = "the request body must be a JSON object"
        return error_response(400, "invalid_request", message, details=details)
    if exc.code == 500:
        return handle_unexpected(getattr(exc, "original_exception", None) or exc)
    error, message = HTTP_CODES.get(exc.code, ("http_error", exc.description or exc.name))
    if exc.code == 413 and current_app.config.get("MAX_CONTENT_LENGTH"):
        message = f"the request body is larger than {size_words(current_app.config['MAX_CONTENT_LENGTH'])}"
    if exc.code == 400 and exc.description and "JSON" in exc.description:
        message = "the request body is not valid JSON"
    headers = {}
    if exc.code == 405 and getattr(exc, "valid_methods", None):
        headers["Allow"] = allow_header(exc.valid_methods)
    return error_response(exc.code, error, message, headers=headers)


def handle_unexpected(exc: BaseException):
    if isinstance(exc, ApiError):
        return handle_api_error(exc)
    if isinstance(exc, domain.ServiceError):
        return handle_service_error(exc)
    if isinstance(exc, CONNECTION_ERRORS):
        log.error("database unavailable: %s", exc.__class__.__name__)
        return service_unavailable()
    log.error("unexpected error (request %s)", g.get("request_id"), exc_info=exc)
    return error_response(500, "internal_error", "an unexpected error occurred; it has been logged")


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(ApiError, handle_api_error)
    app.register_error_handler(domain.ServiceError, handle_service_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)
