"""Prometheus metrics (filled out by the operations work; cheap no-op-safe calls)."""
from __future__ import annotations

from prometheus_client import Counter, Histogram

ENGINE_LATENCY = Histogram("scan_engine_call_seconds", "Engine HTTP call latency", ["call"])
SCANS_CREATED = Counter("scan_scans_created_total", "Scans created", ["kind", "tier"])
RATE_LIMITED = Counter("scan_rate_limited_total", "Requests refused with 429", ["code"])
CHARGES = Counter("scan_credits_charged_total", "Credits charged", ["reason"])


def observe_engine_call(call: str, seconds: float) -> None:
    ENGINE_LATENCY.labels(call=call).observe(seconds)
