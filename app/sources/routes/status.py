"""``GET /status`` (an HTML page) and ``GET /status.json``: the service's parts and each source, now
and hour by hour over 24 hours (D30). No key, no charge, nothing about a customer or a person."""
from __future__ import annotations

from flask import Blueprint, jsonify, render_template

from app.portal.security import CSP
from app.sources import status

blp = Blueprint("status", __name__)


@blp.get("/status.json")
def status_json():
    response = jsonify(status.page())
    response.headers["Cache-Control"] = "no-store"
    return response


@blp.get("/status")
def status_page():
    html = render_template("portal/status.html", page=status.page())
    return html, 200, {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
                       "Cache-Control": "no-store"}
