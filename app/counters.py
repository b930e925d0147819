"""The in-process Prometheus counters the request path observes (see ``app.metrics``).

Apart from ``app.metrics`` (the ``/metrics`` endpoint, a Flask blueprint) so that the
services count without importing Flask.
"""
from __future__ import annotations

from prometheus_client import Counter, Histogram

ENGINE_LATENCY = Histogram("scan_engine_call_seconds", "Engine HTTP call latency", ["call"])
SCANS_CREATED = Counter("scan_api_scans_created_total", "Scans created by this process", ["kind", "tier"])
RATE_LIMITED = Counter("scan_api_rate_limited_total", "Requests refused with 429", ["code"])


def observe_engine_call(call: str, seconds: float) -> None:
    ENGINE_LATENCY.labels(call=call).observe(seconds)
