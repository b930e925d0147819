"""Flask side of ``app.plumbing.metrics``: the ``/metrics`` endpoint, and per request one log line
(logger ``app.access``) and the HTTP counters. Apart from ``app.plumbing.metrics`` so that the
services, which count through that module, never reach Flask."""
from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, current_app, g, request

from app.errors import error_response
from app.plumbing.metrics import HTTP_LATENCY, HTTP_REQUESTS, LOOPBACK, render, token_matches

access_log = logging.getLogger("app.access")
STARTED_AT = "scan_api.started_at"  # in a WSGI environ: when a layer in front of Flask took the request


def init_app(app) -> None:
    bp = Blueprint("metrics", __name__)

    @bp.get("/metrics")
    def metrics():
        token = current_app.config.get("METRICS_TOKEN")
        allowed = (token_matches(request.headers.get("Authorization", ""), token) if token
                   else request.remote_addr in LOOPBACK)
        if not allowed:
            return error_response(404, "not_found", "no such resource")
        body, content_type = render()
        return Response(body, content_type=content_type)

    app.register_blueprint(bp)

    def start_clock():
        # A layer in front of Flask that handed the request on may have started it (STARTED_AT).
        g.started_at = request.environ.get(STARTED_AT) or time.perf_counter()
    # First of all before-request hooks, so that a request refused by one is timed too.
    app.before_request_funcs.setdefault(None, []).insert(0, start_clock)

    @app.after_request
    def log_and_count(response):
        started = g.get("started_at")
        seconds = time.perf_counter() - started if started is not None else 0.0
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        status = str(response.status_code)
        HTTP_REQUESTS.labels(method=request.method, route=rule, status=status).inc()
        HTTP_LATENCY.labels(method=request.method, route=rule, status=status).observe(seconds)
        if g.get("logged_in_aggregate"):  # a refusal its service counts and logs once a minute
            return response
        caller = g.get("caller")  # the authenticated key (app.api.hooks)
        size = response.calculate_content_length()
        access_log.info("%s %s %s %.1f ms", request.method, rule, status, seconds * 1000, extra={
            "http": {"method": request.method, "route": rule, "status": response.status_code,
                     "duration_ms": round(seconds * 1000, 2), "bytes": size if size is not None else 0,
                     "request_id": g.get("request_id"),
                     "customer_id": caller.customer_id if caller is not None else None,
                     # D21: why the key was refused (key_expired, ip_not_allowed, insufficient_scope)
                     "refused": g.get("refused")}})
        return response
