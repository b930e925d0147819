"""Prometheus metrics at ``/metrics``.

Two kinds, so that figures agree however many API and worker processes run:
- Business totals are read from the database and Redis at scrape time (scans by
  kind, tier and status; credits charged by reason; webhook attempts by outcome;
  queue depths), cached for a few seconds so frequent scrapes stay cheap.
- Request-path observations (429s by code, engine call latency, scans created) are
  counted in the process; under gunicorn set ``PROMETHEUS_MULTIPROC_DIR`` so that
  prometheus_client aggregates its workers.

``/metrics`` is outside ``/api/v1``: never authenticated by an API key, never charged.
With ``METRICS_TOKEN`` set it needs ``Authorization: Bearer <token>``; without it, it
answers only to loopback addresses, so it is internal by default.
"""
from __future__ import annotations

import hmac
import os
import threading
import time

from flask import Blueprint, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from app.counters import ENGINE_LATENCY, RATE_LIMITED, SCANS_CREATED, observe_engine_call  # noqa: F401

LOOPBACK = {"127.0.0.1", "::1"}
CACHE_SECONDS = 5.0


class StoreCollector:
    """Totals from the database and queue depths from Redis, at scrape time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cached_at = 0.0
        self._families: list = []

    def collect(self):
        with self._lock:
            if time.monotonic() - self._cached_at > CACHE_SECONDS:
                self._families = list(self._read())
                self._cached_at = time.monotonic()
            return list(self._families)

    def _read(self):
        from peewee import fn

        from app import runtime
        from app.extensions import db
        from app.models import CreditLedger, Customer, DeliveryAttempt, Scan
        from app.jobs import ENGINE_QUEUE, WEBHOOK_QUEUE

        scans = GaugeMetricFamily("scan_api_scans", "Scans stored, by kind, tier and status",
                                  labels=["kind", "tier", "status"])
        charged = GaugeMetricFamily("scan_api_credits_charged", "Credits charged (net of refunds), by reason",
                                    labels=["reason"])
        attempts = GaugeMetricFamily("scan_api_webhook_attempts", "Webhook delivery attempts, by outcome",
                                     labels=["outcome"])
        queues = GaugeMetricFamily("scan_api_queue_depth", "Jobs waiting in each RQ queue", labels=["queue"])
        with db.connection_context():
            rows = (Scan.select(Scan.kind, Customer.tier, Scan.status, fn.COUNT(Scan.id))
                    .join(Customer).group_by(Scan.kind, Customer.tier, Scan.status).tuples())
            for kind, tier, status, count in rows:
                scans.add_metric([kind, tier, status], count)
            for reason, total in (CreditLedger.select(CreditLedger.reason, fn.SUM(CreditLedger.delta))
                                  .where(CreditLedger.reason != "grant").group_by(CreditLedger.reason).tuples()):
                charged.add_metric([reason], -int(total or 0))
            for outcome, count in (DeliveryAttempt.select(DeliveryAttempt.outcome, fn.COUNT(DeliveryAttempt.id))
                                   .group_by(DeliveryAttempt.outcome).tuples()):
                attempts.add_metric([outcome], count)
        try:
            conn = runtime.redis()
            for name in (ENGINE_QUEUE, WEBHOOK_QUEUE):
                queues.add_metric([name], conn.llen(f"rq:queue:{name}"))
        except Exception:  # Redis down: the scrape still reports the database figures
            pass
        yield from (scans, charged, attempts, queues)


_store = StoreCollector()


def _registry() -> CollectorRegistry:
    from prometheus_client import REGISTRY, multiprocess
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(_store)
    return registry


bp = Blueprint("metrics", __name__)


def _allowed() -> bool:
    from flask import current_app
    token = current_app.config.get("METRICS_TOKEN")
    if token:
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
    return request.remote_addr in LOOPBACK


@bp.get("/metrics")
def metrics():
    if not _allowed():
        from app.errors import error_response
        return error_response(404, "not_found", "no such resource")
    return Response(generate_latest(_registry()), mimetype=CONTENT_TYPE_LATEST)
