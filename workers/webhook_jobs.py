"""Webhook delivery jobs (§6, D11): one job makes at most one HTTP request.

The job loads its attempt from ``app.webhooks.deliveries`` (which decides whether this
job may make one), makes the request, and hands the outcome back to it: recording,
retry scheduling and failing are that service's.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import requests
from playhouse.pool import MaxConnectionsExceeded
from rq import get_current_job
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ReadTimeoutError

from app.extensions import db
from app.plumbing import runtime
from app.plumbing.db import CONNECTION_ERRORS
from app.plumbing.logging_setup import log_context
from app.plumbing.outbound_urls import AttemptDeadline, UnsafeWebhookUrl, check_scheme, guarded_session
from app.webhooks import deliveries
from app.webhooks.deliveries import EXCERPT_BYTES, Outcome, response_excerpt
from workers.database_gate import DatabaseGate

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

# The database failing for a moment (refused or broken connection, lock timeout) after the
# request was made: the outcome is recorded again after these pauses rather than left to the
# sweep (the attempt row would stay in_progress for ATTEMPT_DEADLINE_SECONDS, then be closed as
# lost and sent again). ``record`` is a compare-and-set on the row, so a try whose commit did
# land makes the next one a no-op. The delivery pool's threads go on past them, through the
# pool's database gate (one line for the outage, one per reconnection attempt), until the
# database answers or the process stops (``run``'s ``database``).
RECORD_RETRY_PAUSES = (0.2, 0.5, 1.0, 2.0, 4.0)
TRANSIENT_DB_ERRORS = (*CONNECTION_ERRORS, MaxConnectionsExceeded)


def deliver(delivery_id: str) -> str:
    """The RQ job (``rq worker webhooks`` runs it one at a time; ``python -m workers`` runs
    the same ``run`` on its delivery pool, ``workers.delivery_pool``)."""
    job = get_current_job()
    return run(delivery_id, job.id if job else None)


def run(delivery_id: str, job_id: str | None, admit: Callable[[str, str], bool] | None = None,
        database: DatabaseGate | None = None) -> str:
    """Make the attempt job ``job_id`` stands for: load it, send it, hand the outcome back.

    A database connection is held only around the two service calls, never during the
    HTTP request, so a hundred requests in flight do not need a hundred connections.
    ``admit`` is the pool's per-endpoint gate (``deliveries.start_attempt``); ``database``, the
    pool's database gate, lets the outcome be recorded for as long as the process runs."""
    with log_context(delivery_id=delivery_id):
        with db.connection_context():
            attempt = deliveries.start_attempt(delivery_id, job_id, admit)
        if isinstance(attempt, str):
            return attempt
        outcome = post(attempt.url, attempt.headers, attempt.body)
        return _record(attempt, outcome, database)


def _record(attempt, outcome: Outcome, database: DatabaseGate | None) -> str:
    """Record ``outcome``, trying again while the database fails for a moment. Given up, the
    attempt waits for the sweep and the receiver is sent it a second time: an RQ job gives up
    after RECORD_RETRY_PAUSES, a pool thread (``database``: its pool's gate) only when its
    process stops."""
    pauses = iter(RECORD_RETRY_PAUSES)
    while True:
        try:
            with db.connection_context():
                return deliveries.record(attempt.delivery, attempt.row, outcome)
        except TRANSIENT_DB_ERRORS as exc:
            pause = next(pauses, None)
            if pause is not None:
                log.warning("delivery %s attempt %d: could not record the outcome (%s), retrying in %.1f s",
                            attempt.delivery.id, attempt.row.number, exc.__class__.__name__, pause)
                time.sleep(pause)
                continue
            if database is None or database.stopping.is_set():
                raise
            # A longer outage: one line for it however many outcomes wait, one thread probing with
            # back-off, then a last pause, as a refusal the probe does not see (a pool out of
            # connections, a lock) would otherwise be tried again at once.
            database.connection_lost(exc)
            database.wait()
            if database.stopping.wait(RECORD_RETRY_PAUSES[-1]):
                raise


def post(url: str, headers: dict, body: bytes) -> Outcome:
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
            outcome.excerpt, body_timed_out = _excerpt(response, deadline)
            if body_timed_out:
                outcome.error = "timeout"
    except (UnsafeWebhookUrl, requests.RequestException) as exc:
        outcome.error = next(name for kind, name in REQUEST_ERRORS if isinstance(exc, kind))
    if deadline.fired:
        # No complete answer in time, however slowly it was being sent: a status line (even a
        # 200) followed by a stall acknowledges nothing. The status seen, if any, is kept.
        outcome.error = "timeout"
    if outcome.status_code is not None and 300 <= outcome.status_code < 400:
        outcome.error = "redirect_not_followed"
    outcome.duration_ms = int((time.monotonic() - started) * 1000)
    return outcome


def _excerpt(response, deadline: AttemptDeadline) -> tuple[str, bool]:
    """The first KiB of the body, made safe to store (``deliveries.response_excerpt``), and
    whether reading it timed out; a huge answer is never downloaded, a dripped one is cut at the
    deadline. A body that stops coming within the timeout means the answer was not complete in
    time: a timeout, whichever of the socket's timeout and the attempt's deadline came first."""
    timed_out = False
    try:
        data = response.raw.read(EXCERPT_BYTES, decode_content=True) or b""
    except (Urllib3Error, OSError) as exc:
        # A body cut short by the receiver's close does not change the outcome; one that stalls does.
        timed_out = isinstance(exc, (ReadTimeoutError, TimeoutError))
        data = b""
    finally:
        deadline.finish()  # before the socket is closed
        response.close()
    return response_excerpt(data), timed_out
