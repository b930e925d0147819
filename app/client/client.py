"""``ScanClient``: a small, synchronous client of the Public Scan API (§4, D1-D9).

- Every call sends ``Authorization: Bearer <key>``; every answer's ``X-Credits-Remaining`` and
  ``RateLimit`` / ``RateLimit-Policy`` headers are kept on ``last_credits`` / ``last_rate_limit``.
- 429, 502 and 503 answers, and connections that fail, are retried up to ``max_retries`` times,
  sleeping ``Retry-After`` seconds (1, 2, 4... s when the answer gives none). A ``Retry-After``
  longer than ``max_retry_after`` is not waited for: the error is raised at once.
- Both POSTs always carry an ``Idempotency-Key`` (generated unless given), the same on every
  retry of one call, so a retried creation never creates (or charges) twice (D9).
- ``sleep`` and ``clock`` are injectable: tests and simulations never sleep for real.
- Errors are the typed exceptions of ``app.client.errors``.
"""
from __future__ import annotations

import re
import time
import uuid
from typing import Any, Callable, Iterable
from urllib.parse import quote

import requests

from app.client.errors import ApiError, TransportError, WaitTimeout, error_from_response

__all__ = ["ScanClient", "parse_rate_limit", "MAX_BULK_TARGETS", "FINAL_STATUSES", "DEFAULT_BASE_URL"]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"
MAX_BULK_TARGETS = 100
FINAL_STATUSES = frozenset({"completed", "failed"})
RETRY_STATUSES = frozenset({429, 502, 503})
USER_AGENT = "public-scan-api-client/1"


def parse_rate_limit(policy: str | None, current: str | None) -> dict[str, dict[str, Any]]:
    """IETF draft-10 ``RateLimit-Policy`` + ``RateLimit`` headers as one dict per policy.

    ``'"hour";q=100;w=3600'`` and ``'"hour";r=42;t=1200'`` give
    ``{"hour": {"limit": 100, "window": 3600, "remaining": 42, "reset": 1200}}``.
    Parameters other than q, w, r, t keep their own names.
    """
    out: dict[str, dict[str, Any]] = {}
    for header, names in ((policy, {"q": "limit", "w": "window"}), (current, {"r": "remaining", "t": "reset"})):
        if not header:
            continue
        for item in header.split(","):
            name, *params = item.strip().split(";")
            name = name.strip().strip('"')
            if not name:
                continue
            entry = out.setdefault(name, {})
            for param in params:
                key, _, value = param.partition("=")
                key, value = key.strip(), value.strip().strip('"')
                try:
                    entry[names.get(key, key)] = int(value)
                except ValueError:
                    entry[names.get(key, key)] = value
    return out


def _reason(exc: Exception) -> str:
    """The useful end of a requests/urllib3 exception chain ("[Errno 111] Connection refused")."""
    found = re.search(r"\[Errno -?\d+\][^'\")]*", str(exc))
    if found:
        return found.group(0).strip()
    if isinstance(exc, requests.Timeout):
        return "timed out"
    return exc.__class__.__name__


def _target_item(item: dict | str) -> dict:
    if isinstance(item, str):
        return {"target": item}
    if isinstance(item, dict):
        return {k: v for k, v in item.items() if not (k == "kind" and v in (None, ""))}
    raise TypeError(f"a bulk target is a str or a dict with 'target' (and 'kind'), not {type(item).__name__}")


class ScanClient:
    """Client of one API base URL with one API key.

    ``base_url`` e.g. ``https://api.example.com`` (a trailing ``/api/v1`` is accepted too);
    ``timeout`` seconds per HTTP request; ``poll_interval`` seconds between two reads in
    ``wait``/``wait_bulk`` (§4.2 recommends 10 to 15; each read costs 1 credit);
    ``max_retries`` retries of one call on 429/502/503 or a failed connection;
    ``max_retry_after`` the longest ``Retry-After`` (s) worth sleeping through (None: no cap);
    ``sleep(seconds)`` and ``clock()`` (monotonic seconds) default to the ``time`` module's.
    """

    def __init__(self, base_url: str, api_key: str, *, session: requests.Session | None = None,
                 timeout: float = 30, poll_interval: float = 12.0, max_retries: int = 3,
                 sleep: Callable[[float], Any] = time.sleep, max_retry_after: float | None = 300.0,
                 clock: Callable[[], float] | None = None, user_agent: str = USER_AGENT):
        if not api_key:
            raise ValueError("api_key is required")
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        if base.endswith(API_PREFIX):
            base = base[: -len(API_PREFIX)]
        self.base_url = base
        self.api_key = api_key
        self.session = session if session is not None else requests.Session()
        self._own_session = session is None
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.max_retries = max(0, int(max_retries))
        self.max_retry_after = max_retry_after
        self._sleep = sleep
        self._clock = clock
        self.user_agent = user_agent
        # What the last answer said about the account (None until an answer carried it).
        self.last_credits: int | None = None
        self.last_rate_limit: dict[str, dict[str, Any]] | None = None
        self.last_request_id: str | None = None
        self.last_response: requests.Response | None = None

    # --- plumbing -----------------------------------------------------------------

    def __enter__(self) -> "ScanClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    def __repr__(self) -> str:
        return f"ScanClient({self.base_url!r}, api_key='{self.api_key[:13]}...')"

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic()

    def _record(self, response: requests.Response) -> None:
        self.last_response = response
        headers = response.headers
        self.last_request_id = headers.get("X-Request-Id") or self.last_request_id
        credits = headers.get("X-Credits-Remaining")
        if credits is not None:
            try:
                self.last_credits = int(credits)
            except ValueError:
                pass
        policy, current = headers.get("RateLimit-Policy"), headers.get("RateLimit")
        if policy or current:
            self.last_rate_limit = parse_rate_limit(policy, current)

    @staticmethod
    def _backoff(attempt: int) -> float:
        return float(min(2 ** attempt, 30))

    def _request(self, method: str, path: str, *, json_body: Any = None,
                 idempotency_key: str | None = None) -> dict:
        url = f"{self.base_url}{API_PREFIX}{path}"
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json",
                   "User-Agent": self.user_agent}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        attempt = 0
        while True:
            try:
                response = self.session.request(method, url, json=json_body, headers=headers, timeout=self.timeout)
            except requests.ConnectionError as exc:
                if attempt >= self.max_retries:
                    raise TransportError(f"cannot reach {self.base_url}: {_reason(exc)}") from exc
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            except requests.RequestException as exc:
                raise TransportError(f"{method} {url} failed: {_reason(exc)}") from exc
            self._record(response)
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError:
                    raise ApiError(response.status_code, "invalid_response",
                                   f"HTTP {response.status_code} answer is not JSON",
                                   response.headers.get("X-Request-Id"), headers=response.headers) from None
            error = error_from_response(response)
            if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
                raise error
            delay = float(error.retry_after) if error.retry_after is not None else self._backoff(attempt)
            if self.max_retry_after is not None and delay > self.max_retry_after:
                raise error
            self._sleep(delay)
            attempt += 1

    @staticmethod
    def _id(value: str, what: str) -> str:
        if not value or not isinstance(value, str):
            raise ValueError(f"{what} is required")
        return quote(value, safe="")

    # --- endpoints -------------------------------------------------------------------

    def create(self, target: str, kind: str | None = None, idempotency_key: str | None = None) -> dict:
        """``POST /api/v1/scan``: queue a scan; the 202 body (``scan_id``, ``kind``, ``eta_seconds``...)."""
        body = {"target": target}
        if kind:
            body["kind"] = kind
        return self._request("POST", "/scan", json_body=body,
                             idempotency_key=idempotency_key or f"auto-{uuid.uuid4().hex}")

    def get(self, scan_id: str) -> dict:
        """``GET /api/v1/scan/{id}``: the scan in its current state (costs 1 credit)."""
        return self._request("GET", f"/scan/{self._id(scan_id, 'scan_id')}")

    def bulk(self, targets: Iterable[dict | str], idempotency_key: str | None = None) -> dict:
        """``POST /api/v1/scan/bulk``: 1 to 100 targets (``"a@b.c"`` or ``{"target", "kind"}``); the 202 body."""
        items = [_target_item(t) for t in targets]
        if not items:
            raise ValueError("a bulk call needs at least one target")
        if len(items) > MAX_BULK_TARGETS:
            raise ValueError(f"a bulk call takes at most {MAX_BULK_TARGETS} targets, not {len(items)}")
        return self._request("POST", "/scan/bulk", json_body={"targets": items},
                             idempotency_key=idempotency_key or f"auto-{uuid.uuid4().hex}")

    def get_bulk(self, bulk_id: str) -> dict:
        """``GET /api/v1/scan/bulk/{bulk_id}``: counts by status, ``all_done`` and every scan (1 credit)."""
        return self._request("GET", f"/scan/bulk/{self._id(bulk_id, 'bulk_id')}")

    # --- waiting ---------------------------------------------------------------------

    def _poll(self, read: Callable[[], dict], done: Callable[[dict], bool], resource_id: str,
              timeout: float | None, on_progress: Callable[[dict], Any] | None,
              poll_interval: float | None) -> dict:
        interval = self.poll_interval if poll_interval is None else poll_interval
        start = self._now()
        while True:
            state = read()
            if on_progress is not None:
                on_progress(state)
            if done(state):
                return state
            elapsed = self._now() - start
            delay = interval
            if timeout is not None:
                remaining = timeout - elapsed
                if remaining <= 0:
                    raise WaitTimeout(resource_id, state, elapsed, timeout)
                delay = min(interval, remaining)
            self._sleep(delay)

    def wait(self, scan_id: str, *, timeout: float | None = None, on_progress: Callable[[dict], Any] | None = None,
             poll_interval: float | None = None) -> dict:
        """Read the scan every ``poll_interval`` s until it is ``completed`` or ``failed``; its final state.

        ``on_progress(state)`` is called after every read. Raises ``WaitTimeout`` once ``timeout``
        seconds have passed without a final state (the scan itself goes on).
        """
        return self._poll(lambda: self.get(scan_id), lambda s: s.get("status") in FINAL_STATUSES,
                          scan_id, timeout, on_progress, poll_interval)

    def wait_bulk(self, bulk_id: str, *, timeout: float | None = None,
                  on_progress: Callable[[dict], Any] | None = None, poll_interval: float | None = None) -> dict:
        """Read the batch every ``poll_interval`` s until ``all_done``; its final aggregate state."""
        return self._poll(lambda: self.get_bulk(bulk_id), lambda s: bool(s.get("all_done")),
                          bulk_id, timeout, on_progress, poll_interval)
