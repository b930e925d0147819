"""The engine's callback endpoint (E7): ``POST /engine/v1/callbacks``.

Not part of the customer API: no key, no charge, no activity entry, not in the OpenAPI document.
The engine signs each call with ``ENGINE_CALLBACK_SECRET`` (Standard Webhooks); the service
(``app.services.tracking.callbacks``) verifies it before touching the database and answers at once. Outside
``hooks.api_call`` on purpose: ``hooks.UNACCOUNTED`` names it, and the app refuses to start with
any other view under ``/engine/``.
"""
from __future__ import annotations

from flask import Blueprint, g, jsonify, request

from app.services.tracking import callbacks

PATH = "/engine/v1/callbacks"

blp = Blueprint("engine_callbacks", __name__)


@blp.post(PATH)
def receive():
    try:
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
