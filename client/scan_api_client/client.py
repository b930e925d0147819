"""``ScanClient``: a small, synchronous client of the Public Scan API.

- Every call sends ``Authorization: Bearer <key>``; every answer's ``X-Credits-Remaining`` and
  ``RateLimit`` / ``RateLimit-Policy`` headers are kept on ``last_credits`` / ``last_rate_limit``.
- 429, 502 and 503 answers, and connections that fail, are retried up to ``max_retries`` times,
  sleeping ``Retry-After`` seconds (1, 2, 4... s when the answer gives none). A ``Retry-After``
  longer than ``max_retry_after`` is not waited for: the error is raised at once.
- Both POSTs always carry an ``Idempotency-Key`` (generated unless given), the same on every
  retry of one call, so a retried creation never creates (or charges) twice.
- ``wait``/``wait_bulk`` let the server wait: each read asks it to answer as soon as the scan (the
  batch) is final, holding the call up to 60 s (``?wait=``), and they read again until it is final
  or their ``timeout`` has passed; one credit per read, not one per poll. Calls that wait, and the
  events stream, go to ``wait_url`` (default ``base_url``: behind the service's proxy they are sent
  to its held-connection server by themselves; ``make run`` serves that one on the API's port + 1).
- ``sleep`` and ``clock`` are injectable: tests and simulations never sleep for real.
- Answers are the dataclasses of ``scan_api_client.models`` (each keeps its JSON body on ``raw``);
  errors are the typed exceptions of ``scan_api_client.errors``.
- A test key (``service_test_...``) works like a live one against the service's sandbox:
  ``client.livemode`` is False and every scan, batch and delivery carries ``livemode=False``.
"""
from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import requests

from scan_api_client.errors import (
    NOT_RETRIED_CODES,
    ApiError,
    FindingNotFound,
    NotFound,
    TransportError,
    WaitTimeout,
    error_from_response,
)
from scan_api_client.models import (
    FEEDBACK_VERDICTS,
    Account,
    ActivityEntry,
    Batch,
    Delivery,
    Endpoint,
    Event,
    Finding,
    Page,
    Scan,
    SourceHealth,
    Watch,
    WatchBatch,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "FINAL_STATUSES",
    "LIVE_KEY_PREFIX",
    "MAX_BULK_TARGETS",
    "TEST_KEY_PREFIX",
    "ScanClient",
    "parse_rate_limit",
]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"
MAX_BULK_TARGETS = 100
FINAL_STATUSES = frozenset({"completed", "failed"})
RETRY_STATUSES = frozenset({429, 502, 503})
USER_AGENT = "scan-api-client/1"
LIVE_KEY_PREFIX, TEST_KEY_PREFIX = "service_live_", "service_test_"
MAX_PAGE = 100
MAX_WAIT = 60  # the longest a read may ask the server to hold it (``?wait=``), seconds


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


def _purpose_fields(purpose: str | None, case_ref: str | None, min_confidence: float | None = None,
                    required: str | None = None) -> dict:
    """The creation's purpose, case reference, minimum confidence and match rule, only those given
    (the service checks them)."""
    return {name: value for name, value in (("purpose", purpose), ("case_ref", case_ref),
                                            ("min_confidence", min_confidence), ("required", required))
            if value is not None}


def _target_item(item: dict | str) -> dict:
    if isinstance(item, str):
        return {"target": item}
    if isinstance(item, dict):
        return {k: v for k, v in item.items() if not (k == "kind" and v in (None, ""))}
    raise TypeError(f"a bulk target is a str or a dict with 'target' (and 'kind'), not {type(item).__name__}")


class ScanClient:
    """Client of one API base URL with one API key.

    ``base_url`` e.g. ``https://api.example.com`` (a trailing ``/api/v1`` is accepted too);
    ``wait_url`` where the calls that wait (``?wait=``) and the events stream go (default
    ``base_url``; ``make run``: its held-connection server, the API's port + 1);
    ``timeout`` seconds per HTTP request (a call that waits gets its wait on top);
    ``poll_interval`` the pause in ``wait``/``wait_bulk`` after a read the server answered early
    without a final state (it did not hold the call), so such reads are not made back to back;
    ``max_retries`` retries of one call on 429/502/503 or a failed connection;
    ``max_retry_after`` the longest ``Retry-After`` (s) worth sleeping through (None: no cap);
    ``sleep(seconds)`` and ``clock()`` (monotonic seconds) default to the ``time`` module's.
    """

    def __init__(self, base_url: str, api_key: str, *, session: requests.Session | None = None,
                 timeout: float = 30, poll_interval: float = 12.0, max_retries: int = 3,
                 sleep: Callable[[float], Any] | None = None, max_retry_after: float | None = 300.0,
                 clock: Callable[[], float] | None = None, user_agent: str = USER_AGENT,
                 wait_url: str | None = None):
        if not api_key:
            raise ValueError("api_key is required")
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        base = base.removesuffix(API_PREFIX)
        self.base_url = base
        self.wait_url = wait_url.rstrip("/").removesuffix(API_PREFIX) if wait_url else base
        self.api_key = api_key
        self.session = session if session is not None else requests.Session()
        self._own_session = session is None
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.max_retries = max(0, int(max_retries))
        self.max_retry_after = max_retry_after
        self._sleep = sleep if sleep is not None else _default_sleep
        self._clock = clock
        self.user_agent = user_agent
        # What the last answer said about the account (None until an answer carried it).
        self.last_credits: int | None = None
        self.last_rate_limit: dict[str, dict[str, Any]] | None = None
        self.last_request_id: str | None = None
        self.last_response: requests.Response | None = None

    # --- plumbing -----------------------------------------------------------------

    def __enter__(self) -> ScanClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    @property
    def livemode(self) -> bool:
        """False with a test key (``service_test_...``): its scans run in the service's sandbox, free."""
        return not self.api_key.startswith(TEST_KEY_PREFIX)

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

    def _request(self, method: str, path: str, *, json_body: Any = None, params: dict | None = None,
                 idempotency_key: str | None = None, wait: int | None = None) -> dict:
        return _json_object(self._response(method, path, json_body=json_body, params=params,
                                           idempotency_key=idempotency_key, wait=wait))

    def _response(self, method: str, path: str, *, json_body: Any = None, params: dict | None = None,
                  idempotency_key: str | None = None, wait: int | None = None,
                  accept: str = "application/json") -> requests.Response:
        """The successful answer (retried as the status says), or the error it raises."""
        base = self.wait_url if wait else self.base_url
        url = f"{base}{API_PREFIX}{path}"
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": accept, "User-Agent": self.user_agent}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        attempt = 0
        while True:
            try:
                # A call that waits on the server (``wait``) is given that long on top of the timeout.
                response = self.session.request(method, url, json=json_body, params=params, headers=headers,
                                                timeout=self.timeout + (wait or 0))
            except requests.ConnectionError as exc:
                if attempt >= self.max_retries:
                    raise TransportError(f"cannot reach {base}: {_reason(exc)}") from exc
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            except requests.RequestException as exc:
                raise TransportError(f"{method} {url} failed: {_reason(exc)}") from exc
            self._record(response)
            if response.status_code < 400:
                return response
            error = error_from_response(response)
            if (response.status_code not in RETRY_STATUSES or error.code in NOT_RETRIED_CODES
                    or attempt >= self.max_retries):
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

    def create(self, target: str, kind: str | None = None, idempotency_key: str | None = None, *,
               purpose: str | None = None, case_ref: str | None = None, wait: int | None = None,
               min_confidence: float | None = None, required: str | None = None) -> Scan:
        """``POST /api/v1/scan``: queue a scan. The ``Scan`` has ``scan_id``, ``kind``, ``eta_seconds``,
        ``recipes_to_run``, ``poll_url`` and status ``queued``. ``purpose`` (``fraud_prevention``,
        ``kyc_aml``, ...) says why, ``case_ref`` is your own reference; both come back on reads.
        ``wait`` (1 to 60 s): the server answers with the finished scan (its read) when it completes or
        fails within that time, else as without it; the creation's price only. ``min_confidence`` (0 to
        1): findings under it are left out of the result; ``required`` (e.g. ``"profiles.verified OR
        breaches"``): a scan that does not find it has no items and its credit back."""
        body = {"target": target, **_purpose_fields(purpose, case_ref, min_confidence, required)}
        if kind:
            body["kind"] = kind
        answer = self._request("POST", "/scan", json_body=body, idempotency_key=_idempotency(idempotency_key),
                               params=_wait_param(wait), wait=wait)
        scan = Scan.from_dict(answer)
        if scan.target is None:  # the creation answer does not repeat the target
            scan.target = target
        return scan

    def get(self, scan_id: str, *, wait: int | None = None, min_confidence: float | None = None) -> Scan:
        """``GET /api/v1/scan/{id}``: the scan in its current state (1 credit). ``wait`` (1 to 60 s): the
        server answers as soon as the scan is completed or failed, else after that long (still 1 credit).
        ``min_confidence`` (0 to 1): for this read, in place of the scan's own, leave out the findings under it."""
        return Scan.from_dict(self._request("GET", f"/scan/{self._id(scan_id, 'scan_id')}",
                                            params=_read_params(wait, min_confidence), wait=wait))

    def bulk(self, targets: Iterable[dict | str], idempotency_key: str | None = None, *,
             purpose: str | None = None, case_ref: str | None = None, min_confidence: float | None = None,
             required: str | None = None) -> Batch:
        """``POST /api/v1/scan/bulk``: 1 to 100 targets (``"a@b.c"`` or ``{"target", "kind"}``).

        Business and Enterprise tiers. The ``Batch`` lists the queued ``scans`` and the ``rejected`` targets."""
        items = [_target_item(t) for t in targets]
        if not items:
            raise ValueError("a bulk call needs at least one target")
        if len(items) > MAX_BULK_TARGETS:
            raise ValueError(f"a bulk call takes at most {MAX_BULK_TARGETS} targets, not {len(items)}")
        body = {"targets": items, **_purpose_fields(purpose, case_ref, min_confidence, required)}
        return Batch.from_dict(self._request("POST", "/scan/bulk", json_body=body,
                                             idempotency_key=_idempotency(idempotency_key)))

    def get_bulk(self, bulk_id: str, *, wait: int | None = None, min_confidence: float | None = None) -> Batch:
        """``GET /api/v1/scan/bulk/{bulk_id}``: counts by status, ``all_done`` and every scan (1 credit).
        ``wait`` (1 to 60 s): answered as soon as every scan is completed or failed, else after that long.
        ``min_confidence``: as for ``get``, for every scan of the batch."""
        return Batch.from_dict(self._request("GET", f"/scan/bulk/{self._id(bulk_id, 'bulk_id')}",
                                             params=_read_params(wait, min_confidence), wait=wait))

    def rerun(self, scan: str | Scan, idempotency_key: str | None = None) -> Scan:
        """``POST /api/v1/scan/{id}/rerun``: ask again the sources that could not answer for a completed
        scan (its ``result.partial``). A new scan of the same target, with ``rerun_of`` naming the first;
        limited and charged as a creation. ``ApiError`` 409 ``nothing_to_rerun`` when every source
        answered, or the scan is not completed (free of charge)."""
        scan_id = scan.scan_id if isinstance(scan, Scan) else scan
        answer = self._request("POST", f"/scan/{self._id(scan_id, 'scan_id')}/rerun",
                               idempotency_key=_idempotency(idempotency_key))
        rerun = Scan.from_dict(answer)
        if isinstance(scan, Scan) and rerun.target is None:
            rerun.target = scan.target
        return rerun

    def feedback(self, scan_id: str, finding_id: str, verdict: str, note: str | None = None) -> Finding:
        """``POST /api/v1/scan/{id}/findings/{finding_id}/feedback``: say whether a finding is about the
        person (``confirmed``) or not (``false_positive``), with an optional note (1 credit). Later
        reads show it on the finding; giving it again replaces it."""
        if verdict not in FEEDBACK_VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(FEEDBACK_VERDICTS)}")
        body: dict[str, Any] = {"verdict": verdict}
        if note is not None:
            body["note"] = note
        try:
            answer = self._request("POST", f"/scan/{self._id(scan_id, 'scan_id')}/findings/"
                                           f"{self._id(finding_id, 'finding_id')}/feedback", json_body=body)
        except NotFound as exc:  # the service's words do not repeat the ids: say which finding was asked for
            raise FindingNotFound(exc, scan_id, finding_id) from None
        return Finding.from_dict(answer.get("finding") or {})

    # --- erasure -------------------------------------------------------------------------

    def erase(self, scan_id: str) -> dict:
        """``DELETE /api/v1/scan/{id}``: erase a completed or failed scan's target, result and webhook
        bodies now: ``{ok, scan_id, erased_at}`` (1 credit). A scan still in flight is a ``Conflict``
        (``scan_in_flight``); erasing it again answers the same."""
        return self._request("DELETE", f"/scan/{self._id(scan_id, 'scan_id')}")

    def erase_bulk(self, bulk_id: str) -> dict:
        """``DELETE /api/v1/scan/bulk/{bulk_id}``: erase every completed or failed scan of the batch:
        ``{ok, bulk_id, erased, in_flight}`` (1 credit); those in flight are counted and left."""
        return self._request("DELETE", f"/scan/bulk/{self._id(bulk_id, 'bulk_id')}")

    # --- lists -------------------------------------------------------------------------

    def _page(self, path: str, model, filters: dict, limit: int | None, starting_after: str | None) -> Page:
        params = {name: _param(value) for name, value in filters.items() if value is not None}
        if limit is not None:
            if not 1 <= int(limit) <= MAX_PAGE:
                raise ValueError(f"limit is 1 to {MAX_PAGE}")
            params["limit"] = int(limit)
        if starting_after:
            params["starting_after"] = starting_after
        answer = self._request("GET", path, params=params)
        items = [model.from_dict(item) for item in answer.get("data") or []]
        for item in items:  # a list holds the calling key's mode only; its scan entries do not repeat it
            if getattr(item, "livemode", True) is None:
                item.livemode = self.livemode
        return Page(items, bool(answer.get("has_more")), answer)

    def _all(self, page: Callable[..., Page], max_items: int | None) -> Iterator:
        after, count, seen = None, 0, set()
        while True:
            current = page(starting_after=after)
            for item in current.data:
                yield item
                count += 1
                if max_items is not None and count >= max_items:
                    return
            if not current.has_more or not current.data:
                return
            after = _cursor(current.data[-1])
            if after in seen:
                # A page that ends where an earlier one did: asking again would loop for ever,
                # paying for every page. The server is at fault; say so rather than spin.
                raise ApiError(200, "invalid_response", f"the server's pages make no progress: it answered "
                               f"has_more after {after} twice")
            seen.add(after)

    def list_scans(self, *, status: str | None = None, kind: str | None = None, bulk_id: str | None = None,
                   created_after: datetime | str | None = None, created_before: datetime | str | None = None,
                   limit: int | None = None, starting_after: str | None = None) -> Page:
        """``GET /api/v1/scans``: one page of your scans, newest first (1 credit). ``Page.data`` holds ``Scan``s."""
        return self._page("/scans", Scan, {"status": status, "kind": kind, "bulk_id": bulk_id,
                                           "created_after": created_after, "created_before": created_before},
                          limit, starting_after)

    def iter_scans(self, *, max_items: int | None = None, page_size: int = MAX_PAGE, **filters) -> Iterator[Scan]:
        """Every scan matching ``filters`` (those of ``list_scans``), newest first, page after page
        (each page is one call, 1 credit). Stops after ``max_items`` when given."""
        return self._all(lambda starting_after: self.list_scans(limit=page_size, starting_after=starting_after,
                                                                **filters), max_items)

    def list_deliveries(self, *, status: str | None = None, event: str | None = None, scan_id: str | None = None,
                        limit: int | None = None, starting_after: str | None = None,
                        endpoint_id: str | None = None) -> Page:
        """``GET /api/v1/deliveries``: one page of webhook deliveries, newest first (1 credit).

        ``status`` is ``pending``, ``succeeded`` or ``failed``; ``Page.data`` holds ``Delivery``s, each with
        its attempts and the exact body sent: a receiver that was down reads what it missed here."""
        return self._page("/deliveries", Delivery, {"status": status, "event": event, "scan_id": scan_id,
                                                    "endpoint_id": endpoint_id}, limit, starting_after)

    def iter_deliveries(self, *, max_items: int | None = None, page_size: int = MAX_PAGE,
                        **filters) -> Iterator[Delivery]:
        """Every delivery matching ``filters`` (those of ``list_deliveries``), newest first, page after page."""
        return self._all(lambda starting_after: self.list_deliveries(limit=page_size, starting_after=starting_after,
                                                                     **filters), max_items)

    def list_activity(self, *, action: str | None = None, key_id: str | None = None, resource_id: str | None = None,
                      target: str | None = None, created_after: datetime | str | None = None,
                      created_before: datetime | str | None = None, limit: int | None = None,
                      starting_after: str | None = None) -> Page:
        """``GET /api/v1/activity``: one page of your account's activity log, newest first (1 credit):
        every call of your keys (of this key's mode) and every portal action. ``target`` finds the
        creations that looked that target up (written as in a creation). ``Page.data`` holds
        ``ActivityEntry``s."""
        return self._page("/activity", ActivityEntry, {
            "action": action, "key_id": key_id, "resource_id": resource_id, "target": target,
            "created_after": created_after, "created_before": created_before}, limit, starting_after)

    def iter_activity(self, *, max_items: int | None = None, page_size: int = MAX_PAGE,
                      **filters) -> Iterator[ActivityEntry]:
        """Every entry matching ``filters`` (those of ``list_activity``), newest first, page after page."""
        return self._all(lambda starting_after: self.list_activity(limit=page_size, starting_after=starting_after,
                                                                   **filters), max_items)

    def export_activity(self, cursor: str | None = None, *, limit: int | None = None) -> ActivityExportPage:
        """``GET /api/v1/activity/export``: one page of your activity log (of this key's mode), oldest
        first (1 credit). Pass the previous page's ``next_cursor`` to go on; ``has_more`` is False once
        you have everything written so far (ask again later with the same cursor)."""
        params = {"cursor": cursor, "limit": limit}
        response = self._response("GET", "/activity/export", params={k: v for k, v in params.items() if v is not None},
                                  accept="application/x-ndjson")
        entries = [ActivityEntry.from_dict(json.loads(line)) for line in response.text.splitlines() if line.strip()]
        return ActivityExportPage(entries, response.headers.get("X-Next-Cursor", cursor or ""),
                                  response.headers.get("X-Has-More") == "true")

    def iter_activity_export(self, cursor: str | None = None, *, page_size: int | None = None) -> ActivityExport:
        """Every entry written so far after ``cursor`` (None: from your oldest), oldest first, page
        after page. The iterator's ``cursor`` is where to resume (store it with what you exported)."""
        return ActivityExport(self, cursor, page_size)

    def redeliver(self, delivery_id: str, idempotency_key: str | None = None) -> Delivery:
        """``POST /api/v1/deliveries/{id}/redeliver``: queue a new attempt of a finished delivery
        (same delivery id and body, signed anew)."""
        answer = self._request("POST", f"/deliveries/{self._id(delivery_id, 'delivery_id')}/redeliver",
                               idempotency_key=_idempotency(idempotency_key))
        delivery = Delivery.from_dict(answer)
        delivery.delivery_id = delivery.delivery_id or delivery_id
        return delivery

    # --- webhook endpoints --------------------------------------------------------------

    def list_sources(self) -> list[SourceHealth]:
        """``GET /api/v1/sources``: every source the investigations consult, with its status, its share of
        usable answers and p95 latency over the last hour, its last check and whether new scans leave it
        out for now (1 credit; any key may call it, whatever its scopes)."""
        return [SourceHealth.from_dict(s) for s in self._request("GET", "/sources").get("data", [])]

    def list_endpoints(self) -> list[Endpoint]:
        """``GET /api/v1/endpoints``: this key's webhook endpoints, its webhook URL first (1 credit)."""
        return [Endpoint.from_dict(e) for e in self._request("GET", "/endpoints").get("data", [])]

    def create_endpoint(self, url: str, *, events: list[str] | None = None, payload: str | None = None,
                        enabled: bool | None = None, description: str | None = None, secret: str | None = None,
                        idempotency_key: str | None = None) -> Endpoint:
        """``POST /api/v1/endpoints``: a new endpoint of this key (at most 10). The answer's ``secret``
        is its signing secret (``secret`` when given, else generated): shown this once."""
        body = _given({"url": url, "events": events, "payload": payload, "enabled": enabled,
                       "description": description, "secret": secret})
        return Endpoint.from_dict(self._request("POST", "/endpoints", json_body=body,
                                                idempotency_key=_idempotency(idempotency_key)))

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        """``GET /api/v1/endpoints/{id}``: one endpoint (never its secret)."""
        return Endpoint.from_dict(self._request("GET", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}"))

    def update_endpoint(self, endpoint_id: str, *, url: str | None = None, events: list[str] | None = None,
                        payload: str | None = None, enabled: bool | None = None,
                        description: str | None = None) -> Endpoint:
        """``PATCH /api/v1/endpoints/{id}``: change the fields given. ``enabled=True`` resumes an
        endpoint that was disabled after failing for days."""
        body = _given({"url": url, "events": events, "payload": payload, "enabled": enabled,
                       "description": description})
        return Endpoint.from_dict(self._request("PATCH", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}",
                                                json_body=body))

    def delete_endpoint(self, endpoint_id: str) -> None:
        """``DELETE /api/v1/endpoints/{id}``: no later event goes there."""
        self._request("DELETE", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}")

    def roll_endpoint_secret(self, endpoint_id: str, *, overlap_hours: int = 24,
                             idempotency_key: str | None = None) -> dict:
        """``POST /api/v1/endpoints/{id}/roll-secret``: ``{endpoint_id, secret, switch_at}``: the next
        secret, shown this once; both secrets sign until ``switch_at``."""
        return self._request("POST", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}/roll-secret",
                             json_body={"overlap_hours": overlap_hours},
                             idempotency_key=_idempotency(idempotency_key))

    def switch_endpoint_secret(self, endpoint_id: str) -> Endpoint:
        """``POST /api/v1/endpoints/{id}/switch-secret``: end a rotation now: the rolled secret is the
        only one from now on (``ValidationError`` when none is under way)."""
        return Endpoint.from_dict(self._request(
            "POST", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}/switch-secret"))

    def recover_endpoint(self, endpoint_id: str, since: datetime | str, until: datetime | str | None = None,
                         idempotency_key: str | None = None) -> int:
        """``POST /api/v1/endpoints/{id}/recover``: send again, once each and oldest first, every failed or
        skipped delivery to the endpoint created in [since, until); returns how many were queued."""
        body = _given({"since": _param(since), "until": _param(until) if until is not None else None})
        answer = self._request("POST", f"/endpoints/{self._id(endpoint_id, 'endpoint_id')}/recover",
                               json_body=body, idempotency_key=_idempotency(idempotency_key))
        return int(answer.get("queued", 0))

    def list_events(self, *, events: Iterable[str] | str | None = None, scan_id: str | None = None,
                    bulk_id: str | None = None, watch_id: str | None = None, payload: str | None = None,
                    limit: int | None = None, starting_after: str | None = None) -> Page:
        """``GET /api/v1/events``: one page of your scans' events, newest first (1 credit). ``events``: kinds
        (``scan.completed``, ...); ``payload="thin"``: bodies without target, result or failure message."""
        return self._page("/events", Event, {**_event_filters(events, scan_id, bulk_id, watch_id, payload)},
                          limit, starting_after)

    def iter_events(self, *, max_items: int | None = None, page_size: int = MAX_PAGE, **filters) -> Iterator[Event]:
        """Every event matching ``filters`` (those of ``list_events``), newest first, page after page."""
        return self._all(lambda starting_after: self.list_events(limit=page_size, starting_after=starting_after,
                                                                 **filters), max_items)

    def events(self, *, after: str | None = None, events: Iterable[str] | str | None = None,
               scan_id: str | None = None, bulk_id: str | None = None, watch_id: str | None = None,
               payload: str | None = None, reconnect: bool = True) -> Iterator[Event]:
        """Follow your scans' events as they happen (``GET /api/v1/events/stream``), oldest first, for ever:
        from the next one, or after event id ``after``. When the connection drops it reconnects (with
        ``reconnect``) and resumes after the last event received, so none is lost or repeated; each
        connection costs 1 credit. Stop by leaving the loop."""
        params = _event_filters(events, scan_id, bulk_id, watch_id, payload)
        last, attempt = after, 0
        while True:
            try:
                for event in self._stream(params, last):
                    last, attempt = event.event_id, 0
                    yield event
            except TransportError:
                if not reconnect or attempt >= self.max_retries:
                    raise
            if not reconnect:
                return
            self._sleep(self._backoff(attempt))
            attempt += 1

    def _stream(self, params: dict, last: str | None) -> Iterator[Event]:
        """One connection of ``events``: its events until the server or the network ends it."""
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "text/event-stream",
                   "User-Agent": self.user_agent}
        if last:
            headers["Last-Event-ID"] = last
        url = f"{self.wait_url}{API_PREFIX}/events/stream"
        try:
            # The read timeout outlasts the server's heartbeat (a comment every 10 s) several times over.
            with self.session.get(url, params=params, headers=headers, stream=True,
                                  timeout=(self.timeout, max(self.timeout, 45))) as response:
                self._record(response)
                if response.status_code >= 400:
                    raise error_from_response(response)
                fields: dict[str, str] = {}
                for line in response.iter_lines(decode_unicode=True):
                    if line:
                        if not line.startswith(":"):
                            name, _, value = line.partition(":")
                            fields[name] = value.removeprefix(" ")
                        continue
                    if "data" in fields:
                        yield Event.from_dict({"event_id": fields.get("id", ""), "event": fields.get("event", ""),
                                               "body": json.loads(fields["data"])})
                    fields = {}
        except requests.RequestException as exc:
            raise TransportError(f"the events stream of {self.wait_url} broke: {_reason(exc)}") from exc

    @property
    def watches(self) -> Watches:
        """The watches calls: ``api.watches.create(...)``, ``.create_bulk``, ``.list``, ``.iter``, ``.get``,
        ``.update``, ``.pause``, ``.resume``, ``.end``, ``.run`` (the key needs the ``watches`` scope)."""
        return Watches(self)

    def account(self) -> Account:
        """``GET /api/v1/account``: the balance (after this call's 1 credit), the limits and usage, and
        what this key may do (scopes, expiry, IP allowlist). Any key may call it, whatever its scopes."""
        return Account.from_dict(self._request("GET", "/account"))

    # --- waiting ---------------------------------------------------------------------

    def _await(self, read: Callable[[int], Any], done: Callable[[Any], bool], resource_id: str,
               timeout: float | None, on_progress: Callable[[Any], Any] | None,
               poll_interval: float | None):
        """``read(wait)`` until ``done``: each read asks the server to hold it up to ``MAX_WAIT`` s
        (never past ``timeout``), so a scan of three minutes costs three or four reads."""
        interval = self.poll_interval if poll_interval is None else poll_interval
        start = self._now()
        while True:
            left = None if timeout is None else timeout - (self._now() - start)
            asked = MAX_WAIT if left is None else max(1, min(MAX_WAIT, math.ceil(left)))
            sent = self._now()
            state = read(asked)
            if on_progress is not None:
                on_progress(state)
            if done(state):
                return state
            now = self._now()
            elapsed = now - start
            if timeout is not None and elapsed >= timeout:
                raise WaitTimeout(resource_id, state, elapsed, timeout)
            if now - sent < asked / 2:
                # Answered early without a final state: the call was not held (a proxy in the way,
                # a server that cut it short). Pause as a poll would rather than pay for reads back to back.
                self._sleep(interval if timeout is None else max(0.0, min(interval, timeout - elapsed)))

    def wait(self, scan_id: str | Scan, *, timeout: float | None = None,
             on_progress: Callable[[Scan], Any] | None = None, poll_interval: float | None = None,
             progress: bool = False) -> Scan:
        """Read the scan, letting the server hold each read until it is ``completed`` or ``failed`` (up
        to 60 s a read, 1 credit each), until it is; its final state.

        ``on_progress(scan)`` is called after every read; ``progress=True`` draws a progress bar on
        stderr. Raises ``WaitTimeout`` once ``timeout`` seconds have passed without a final state
        (the scan itself goes on). ``poll_interval``: see the class.
        """
        scan_id = scan_id.scan_id if isinstance(scan_id, Scan) else scan_id
        with _Bar(progress, scan_id, on_progress) as callback:
            return self._await(lambda wait: self.get(scan_id, wait=wait), lambda s: s.done, scan_id, timeout,
                               callback, poll_interval)

    def wait_bulk(self, bulk_id: str | Batch, *, timeout: float | None = None,
                  on_progress: Callable[[Batch], Any] | None = None, poll_interval: float | None = None,
                  progress: bool = False) -> Batch:
        """Read the batch, each read held by the server until ``all_done`` (up to 60 s), until it is;
        its final aggregate state."""
        bulk_id = bulk_id.bulk_id if isinstance(bulk_id, Batch) else bulk_id
        with _Bar(progress, bulk_id, on_progress) as callback:
            return self._await(lambda wait: self.get_bulk(bulk_id, wait=wait), lambda b: bool(b.all_done), bulk_id,
                               timeout, callback, poll_interval)


def _cursor(item) -> str:
    """The id a list's next page starts after: the last entry's own id."""
    for model, name in ((Scan, "scan_id"), (ActivityEntry, "activity_id"), (Event, "event_id"),
                        (Watch, "watch_id")):
        if isinstance(item, model):
            return getattr(item, name)
    return item.delivery_id


def _wait_param(wait: int | None) -> dict | None:
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int) or not 1 <= wait <= 60:
        raise ValueError("wait is a whole number of seconds from 1 to 60")
    return {"wait": wait}


def _read_params(wait: int | None, min_confidence: float | None) -> dict | None:
    """A read's query: ``wait`` and ``min_confidence``, those given."""
    params = dict(_wait_param(wait) or {})
    if min_confidence is not None:
        if isinstance(min_confidence, bool) or not isinstance(min_confidence, (int, float)) \
                or not 0 <= min_confidence <= 1:
            raise ValueError("min_confidence is a number from 0 to 1")
        params["min_confidence"] = min_confidence
    return params or None


def _event_filters(events, scan_id, bulk_id, watch_id, payload) -> dict:
    kinds = events if events is None or isinstance(events, str) else ",".join(events)
    return {name: value for name, value in (("events", kinds), ("scan_id", scan_id), ("bulk_id", bulk_id),
                                            ("watch_id", watch_id), ("payload", payload)) if value is not None}


UNCHANGED = object()  # an argument not given: the field is left out of the body, the service keeps its value


class Watches:
    """``ScanClient.watches``: targets scanned again every day, week or month, each scan charged and
    limited as a scan creation; a scan that adds or removes a finding, or changes the risk band,
    sends a ``watch.changed`` event (webhook endpoints that list it, ``events()``)."""

    def __init__(self, client: ScanClient):
        self._client = client

    def _path(self, watch_id: str | Watch, suffix: str = "") -> str:
        watch_id = watch_id.watch_id if isinstance(watch_id, Watch) else watch_id
        return f"/watches/{self._client._id(watch_id, 'watch_id')}{suffix}"

    def create(self, target: str, kind: str | None = None, *, interval: str, purpose: str | None = None,
               case_ref: str | None = None, idempotency_key: str | None = None, min_confidence: float | None = None,
               required: str | None = None) -> Watch:
        """``POST /api/v1/watches``: follow ``target`` every ``interval`` (``daily``, ``weekly`` or
        ``monthly``). Its first scan, the one later scans are compared with, is queued at once and paid
        by this call (as a scan creation); ``last_scan_id`` names it."""
        body = {"target": target, "interval": interval,
                **_purpose_fields(purpose, case_ref, min_confidence, required)}
        if kind:
            body["kind"] = kind
        return Watch.from_dict(self._client._request("POST", "/watches", json_body=body,
                                                     idempotency_key=_idempotency(idempotency_key)))

    def create_bulk(self, targets: Iterable[dict | str], *, interval: str, purpose: str | None = None,
                    case_ref: str | None = None, idempotency_key: str | None = None,
                    min_confidence: float | None = None, required: str | None = None) -> WatchBatch:
        """``POST /api/v1/watches/bulk``: 1 to 100 targets (``"a@b.c"`` or ``{"target", "kind"}``), each a
        watch of its own with the same interval, purpose and case reference (Business and Enterprise
        tiers). The ``WatchBatch`` lists the ``watches`` created and the ``rejected`` targets with why."""
        items = [_target_item(t) for t in targets]
        if not items:
            raise ValueError("a bulk call needs at least one target")
        if len(items) > MAX_BULK_TARGETS:
            raise ValueError(f"a bulk call takes at most {MAX_BULK_TARGETS} targets, not {len(items)}")
        body = {"targets": items, "interval": interval,
                **_purpose_fields(purpose, case_ref, min_confidence, required)}
        return WatchBatch.from_dict(self._client._request("POST", "/watches/bulk", json_body=body,
                                                          idempotency_key=_idempotency(idempotency_key)))

    def list(self, *, status: str | None = None, kind: str | None = None, limit: int | None = None,
             starting_after: str | None = None) -> Page:
        """``GET /api/v1/watches``: one page of your watches, newest first (1 credit); ``status``
        ``active``, ``paused`` or ``ended``. ``Page.data`` holds ``Watch``es."""
        return self._client._page("/watches", Watch, {"status": status, "kind": kind}, limit, starting_after)

    def iter(self, *, max_items: int | None = None, page_size: int = MAX_PAGE, **filters) -> Iterator[Watch]:
        """Every watch matching ``filters`` (those of ``list``), newest first, page after page (each
        page is one call, 1 credit). Stops after ``max_items`` when given."""
        return self._client._all(lambda starting_after: self.list(limit=page_size, starting_after=starting_after,
                                                                  **filters), max_items)

    def get(self, watch_id: str | Watch) -> Watch:
        """``GET /api/v1/watches/{id}``: the watch, with ``last_changes`` (1 credit)."""
        return Watch.from_dict(self._client._request("GET", self._path(watch_id)))

    def update(self, watch_id: str | Watch, *, interval: str | None = None, status: str | None = None,
               case_ref: Any = UNCHANGED) -> Watch:
        """``PATCH /api/v1/watches/{id}``: a new ``interval``, ``status`` (``paused`` or ``active``), or
        ``case_ref`` (None removes it); what is not given stays. A ``WatchEnded`` for an ended watch."""
        body: dict[str, Any] = _given({"interval": interval, "status": status})
        if case_ref is not UNCHANGED:
            body["case_ref"] = case_ref
        return Watch.from_dict(self._client._request("PATCH", self._path(watch_id), json_body=body))

    def pause(self, watch_id: str | Watch) -> Watch:
        """No scheduled scan until it is resumed."""
        return self.update(watch_id, status="paused")

    def resume(self, watch_id: str | Watch) -> Watch:
        """Active again: its next scan is due at its next place in the interval."""
        return self.update(watch_id, status="active")

    def end(self, watch_id: str | Watch) -> Watch:
        """``DELETE /api/v1/watches/{id}``: no more scans; its scans stay (erase them as any scan).
        Ending it again answers the same."""
        return Watch.from_dict(self._client._request("DELETE", self._path(watch_id)))

    def run(self, watch_id: str | Watch, idempotency_key: str | None = None) -> Scan:
        """``POST /api/v1/watches/{id}/run``: scan the target now, outside the schedule (charged and
        limited as a scan creation); the queued ``Scan``, with ``watch_id``. Wait for it as for any scan."""
        scan = Scan.from_dict(self._client._request("POST", self._path(watch_id, "/run"),
                                                    idempotency_key=_idempotency(idempotency_key)))
        if isinstance(watch_id, Watch) and scan.target is None:
            scan.target = watch_id.target
        return scan


def _default_sleep(seconds: float) -> None:
    time.sleep(seconds)


def _given(fields: dict) -> dict:
    """The fields that were given (None: left out of the body, so the server keeps its value)."""
    return {name: value for name, value in fields.items() if value is not None}


def _idempotency(given: str | None) -> str:
    """One key per logical call, the same on each of its retries."""
    return given or f"auto-{uuid.uuid4().hex}"


def _param(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


class _Bar:
    """``progress=True``: a tqdm bar on stderr fed by every read, then ``on_progress``."""

    def __init__(self, enabled: bool, label: str, on_progress: Callable | None):
        self.enabled, self.label, self.on_progress = enabled, label, on_progress
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return self.on_progress
        import sys

        from scan_api_client.progress import ProgressBar
        self.bar = ProgressBar(sys.stderr, self.label)

        def callback(state):
            self.bar.update(state)
            if self.on_progress is not None:
                self.on_progress(state)
        return callback

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


def _json_object(response) -> dict:
    """The answer's JSON object; anything else (no JSON, an array, a number) is the server's fault,
    raised as ``ApiError`` with code ``invalid_response`` rather than a crash further on."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
        what = "is not JSON"
    else:
        what = f"is a JSON {type(answer).__name__}, not an object"
    if not isinstance(answer, dict):
        raise ApiError(response.status_code, "invalid_response", f"HTTP {response.status_code} answer {what}",
                       response.headers.get("X-Request-Id"), headers=response.headers)
    return answer


@dataclass
class ActivityExportPage:
    """One page of the activity export: its entries, the cursor of the next page, whether more are ready now."""

    entries: list
    next_cursor: str
    has_more: bool


class ActivityExport:
    """Iterates over the activity export page after page, until it has everything written so far;
    ``cursor`` is the position after the last entry of the last page read (resume from it later)."""

    def __init__(self, client: ScanClient, cursor: str | None, page_size: int | None):
        self.client, self.cursor, self.page_size = client, cursor, page_size

    def __iter__(self) -> Iterator[ActivityEntry]:
        while True:
            page = self.client.export_activity(self.cursor, limit=self.page_size)
            yield from page.entries
            self.cursor = page.next_cursor
            if not page.has_more:
                return
