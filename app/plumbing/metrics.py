"""Prometheus metrics at ``/metrics``, and one log line per request.

Every figure is a process counter or histogram (prometheus-client), so a scrape costs
the same however large the tables grow: it reads no table, only the first entry of the
due looks' partial index (which also says whether the database answers) and a
handful of Redis keys (queue depths, the oldest job's age, scheduled jobs). The API's
gunicorn workers and the RQ workers of a host add their counters up through
prometheus-client's multiprocess mode: point ``PROMETHEUS_MULTIPROC_DIR`` of all of them
at one directory (gunicorn.conf.py makes a private one when it is unset; ``make run``
and the tests set one up).

This module imports no Flask: services and workers call the ``observe_*`` / ``count_*``
helpers; ``app.metrics_http.init_app`` (Flask) registers the endpoint and the request hooks.

``/metrics`` is outside ``/api/v1``: never authenticated by an API key, never charged.
With ``METRICS_TOKEN`` set it needs ``Authorization: Bearer <token>``; without it, it
answers only to loopback addresses, so it is internal by default.
"""
from __future__ import annotations

import hmac
import os
import re
import time
from collections.abc import Iterable

# The multiprocess folder is made if it does not exist yet (a first boot, a tmpfs after a
# reboot): the first metric below writes its file there, and a missing folder was a
# 60-line traceback at import.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

from prometheus_client import Counter, Gauge, Histogram

LOOPBACK = {"127.0.0.1", "::1"}

# Request latencies are milliseconds to a few seconds; deliveries and scans span minutes.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
DELIVERY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

HTTP_REQUESTS = Counter("scan_api_http_requests_total", "HTTP requests answered, by route (URL rule) and status",
                        ["method", "route", "status"])
HTTP_LATENCY = Histogram("scan_api_http_request_duration_seconds", "Time to answer an HTTP request",
                         ["method", "route", "status"], buckets=HTTP_BUCKETS)
SCANS_CREATED = Counter("scan_api_scans_created_total", "Scans created", ["kind", "tier"])
SCANS_FINISHED = Counter("scan_api_scans_finished_total", "Scans that reached a final state",
                         ["kind", "status"])
SCANS_FAILED = Counter("scan_api_scans_failed_total", "Scans failed, by failure code", ["kind", "reason"])
RATE_LIMITED = Counter("scan_api_rate_limited_total", "Requests refused with 429", ["code"])
ENGINE_LATENCY = Histogram("scan_engine_call_seconds", "Engine HTTP call latency", ["call"])
# How late the batch looks (D24) take a scan past its due time: the workers keep up while it stays small.
LOOK_LAG = Histogram("scan_engine_look_lag_seconds", "How long past its due time a scan in flight was looked at",
                     buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))
ENGINE_ERRORS = Counter("scan_engine_call_errors_total", "Engine calls that failed, by kind of failure",
                        ["call", "error"])
WEBHOOK_ATTEMPTS = Counter("scan_api_webhook_attempts_total", "Webhook delivery attempts (HTTP requests made)",
                           ["outcome", "reason"])
WEBHOOK_DELIVERY_LATENCY = Histogram(
    "scan_api_webhook_delivery_seconds",
    "From the event (the scan's final state) to the receiver's 2xx, retries included",
    ["event"], buckets=DELIVERY_BUCKETS)
FINDING_FEEDBACK = Counter("scan_api_finding_feedback_total",
                           "Customers' feedback on findings, by each source that found the finding and verdict "
                           "(source \"none\": a finding no source was named for)", ["source", "verdict"])
ENDPOINTS_DISABLED = Counter("scan_api_webhook_endpoints_disabled_total",
                             "Webhook endpoints disabled after failing for days")
SWEEP_RUNS = Counter("scan_api_recovery_sweeps_total", "Recovery sweeps run")
SWEEP_ACTIONS = Counter("scan_api_recovery_actions_total", "What recovery sweeps did", ["action"])
SWEEP_LAST = Gauge("scan_api_recovery_last_sweep_timestamp_seconds", "Unix time of the last recovery sweep",
                   multiprocess_mode="max")
SCANS_ERASED = Counter("scan_api_scans_erased_total", "Scans whose personal data was erased, by why",
                       ["reason"])
CALLBACKS_REFUSED = Counter("scan_api_engine_callbacks_refused_total",
                            "Engine callbacks refused before their signature was verified, by reason "
                            "(the log has one line a minute per process for them, not one each)", ["reason"])
AUDIT_SINK_BATCHES = Counter("scan_api_audit_sink_batches_total",
                             "Batches of activity entries sent to audit sinks, by outcome", ["outcome"])
AUDIT_SINK_ENTRIES = Counter("scan_api_audit_sink_entries_total", "Activity entries audit sinks acknowledged")
PERIODIC_LAST = Gauge("scan_api_periodic_job_last_run_timestamp_seconds",
                      "Unix time each periodic job last ran to its end", ["job"], multiprocess_mode="max")


# Every series whose labels are known in advance exists from the start, at 0: a new deployment's
# dashboard shows zeros rather than "No data", and a rate has its first point. (tests check these
# lists against the services' own: kinds, tiers, failure codes, 429 codes, attempt errors.)
KINDS = ("email", "phone", "username")
TIERS = ("pro", "business", "enterprise")
FAILURE_CODES = ("engine_failed", "engine_timeout", "engine_error")
RATE_LIMIT_CODES = ("rate_limit_inflight", "rate_limit_hour", "rate_limit_day")
ATTEMPT_FAILURES = ("timeout", "connection_error", "tls_error", "redirect_not_followed", "ssrf_refused",
                    "request_error", "worker_lost", "http_4xx", "http_5xx")
STARTED_AT = "scan_api.started_at"  # in a WSGI environ: when a layer in front of Flask took the request
ERASURE_REASONS = ("request", "retention")
AUDIT_SINK_OUTCOMES = ("acknowledged", "failed", "stale")
FEEDBACK_VERDICTS = ("false_positive", "confirmed")
# A source label is the engine's id of the source, when it looks like one; anything else is
# counted as "other", so that no engine can put arbitrary text (or personal data) in a label.
CALLBACK_REFUSALS = ("too_large", "unsigned", "not_configured", "malformed", "stale", "bad_signature")
SOURCE_LABEL = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def _start_at_zero() -> None:
    for kind in KINDS:
        for tier in TIERS:
            SCANS_CREATED.labels(kind=kind, tier=tier)
        for status in ("completed", "failed"):
            SCANS_FINISHED.labels(kind=kind, status=status)
        for code in FAILURE_CODES:
            SCANS_FAILED.labels(kind=kind, reason=code)
    for code in RATE_LIMIT_CODES:
        RATE_LIMITED.labels(code=code)
    WEBHOOK_ATTEMPTS.labels(outcome="succeeded", reason="http_2xx")
    for reason in ATTEMPT_FAILURES:
        WEBHOOK_ATTEMPTS.labels(outcome="failed", reason=reason)
    for reason in ERASURE_REASONS:
        SCANS_ERASED.labels(reason=reason)
    for reason in CALLBACK_REFUSALS:
        CALLBACKS_REFUSED.labels(reason=reason)
    for outcome in AUDIT_SINK_OUTCOMES:
        AUDIT_SINK_BATCHES.labels(outcome=outcome)
    for verdict in FEEDBACK_VERDICTS:  # the sources are the engine's: only "none" is known in advance
        FINDING_FEEDBACK.labels(source="none", verdict=verdict)


_start_at_zero()


def start_events_at_zero(names: Iterable[str]) -> None:
    """The deliveries' series of every event kind, at 0 from the start: the names are the events'
    registry's (``app.events.kinds``, a domain's, which this module does not reach), handed in by
    ``app.create_app``."""
    for event in names:
        WEBHOOK_DELIVERY_LATENCY.labels(event=event)


def observe_engine_call(call: str, seconds: float, error: str | None = None) -> None:
    ENGINE_LATENCY.labels(call=call).observe(seconds)
    if error:
        ENGINE_ERRORS.labels(call=call, error=error).inc()


def observe_look_lag(seconds: float) -> None:
    LOOK_LAG.observe(seconds)


def count_scan_finished(kind: str, status: str, reason: str | None = None) -> None:
    SCANS_FINISHED.labels(kind=kind, status=status).inc()
    if status == "failed":
        SCANS_FAILED.labels(kind=kind, reason=reason or "unknown").inc()


def count_feedback(source_ids: list[str], verdict: str) -> None:
    """One feedback on a finding, counted for each source that found it."""
    labels = {s if SOURCE_LABEL.match(s) else "other" for s in source_ids} or {"none"}
    for source in sorted(labels):
        FINDING_FEEDBACK.labels(source=source, verdict=verdict).inc()


def count_webhook_attempt(succeeded: bool, error: str | None, status_code: int | None) -> None:
    reason = error or (f"http_{status_code // 100}xx" if status_code else "unknown")
    WEBHOOK_ATTEMPTS.labels(outcome="succeeded" if succeeded else "failed", reason=reason).inc()


def count_endpoint_disabled() -> None:
    ENDPOINTS_DISABLED.inc()


def count_callback_refused(reason: str) -> None:
    CALLBACKS_REFUSED.labels(reason=reason).inc()
def count_audit_sink_batch(outcome: str, entries: int) -> None:
    AUDIT_SINK_BATCHES.labels(outcome=outcome).inc()
    if outcome == "acknowledged":
        AUDIT_SINK_ENTRIES.inc(entries)


def count_erased(reason: str, count: int) -> None:
    SCANS_ERASED.labels(reason=reason).inc(count)


def periodic_job_ran(job: str) -> None:
    PERIODIC_LAST.labels(job=job).set(time.time())


def observe_delivery_acknowledged(event: str, seconds: float) -> None:
    WEBHOOK_DELIVERY_LATENCY.labels(event=event).observe(max(0.0, seconds))


def count_sweep(report: dict) -> None:
    SWEEP_RUNS.inc()
    SWEEP_LAST.set(time.time())
    for action, count in report.items():  # zeros too, so every action's series exists from the first sweep
        SWEEP_ACTIONS.labels(action=action).inc(count or 0)


# --- Scrape-time figures: constant work whatever the data ----------------------------------


def token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


# D30: each source's answers (scans' and probes'), its status and quarantine, by its id (no
# personal data: the engine's source ids). A source's series start at zero when it is first judged.
SOURCE_ANSWERS = Counter("scan_api_source_answers_total", "Source answers counted for source health, by outcome",
                         ["source", "outcome"])
SOURCE_STATUS = Gauge("scan_api_source_status", "1 for each source's current status, 0 for the others",
                      ["source", "status"], multiprocess_mode="mostrecent")
SOURCE_QUARANTINED = Gauge("scan_api_source_quarantined", "1 when the source is left out of new submissions",
                           ["source"], multiprocess_mode="mostrecent")
SOURCE_PROBES = Counter("scan_api_source_probes_total", "Probe rounds judged, by outcome", ["source", "outcome"])
SOURCE_STATUSES = ("healthy", "degraded", "down", "broken")
PROBE_OUTCOMES = ("right", "wrong", "unanswered")


def _source_label(source_id: str) -> str:
    return source_id if SOURCE_LABEL.match(source_id) else "other"


def count_source_answers(source_id: str, answers: int, answered: int) -> None:
    label = _source_label(source_id)
    SOURCE_ANSWERS.labels(source=label, outcome="answered").inc(answered)
    SOURCE_ANSWERS.labels(source=label, outcome="failed").inc(answers - answered)


def set_source_state(source_id: str, status: str, quarantined: bool) -> None:
    """A source's status and quarantine as judged now; every status of it present (zeros, not gaps)."""
    label = _source_label(source_id)
    for name in SOURCE_STATUSES:
        SOURCE_STATUS.labels(source=label, status=name).set(1 if name == status else 0)
    SOURCE_QUARANTINED.labels(source=label).set(1 if quarantined else 0)
    for outcome in ("answered", "failed"):
        SOURCE_ANSWERS.labels(source=label, outcome=outcome)
    for outcome in PROBE_OUTCOMES:
        SOURCE_PROBES.labels(source=label, outcome=outcome)


def count_source_probe(source_id: str, outcome: str) -> None:
    SOURCE_PROBES.labels(source=_source_label(source_id), outcome=outcome).inc()
