"""The investigation engine's HTTP client (E1).

One ``requests.Session`` per thread keeps connections alive between calls; it takes
its proxy from the environment once, for ENGINE_URL, rather than on every call (which
``requests`` does by walking the whole environment and looking for a .netrc). Any
connection failure, timeout, non-2xx status or malformed answer is an
``EngineError``: on submission the caller answers 502 ``engine_submit_failed``, while
tracking it retries with back-off.
"""
from __future__ import annotations

import threading
import time
from urllib.parse import quote

import requests

from app.plumbing import metrics, runtime

_local = threading.local()


class EngineError(Exception):
    pass


class BatchLookUnsupported(EngineError):
    """The engine answered the batch look with 404 or 405: it does not offer it (E6)."""


def _session() -> requests.Session:
    url = runtime.config["ENGINE_URL"]
    session = getattr(_local, "session", None)
    if session is None or _local.url != url:
        session = requests.Session()
        session.trust_env = False
        session.proxies.update(requests.utils.get_environ_proxies(url))
        _local.session, _local.url = session, url
    return session


def _headers() -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if runtime.config.get("ENGINE_TOKEN"):
        headers["Authorization"] = f"Bearer {runtime.config['ENGINE_TOKEN']}"
    return headers


def _request(method: str, path: str, *, timeout: float, json=None, expect=(200, 201),
             shown: str | None = None) -> tuple[requests.Response, float, str]:
    """The engine's answer to one request with an ``expect``ed status, its seconds and the call's
    metrics label; ``EngineError`` otherwise. ``shown``: the path as errors name it (logged),
    when ``path`` holds an engine id: an id may encode its target, and a target is never logged."""
    url = f"{runtime.config['ENGINE_URL']}{path}"
    where = f"{method} {shown or path}"
    started = time.perf_counter()
    call = path.split("/")[2] if path.count("/") >= 2 else path
    try:
        response = _session().request(method, url, json=json, headers=_headers(), timeout=timeout,
                                      allow_redirects=False)
    except requests.RequestException as exc:
        metrics.observe_engine_call(call, time.perf_counter() - started,
                                    "timeout" if isinstance(exc, requests.Timeout) else "connection")
        raise EngineError(f"{where}: {exc.__class__.__name__}") from exc
    seconds = time.perf_counter() - started
    if response.status_code not in expect:
        metrics.observe_engine_call(call, seconds, f"http_{response.status_code // 100}xx")
        unsupported = path == BATCH_LOOK_PATH and response.status_code in (404, 405)
        raise (BatchLookUnsupported if unsupported else EngineError)(f"{where}: HTTP {response.status_code}")
    return response, seconds, call


def _call(method: str, path: str, *, timeout: float, json=None, expect=(200, 201), shown: str | None = None) -> dict:
    """The engine's JSON object answer (see ``_request``)."""
    response, seconds, call = _request(method, path, timeout=timeout, json=json, expect=expect, shown=shown)
    where = f"{method} {shown or path}"
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        metrics.observe_engine_call(call, seconds, "malformed")
        raise EngineError(f"{where}: " + ("malformed JSON" if body is None else "answer is not an object"))
    metrics.observe_engine_call(call, seconds)
    return body


def _submission(item) -> dict:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
        raise EngineError("submission answer without an id")
    recipes, eta = item.get("recipes"), item.get("eta_seconds")
    return {
        "id": item["id"],
        "recipes": recipes if isinstance(recipes, int) and recipes >= 0 else 0,
        "eta_seconds": eta if isinstance(eta, int) and eta >= 0 else 0,
        # E7: the engine promises to call back (only when it was given a callback_url).
        "callbacks": item.get("callbacks") is True and bool(runtime.config.get("ENGINE_CALLBACK_URL")),
    }


def _with_callback(item: dict) -> dict:
    """E7: with ENGINE_CALLBACK_URL set, every submission asks the engine to call back there."""
    url = runtime.config.get("ENGINE_CALLBACK_URL")
    return {**item, "callback_url": url} if url else item


def submit(target: str, kind: str, reference: str, sources: list[str] | None = None) -> dict:
    """Submit one investigation; ``sources``: a re-run of those sources only (E6)."""
    item: dict[str, object] = _with_callback({"target": target, "kind": kind, "reference": reference})
    if sources is not None:
        item["sources"] = sources
    body = _call("POST", "/v1/investigations", json=item,
                 timeout=runtime.config["ENGINE_SUBMIT_TIMEOUT_SECONDS"], expect=(200, 201))
    return _submission(body)


def submit_batch(items: list[dict]) -> list[dict]:
    body = _call("POST", "/v1/investigations/batch", json={"items": [_with_callback(item) for item in items]},
                 timeout=runtime.config["ENGINE_SUBMIT_TIMEOUT_SECONDS"], expect=(200, 201))
    answers = body.get("items")
    if not isinstance(answers, list) or len(answers) != len(items):
        raise EngineError("batch answer does not match the request")
    return [_submission(item) for item in answers]


BATCH_LOOK_PATH = "/v1/investigations/status"


def status_batch(engine_ids: list[str]) -> list[dict]:
    """The batch look (E6): each id's state as ``status`` answers it, in the order asked (at most
    100 ids). ``BatchLookUnsupported`` when the engine does not offer it. An id the engine does
    not know is an item with ``"status": "error"`` and ``error.code`` ``not_found``."""
    body = _call("POST", BATCH_LOOK_PATH, json={"ids": engine_ids},
                 timeout=runtime.config["ENGINE_STATUS_TIMEOUT_SECONDS"], expect=(200,))
    items = body.get("items")
    if not isinstance(items, list) or len(items) != len(engine_ids) or not all(isinstance(i, dict) for i in items):
        raise EngineError("batch look answer does not match the request")
    return items


def status(engine_id: str) -> dict:
    return _call("GET", _investigation_path(engine_id), shown=INVESTIGATION_SHOWN,
                 timeout=runtime.config["ENGINE_STATUS_TIMEOUT_SECONDS"], expect=(200,))


# What ``delete`` tells: the engine forgot it now, had no such investigation (gone already), or
# does not offer deletion (E7).
DELETED, UNKNOWN, UNSUPPORTED = "deleted", "unknown", "unsupported"
_DELETION_OUTCOMES = {404: UNKNOWN, 405: UNSUPPORTED}


def delete(engine_id: str) -> str:
    """Ask the engine to forget an investigation and its result (E7): ``DELETED`` (2xx),
    ``UNKNOWN`` (404) or ``UNSUPPORTED`` (405); ``EngineError`` for anything else."""
    response, seconds, call = _request("DELETE", _investigation_path(engine_id), shown=INVESTIGATION_SHOWN,
                                       timeout=runtime.config["ENGINE_STATUS_TIMEOUT_SECONDS"],
                                       expect=(200, 202, 204, 404, 405))
    metrics.observe_engine_call(call, seconds)
    return _DELETION_OUTCOMES.get(response.status_code, DELETED)


INVESTIGATION_SHOWN = "/v1/investigations/<id>"


def _investigation_path(engine_id: str) -> str:
    return f"/v1/investigations/{quote(engine_id, safe='')}"


# --- E8: the engine's sources and their probes (D30) ---------------------------------

SOURCES_PATH = "/v1/sources"


def list_sources() -> list[dict] | None:
    """The engine's sources with their probe identities (E8), or None when it does not list them
    (404 or 405): the service then judges sources by scans' answers alone."""
    response, seconds, call = _request("GET", SOURCES_PATH, timeout=runtime.config["ENGINE_STATUS_TIMEOUT_SECONDS"],
                                       expect=(200, 404, 405))
    if response.status_code != 200:
        metrics.observe_engine_call(call, seconds)
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    listed = body.get("sources") if isinstance(body, dict) else None
    if not isinstance(listed, list):
        metrics.observe_engine_call(call, seconds, "malformed")
        raise EngineError(f"GET {SOURCES_PATH}: answer is not a sources listing")
    metrics.observe_engine_call(call, seconds)
    return [item for item in listed if isinstance(item, dict)]


def submit_probes(items: list[dict]) -> list[dict]:
    """Submit probes (E8: ``sources: [id]`` and ``"probe": true``, at most 100) in one batch; never
    with a callback URL: a probe is no scan, and nothing waits for it but the next health turn."""
    body = _call("POST", "/v1/investigations/batch", json={"items": [{**item, "probe": True} for item in items]},
                 timeout=runtime.config["ENGINE_SUBMIT_TIMEOUT_SECONDS"], expect=(200, 201))
    answers = body.get("items")
    if not isinstance(answers, list) or len(answers) != len(items):
        raise EngineError("batch answer does not match the request")
    return [_submission(item) for item in answers]
