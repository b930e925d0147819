"""The engine's callback endpoint (E7): ``POST /engine/v1/callbacks``.

Not part of the customer API: no key, no charge, no activity entry, not in the OpenAPI document.
The engine signs each call with ``ENGINE_CALLBACK_SECRET`` (Standard Webhooks); the service
(``app.services.tracking.callbacks``) verifies it before touching the database and answers at once. Outside
``hooks.api_call`` on purpose: ``hooks.UNACCOUNTED`` names it, and the app refuses to start with
any other view under ``/engine/``.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.errors import ApiError
from app.services.tracking import callbacks

PATH = "/engine/v1/callbacks"

blp = Blueprint("engine_callbacks", __name__)


@blp.post(PATH)
def receive():
    # Bounded before the body is read: a callback is five short fields.
    if request.content_length is not None and request.content_length > callbacks.MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"the callback body is larger than {callbacks.MAX_BODY_BYTES} bytes")
    callbacks.receive(request.get_data(cache=False), request.headers)
    return jsonify({"ok": True})
