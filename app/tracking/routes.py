"""The engine's callback endpoint (E7): ``POST /engine/v1/callbacks``.

Not part of the customer API: no key, no charge, no activity entry, not in the OpenAPI document.
The engine signs each call with ``ENGINE_CALLBACK_SECRET`` (Standard Webhooks); the service
(``app.tracking.callbacks``) verifies it before touching the database and answers at once. Outside
``hooks.api_call`` on purpose: ``hooks.UNACCOUNTED`` names it, and the app refuses to start with
any other view under ``/engine/``.

The engine calls back at every change of every scan (about nine a scan), so a callback taken is
answered in front of Flask (``FastPath``): Flask's request cycle (its contexts, hooks, routing and
response object) was about half of a callback's Python time in process, a third of the API's CPU
per callback under gunicorn (bench.callback_cost), for a call that needs none of it. Whatever is
not a callback taken (a refusal, a replay, a busy scan, an error, a body with no length or too
long for one) goes through Flask as before, to this view, which renders it from the one error table
(``app.errors``) with Flask's hooks, metrics and log line: every answer but the ``200`` is Flask's.
"""
from __future__ import annotations

import time

from flask import Blueprint, g, jsonify, request
from werkzeug.exceptions import ClientDisconnected

from app.plumbing.db import release_connection
from app.plumbing.logging_setup import log_context
from app.plumbing.metrics import HTTP_LATENCY, HTTP_REQUESTS, STARTED_AT
from app.plumbing.signatures import ID_HEADER, STANDARD_SIGNATURE_HEADER, TIMESTAMP_HEADER
from app.request_ids import request_id
from app.tracking import callbacks

PATH = "/engine/v1/callbacks"
# In a WSGI environ: what the fast path met that is not a callback taken, for the view to answer.
OUTCOME = "scan_api.callback_outcome"

blp = Blueprint("engine_callbacks", __name__)


@blp.post(PATH)
def receive():
    try:
        outcome = request.environ.pop(OUTCOME, None)
        if outcome is not None:  # the fast path's: its body was read and the service has run
            raise outcome
        # Bounded before the body is read: a callback is five short fields. A chunked body (no
        # Content-Length) is measured once read, and refused the same way (413).
        callbacks.check_size(request.content_length)
        callbacks.receive(request.get_data(cache=False), request.headers)
    except callbacks.REFUSED:
        # Counted and logged in aggregate by the service: no request line of its own
        # (app.metrics_http), so that a flood of forgeries does not flood the log.
        g.logged_in_aggregate = True
        raise
    g.logged_in_aggregate = True  # taken: one line a minute too (several callbacks a scan)
    return jsonify({"ok": True})


TAKEN_BODY = b'{"ok":true}\n'  # jsonify({"ok": True}), as the view answers
# The headers of the view's answer taken (app.__init__'s after-request hook adds the last two).
TAKEN_HEADERS = (("Content-Type", "application/json"), ("Content-Length", str(len(TAKEN_BODY))))
WEBHOOK_HEADERS = tuple((name, "HTTP_" + name.upper().replace("-", "_"))
                        for name in (ID_HEADER, TIMESTAMP_HEADER, STANDARD_SIGNATURE_HEADER))


class FastPath:
    """WSGI middleware: a callback with a body of announced length at most ``MAX_BODY_BYTES`` goes
    straight to the service; taken, it is answered here as the view would answer it (the same
    status, body and headers, request id included), counted in the same HTTP metrics (route
    ``/engine/v1/callbacks``), with no request line (taken ones are one line a minute) and its
    database connection given back to the pool, as Flask's teardown does. Anything else the
    service raised is handed to Flask with the request (``OUTCOME``), whose view raises it."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app
        self.counted = HTTP_REQUESTS.labels(method="POST", route=PATH, status="200")
        self.timed = HTTP_LATENCY.labels(method="POST", route=PATH, status="200")

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.wsgi_app(environ, start_response)
        length = environ.get("CONTENT_LENGTH", "")
        if not (length.isascii() and length.isdigit()) or int(length) > callbacks.MAX_BODY_BYTES:
            return self.wsgi_app(environ, start_response)  # chunked or too long: Flask's 413 and checks
        environ[STARTED_AT] = started = time.perf_counter()
        rid = request_id(environ)
        try:
            body = environ["wsgi.input"].read(int(length))
            if len(body) < int(length):
                raise ClientDisconnected()  # noqa: TRY301 - as werkzeug says it reading the body for the view: 400
            headers = {name: environ[key] for name, key in WEBHOOK_HEADERS if key in environ}
            with log_context(request_id=rid):
                callbacks.receive(body, headers)
        except Exception as exc:  # a refusal, a replay, a busy scan, the database: Flask's answer
            environ[OUTCOME] = exc  # (and Flask's teardown gives the connection back)
            return self.wsgi_app(environ, start_response)
        release_connection()  # as Flask's teardown does
        start_response("200 OK", [*TAKEN_HEADERS, ("X-Request-Id", rid), ("X-Content-Type-Options", "nosniff")])
        self.counted.inc()
        self.timed.observe(time.perf_counter() - started)
        return [TAKEN_BODY]


def install_fast_path(app) -> None:
    """Answer the callbacks taken in front of ``app`` (``FastPath``)."""
    app.wsgi_app = FastPath(app.wsgi_app)
