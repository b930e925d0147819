"""A request's id (``X-Request-Id``): the client's when the service may keep it (never one shaped
like a secret, which would then be logged), else a new one; kept in the WSGI environ, so that a
layer in front of Flask (the engine callbacks' fast path, ``app.tracking.routes``) and Flask give
the same one."""
from __future__ import annotations

import re
import secrets

from app.plumbing.crypto import KEY_PREFIXES, SCIM_TOKEN_PREFIX
from app.plumbing.signatures import SECRET_PREFIX as WEBHOOK_SECRET_PREFIX

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# The prefixes of every credential the service hands out that has one: API keys (live and test),
# webhook and engine callback secrets and SCIM tokens (portal session and set-password tokens carry none).
# ops/nginx.conf's $scan_request_id map lists the same (tests/ops check that they agree).
SECRET_PREFIXES = (*KEY_PREFIXES, WEBHOOK_SECRET_PREFIX, SCIM_TOKEN_PREFIX)
# A client id that holds one of them anywhere (``key:service_live_...``, ``a.whsec_...``) holds a
# secret sent there by mistake: it is never echoed, logged or stored (any case: erring towards
# replacing it).
SECRET_SHAPED_RE = re.compile("|".join(map(re.escape, SECRET_PREFIXES)), re.IGNORECASE)


def client_request_id(value: str) -> str | None:
    """The client's ``X-Request-Id`` when the service may keep it, else None."""
    if REQUEST_ID_RE.match(value) and not SECRET_SHAPED_RE.search(value):
        return value
    return None


REQUEST_ID_KEY = "scan_api.request_id"


def request_id(environ: dict) -> str:
    """The id of the request of WSGI ``environ``: the client's ``X-Request-Id`` when the service
    may keep it, else a new one. Kept in ``environ``, so that a layer in front of Flask (the engine
    callbacks' fast path, ``app.tracking.routes``) and Flask give the same one."""
    value = environ.get(REQUEST_ID_KEY)
    if value is None:
        value = environ[REQUEST_ID_KEY] = (client_request_id(environ.get("HTTP_X_REQUEST_ID", ""))
                                           or f"req_{secrets.token_hex(12)}")
    return value
