"""Typed errors of the Public Scan API client.

Every error answer of the API is ``{"ok": false, "error": CODE, "message": ..., "request_id": ...}``
``error_from_response`` turns one into the ``ApiError`` subclass of its HTTP
status family, keeping the machine code, the message, the request id (also sent as
``X-Request-Id``: quote it to support), validation ``details`` and ``Retry-After``.
A body that is not that JSON (a proxy's HTML page, an empty body) still becomes an
``ApiError`` whose message says what came back.
"""
from __future__ import annotations

import email.utils
import math
import time
from typing import Any


class ScanClientError(Exception):
    """Base of every error this client raises."""


class ApiError(ScanClientError):
    """The API answered with an error status.

    ``status`` HTTP status; ``code`` the machine code (``insufficient_balance``...);
    ``message`` the API's sentence; ``request_id``; ``details`` (validation errors:
    ``{field: [messages]}``) or None; ``retry_after`` whole seconds or None;
    ``body`` the parsed JSON body (None when not JSON); ``headers`` the response headers.
    """

    default_code = "api_error"

    def __init__(self, status: int, code: str | None, message: str, request_id: str | None = None,
                 details: Any = None, retry_after: int | None = None, *, body: Any = None,
                 headers: dict | None = None):
        self.status = status
        self.code = code or self.default_code
        self.message = message
        self.request_id = request_id
        self.details = details
        self.retry_after = retry_after
        self.body = body
        self.headers = dict(headers or {})
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.status} {self.code}: {self.message}"
        if self.request_id:
            text += f" (request {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r}, "
                f"request_id={self.request_id!r}, retry_after={self.retry_after!r})")


class ValidationError(ApiError):
    """400: ``invalid_request``, ``target_too_short``, ``invalid_kind``, ``invalid_target``,
    ``too_many_targets``, ``no_targets``, ``invalid_required`` (a ``required`` rule that does not
    parse), ``webhook_url_missing`` (a redelivery for a key that has no webhook URL now); also used
    for 413 ``payload_too_large``."""


class AuthenticationError(ApiError):
    """401: ``unauthorized`` (no or malformed key), ``invalid_token`` (unknown or revoked key) or
    ``key_expired`` (the key's expiry has passed)."""


class InsufficientBalance(ApiError):
    """402 ``insufficient_balance``: the balance is below 1 credit (bulk: below its valid targets)."""


class Forbidden(ApiError):
    """403: ``forbidden`` (another customer's scan or batch), ``bulk_not_allowed`` (Pro tier),
    ``target_suppressed`` (the person the target belongs to opted out of lookups; not charged),
    ``ip_not_allowed`` (the key's IP allowlist does not hold your address; not charged) or
    ``insufficient_scope`` (the key lacks the scope the call needs, which the message names; not charged)."""


class NotFound(ApiError):
    """404 ``not_found``: unknown scan, bulk or delivery id (or one of the other mode), or path."""


class FindingNotFound(NotFound):
    """404 ``not_found`` from ``feedback``: the scan has no finding ``finding_id`` (or the scan
    ``scan_id`` is unknown, or has no result yet). The message names both ids."""

    def __init__(self, error: NotFound, scan_id: str, finding_id: str):
        self.scan_id, self.finding_id = scan_id, finding_id
        super().__init__(error.status, error.code, f"{error.message} (finding {finding_id}, scan {scan_id})",
                         error.request_id, error.details, error.retry_after, body=error.body, headers=error.headers)


class Conflict(ApiError):
    """409 ``idempotency_conflict``: the Idempotency-Key was used with another body, or is in use;
    ``delivery_pending`` (raised as ``DeliveryPending``), ``nothing_to_rerun`` (``NothingToRerun``)."""


class DeliveryPending(Conflict):
    """409 ``delivery_pending``: a redelivery was asked for a delivery whose attempts are still under
    way (nothing was charged); ask again once it is ``succeeded`` or ``failed``."""


class NothingToRerun(Conflict):
    """409 ``nothing_to_rerun``: the scan is not completed, or every source answered (nothing was charged)."""


class RateLimited(ApiError):
    """429 ``rate_limit_inflight`` / ``rate_limit_hour`` / ``rate_limit_day``; ``retry_after`` in seconds."""


class WatchLimitReached(RateLimited):
    """429 ``watch_limit_reached``: the account has as many watches as its tier allows; end one first
    (nothing was charged). Waiting does not help, so the client does not retry it."""


class WatchEnded(Conflict):
    """409 ``watch_ended``: the watch has ended; create a new one to follow the target again (free)."""


class ServerError(ApiError):
    """Any 5xx (``internal_error`` and the more specific subclasses below)."""


class EngineUnavailable(ServerError):
    """502 ``engine_submit_failed``: the engine could not take the scan; nothing was created or charged."""


class ServiceUnavailable(ServerError):
    """503 ``service_unavailable``: the service's database is unreachable; ``retry_after`` is set."""


class WebhookVerificationError(ScanClientError):
    """A webhook delivery failed verification: wrong or missing signature, or a stale timestamp."""


class TransportError(ScanClientError):
    """The API could not be reached, or the connection broke (no HTTP answer)."""


class WaitTimeout(ScanClientError):
    """``wait()`` / ``wait_bulk()`` gave up before the scan or batch finished.

    ``resource_id`` the scan or bulk id, ``last`` the last state read (a ``Scan`` or ``Batch``), ``elapsed`` seconds.
    """

    def __init__(self, resource_id: str, last: dict | None, elapsed: float, timeout: float):
        self.resource_id = resource_id
        self.last = last
        self.elapsed = elapsed
        self.timeout = timeout
        if last is None:
            status = "unknown"
        elif getattr(last, "all_done", None) is not None:
            status = f"all_done={str(last.all_done).lower()}"
        else:
            status = getattr(last, "status", None) or "unknown"
        super().__init__(f"{resource_id} not finished after {elapsed:.0f} s (timeout {timeout:g} s; "
                         f"last status: {status})")


_BY_STATUS = {400: ValidationError, 401: AuthenticationError, 402: InsufficientBalance, 403: Forbidden,
              404: NotFound, 409: Conflict, 413: ValidationError, 429: RateLimited,
              502: EngineUnavailable, 503: ServiceUnavailable}


# Codes with a class of their own, more precise than their status's.
_BY_CODE: dict[str, type[ApiError]] = {"delivery_pending": DeliveryPending, "nothing_to_rerun": NothingToRerun,
                                       "watch_limit_reached": WatchLimitReached, "watch_ended": WatchEnded}
# Codes of a retried status (429) that waiting does not cure: raised at once.
NOT_RETRIED_CODES = frozenset({"watch_limit_reached"})


def error_class(status: int, code: str | None = None) -> type[ApiError]:
    if code in _BY_CODE and issubclass(_BY_CODE[code], _BY_STATUS.get(status, ApiError)):
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else ApiError


def parse_retry_after(value: str | None, now: float | None = None) -> int | None:
    """``Retry-After`` as whole seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0, math.ceil(when.timestamp() - (time.time() if now is None else now)))


def error_from_response(response) -> ApiError:
    """The ``ApiError`` for an error ``requests.Response``."""
    status = response.status_code
    headers = response.headers
    retry_after = parse_retry_after(headers.get("Retry-After"))
    request_id = headers.get("X-Request-Id")
    try:
        body = response.json()
    except ValueError:
        body = None
    cls = error_class(status)
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        cls = error_class(status, body["error"])
        return cls(status, body["error"], str(body.get("message") or body["error"]),
                   body.get("request_id") or request_id, body.get("details"), retry_after,
                   body=body, headers=headers)
    # Not the API's error body: a proxy, a load balancer or a crash in front of the service.
    content_type = headers.get("Content-Type", "unknown content type").split(";")[0]
    snippet = " ".join((response.text or "").split())[:120]
    reason = response.reason or "error"
    message = f"HTTP {status} {reason} with a non-JSON body ({content_type})"
    if snippet:
        message += f": {snippet}"
    return cls(status, f"http_{status}", message, request_id, None, retry_after, body=body, headers=headers)
