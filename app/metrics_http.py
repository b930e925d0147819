"""Flask side of ``app.plumbing.metrics``: the ``/metrics`` endpoint with the gauges read at each
scrape (queues in Redis, the most overdue look in the database), and per request one log line
(logger ``app.access``) and the HTTP counters. Apart from ``app.plumbing.metrics`` so that the
domains, which count through that module, never reach Flask, and that module reaches no domain."""
from __future__ import annotations

import logging
import os
import time

from flask import Blueprint, Response, current_app, g, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from app.errors import error_response
from app.plumbing.metrics import HTTP_LATENCY, HTTP_REQUESTS, LOOPBACK, STARTED_AT, token_matches

access_log = logging.getLogger("app.access")


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
        caller = g.get("caller")  # the authenticated key (app.api_calls)
        size = response.calculate_content_length()
        access_log.info("%s %s %s %.1f ms", request.method, rule, status, seconds * 1000, extra={
            "http": {"method": request.method, "route": rule, "status": response.status_code,
                     "duration_ms": round(seconds * 1000, 2), "bytes": size if size is not None else 0,
                     "request_id": g.get("request_id"),
                     "customer_id": caller.customer_id if caller is not None else None,
                     # D21: why the key was refused (key_expired, ip_not_allowed, insufficient_scope)
                     "refused": g.get("refused")}})
        return response


class LiveCollector:
    """Queue depths, the oldest waiting job's age and scheduled jobs (a few Redis commands
    per queue), and whether the database and Redis answer."""

    def collect(self):
        from app.plumbing.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE
        depth = GaugeMetricFamily("scan_api_queue_depth", "Jobs waiting in each RQ queue", labels=["queue"])
        oldest = GaugeMetricFamily("scan_api_queue_oldest_job_age_seconds",
                                   "Age of the job waiting longest in each RQ queue (0 when empty)", labels=["queue"])
        scheduled = GaugeMetricFamily("scan_api_scheduled_jobs", "Jobs scheduled for later, by queue",
                                      labels=["queue"])
        overdue = GaugeMetricFamily("scan_api_scheduled_overdue_seconds",
                                    "How far past its due time the most overdue scheduled job is (0: none)",
                                    labels=["queue"])
        looks_overdue = GaugeMetricFamily(
            "scan_api_looks_overdue_seconds",
            "How far past its due time the most overdue batch look at a scan in flight is (0: none)")
        redis_up = GaugeMetricFamily("scan_api_redis_up", "1 when Redis answered this scrape")
        db_up = GaugeMetricFamily("scan_api_database_up", "1 when the database answered this scrape")
        try:
            from app.plumbing import runtime
            conn = runtime.redis()
            now = time.time()
            for name in (ENGINE_QUEUE, WEBHOOK_QUEUE):
                with conn.pipeline(transaction=False) as pipe:
                    pipe.llen(f"rq:queue:{name}").lindex(f"rq:queue:{name}", 0)
                    pipe.zcard(f"rq:scheduled:{name}").zrange(f"rq:scheduled:{name}", 0, 0, withscores=True)
                    length, head, n_scheduled, first_due = pipe.execute()
                depth.add_metric([name], length)
                oldest.add_metric([name], _job_age(conn, head, now))
                scheduled.add_metric([name], n_scheduled)
                overdue.add_metric([name], max(0.0, now - first_due[0][1]) if first_due else 0.0)
            redis_up.add_metric([], 1)
        except Exception:  # Redis down: say so, and still report the rest
            redis_up.add_metric([], 0)
        due = _earliest_due_look()
        db_up.add_metric([], 0 if due is False else 1)
        looks_overdue.add_metric([], max(0.0, time.time() - due) if isinstance(due, float) else 0.0)
        yield from (depth, oldest, scheduled, overdue, looks_overdue, redis_up, db_up)


def _job_age(conn, job_id, now: float) -> float:
    if not job_id:
        return 0.0
    from rq.utils import utcparse
    job_id = job_id.decode() if isinstance(job_id, bytes) else job_id
    raw = conn.hget(f"rq:job:{job_id}", "enqueued_at")
    if not raw:
        return 0.0
    try:
        return max(0.0, now - utcparse(raw.decode() if isinstance(raw, bytes) else raw).timestamp())
    except ValueError:
        return 0.0


def _earliest_due_look() -> float | bool | None:
    """The earliest due look's Unix time (the first entry of a partial index: as cheap as
    ``SELECT 1``), None when no scan is due for one, False when the database does not answer."""
    from datetime import UTC

    from app.plumbing.db import db
    from app.tracking import looks
    try:
        with db.connection_context():
            due = looks.next_due()
    except Exception:
        return False
    return None if due is None else due.replace(tzinfo=UTC).timestamp()


_live = LiveCollector()


def registry() -> CollectorRegistry:
    scrape = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess
        multiprocess.MultiProcessCollector(scrape)
    else:
        for collector in list(REGISTRY._collector_to_names):
            scrape.register(collector)
    scrape.register(_live)
    return scrape


def render() -> tuple[bytes, str]:
    return generate_latest(registry()), CONTENT_TYPE_LATEST
