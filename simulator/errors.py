"""JSON error bodies for everything the simulator itself refuses.

The service parses engine answers as JSON, so even a 404 or 503 coming from the simulator
must be JSON rather than Flask's default HTML page.
"""
from flask import Response, jsonify


def json_error(status: int, code: str, message: str, **details) -> tuple[Response, int]:
    """Build ``{"error": {"code", "message", ...details}}`` with the given HTTP status."""
    return jsonify({"error": {"code": code, "message": message, **details}}), status
