"""The bench's engine stand-in: E1 submissions answered as fast as a WSGI function can.

The simulator (``python -m simulator``) is a Flask app on werkzeug's development server:
one process, about 150 submissions per second on this machine, which capped the
creation figures of the API and of its floor alike. This stand-in answers only what a
creation needs (``POST /v1/investigations`` and ``/v1/investigations/batch``, bearer
token checked in constant time) with the simulator's own ids, recipe counts and etas
(``simulator.investigations``), so a simulator at the same time scale answers the
status of every id it issues: the bench's seeding workers track them there. It runs
under gunicorn with several processes (``bench/engine_gunicorn.py``); the real
simulator stays the engine of the tests and of the worker phases.

    BENCH_ENGINE_TIME_SCALE=0.001 ENGINE_TOKEN=... gunicorn -c bench/engine_gunicorn.py bench.engine_app:app
"""
from __future__ import annotations

import hmac
import json
import os

from simulator.investigations import KINDS, encode_id, plan_for

TIME_SCALE = float(os.environ.get("BENCH_ENGINE_TIME_SCALE", "1"))
TOKEN = os.environ.get("ENGINE_TOKEN", "").encode()
MAX_BATCH = 100
JSON = [("Content-Type", "application/json")]


def _answer(start_response, status: str, body: dict):
    data = json.dumps(body, separators=(",", ":")).encode()
    start_response(status, JSON + [("Content-Length", str(len(data)))])
    return [data]


def _submission(item) -> dict:
    if not isinstance(item, dict) or item.get("kind") not in KINDS:
        raise ValueError("kind must be one of " + ", ".join(KINDS))
    target = item.get("target")
    if not isinstance(target, str) or not target.strip():
        raise ValueError("target must be a non-empty string")
    plan = plan_for(item["kind"], target, TIME_SCALE)
    return {"id": encode_id(item["kind"], target), "recipes": plan.recipes, "eta_seconds": plan.eta_seconds}


def app(environ, start_response):
    path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD")
    if method != "POST" or path not in ("/v1/investigations", "/v1/investigations/batch"):
        if path == "/health":
            return _answer(start_response, "200 OK", {"ok": True})
        return _answer(start_response, "404 Not Found", {"error": "not_found", "message": "not in this stand-in"})
    if TOKEN:
        scheme, _, presented = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), TOKEN):
            return _answer(start_response, "401 Unauthorized", {"error": "unauthorized", "message": "bad token"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"null")
        if path.endswith("/batch"):
            items = body.get("items") if isinstance(body, dict) else None
            if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
                raise ValueError(f"items must be a list of 1 to {MAX_BATCH} investigations")
            answer = {"items": [_submission(item) for item in items]}
        else:
            answer = _submission(body)
    except ValueError as exc:  # json.JSONDecodeError included
        return _answer(start_response, "400 Bad Request", {"error": "invalid_request", "message": str(exc)})
    return _answer(start_response, "201 Created", answer)
