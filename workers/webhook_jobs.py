"""Webhook delivery jobs (§6, D11): one job makes at most one HTTP request.

The job loads its attempt from ``app.services.deliveries`` (which decides whether this
job may make one), makes the request, and hands the outcome back to it: recording,
retry scheduling and failing are that service's.
"""
from __future__ import annotations

import logging
import time

import requests
from rq import get_current_job
from urllib3.exceptions import HTTPError as Urllib3Error

from app import runtime
from app.extensions import db
from app.logging_setup import log_context
from app.services import deliveries
from app.services.deliveries import EXCERPT_BYTES, Outcome, response_excerpt
from app.services.webhook_urls import AttemptDeadline, UnsafeWebhookUrl, check_scheme, guarded_session

log = logging.getLogger(__name__)

# Error classes recorded on an attempt, most specific first (requests' ConnectTimeout
# is both a Timeout and a ConnectionError; its SSLError is a ConnectionError).
REQUEST_ERRORS = (
    (UnsafeWebhookUrl, "ssrf_refused"),
    (requests.Timeout, "timeout"),
    (requests.exceptions.SSLError, "tls_error"),
    (requests.ConnectionError, "connection_error"),
    (requests.RequestException, "request_error"),
)


def deliver(delivery_id: str) -> str:
    job = get_current_job()
    with log_context(delivery_id=delivery_id), db.connection_context():
        return _deliver(delivery_id, job.id if job else None)


def _deliver(delivery_id: str, job_id: str | None) -> str:
    attempt = deliveries.start_attempt(delivery_id, job_id)
    if isinstance(attempt, str):
        return attempt
    return deliveries.record(attempt.delivery, attempt.row, _post(attempt.url, attempt.headers, attempt.body))


def _post(url: str, headers: dict, body: bytes) -> Outcome:
    started = time.monotonic()
    outcome = Outcome()
    # requests' timeout bounds each socket read; the deadline bounds the whole attempt (D11).
    deadline = AttemptDeadline(runtime.config["WEBHOOK_TIMEOUT_SECONDS"])
    try:
        check_scheme(url)
        with guarded_session() as session, deadline:
            response = session.post(url, data=body, headers=headers, allow_redirects=False, stream=True,
                                    timeout=runtime.config["WEBHOOK_TIMEOUT_SECONDS"])
            outcome.status_code = response.status_code
            outcome.excerpt = _excerpt(response, deadline)
    except (UnsafeWebhookUrl, requests.RequestException) as exc:
        outcome.error = next(name for kind, name in REQUEST_ERRORS if isinstance(exc, kind))
    if deadline.fired and outcome.status_code is None:
        outcome.error = "timeout"  # no answer in time, however slowly it was being sent
    if outcome.status_code is not None and 300 <= outcome.status_code < 400:
        outcome.error = "redirect_not_followed"
    outcome.duration_ms = int((time.monotonic() - started) * 1000)
    return outcome


def _excerpt(response, deadline: AttemptDeadline) -> str:
    """The first KiB of the body, made safe to store (``deliveries.response_excerpt``); a huge
    answer is never downloaded, a dripped one is cut at the deadline."""
    try:
        data = response.raw.read(EXCERPT_BYTES, decode_content=True) or b""
    except (Urllib3Error, OSError):
        # The status line arrived; a body cut short does not change the outcome.
        data = b""
    finally:
        deadline.finish()  # before the socket is closed
        response.close()
    return response_excerpt(data)
