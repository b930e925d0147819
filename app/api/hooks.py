"""The wrappers an API view declares itself with, and the answers a view renders.

A view is wrapped by ``api_call`` (or ``served_read``, for the reads that authenticate in the
statement that reads). The wrapper records what the view declares (the scope it needs, whether it
takes query parameters, whether it fills a ``report``) and hands each call to the adapter installed
at start (``install``; ``create_app`` installs ``app/api_calls.py``, which runs ``app.pipeline``):
a domain's routes import this module, so it knows no domain and not the pipeline, and the pipeline
stays above the domains whose routes it serves.

A view whose service charged the call in its own transaction (a creation, the account's read) or
names the entry's object declares a ``report`` parameter and fills it with ``charged``: the
pipeline then charges nothing more.
"""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from functools import lru_cache, wraps
from typing import Any

from flask import Response, current_app, request

from app.errors import UNKNOWN_FIELD, query_error
from app.plumbing import rawjson
from app.plumbing.installed import Installed

# What runs an accounted call: ``app/api_calls.py``, installed by ``create_app`` (``install``).
# It runs each call: authenticates, checks, charges, records, answers.
_calls: Installed[Any] = Installed("the API's adapter")
install = _calls.install


def json_body(body: dict, status: int = 200) -> Response:
    """The answer flask-smorest would make of ``body`` (schema dump, then ``jsonify``).

    The services build these bodies with exactly their schema's fields, types and order
    (tests/unit/test_response_bodies.py), so the dump would change nothing; skipping it,
    and writing stored results as they are (``RawJSON``), gives the same bytes for a
    fraction of the work.
    """
    provider = current_app.json
    if (provider.compact is None and current_app.debug) or provider.compact is False:
        response = provider.response(rawjson.parsed(body))  # indented output: no splicing
    else:
        text = rawjson.render(body, lambda obj: provider.dumps(obj, separators=(",", ":")))
        response = current_app.response_class(f"{text}\n", mimetype=provider.mimetype)
    response.status_code = status
    return response


def render(body: dict, status: int = 200) -> Response:
    """The JSON answer of a view (what its service charged, if it did, goes in its ``report``)."""
    return json_body(body, status)


def charged(report, *, balance: int, usage, limits=None, credits: int, subject=None, recorded=None,
            replayable: bool = False, stored: tuple[int, str] | None = None) -> None:
    """Say in the view's ``report`` what its service charged in its own transaction (the
    pipeline charges nothing more), what the entry says about its object, the entry written with
    the charge (D25) and ``replayable``: an answer other than a 202 that created something, which
    an ``Idempotency-Key`` replays as it does every 202 (never a 201 holding a secret); ``stored``:
    the answer (status, text) an ``Idempotency-Key`` replays in place of this one."""
    _calls().charged(report, balance=balance, usage=usage, limits=limits, credits=credits, subject=subject,
                     recorded=recorded, replayable=replayable, stored=stored)


def call_entry(key, status: int):
    """This call's activity entry, for the statement or transaction that charges the call to
    write with its charge (D25); ``status``: the answer the call gives when served."""
    return _calls().call_entry(key, status)


def ledger_notes() -> dict[int, str]:
    """The ledger note of this call for each answer a read can be charged for (200, 403, 404)."""
    return _calls().ledger_notes()


def still_allowed(key, scope: str) -> Callable[[], bool]:
    """Whether ``key`` may still make a call needing ``scope`` from this call's address: what a
    call that stays open (a wait, a stream) asks while it runs."""
    return _calls().still_allowed(key, scope)


def api_call(view: Callable | None = None, *, scope: str | None = None, action: str | None = None) -> Callable:
    """Wrap a view (``view(self, key, ...)``): the key is authenticated before anything else,
    then D21's check of the key for ``scope``, the one place the view declares the scope it
    needs (``access.SCOPES``, or ``access.ANY_SCOPE``) and the activity log's name for its calls
    (``action``, D20): ``@hooks.api_call(scope=access.SCANS_READ, action="scans.list")``.
    A bare ``@hooks.api_call`` declares neither, and the app refuses to start (``check_accounted``)."""
    if view is None:
        return lambda wrapped: _api_call(wrapped, scope, action)
    return _api_call(view, None, None)


def _takes_query(view: Callable) -> bool:
    """Whether the view declares query parameters (flask-smorest's ``arguments(..., location="query")``)."""
    parameters = getattr(view, "_apidoc", {}).get("arguments", {}).get("parameters", [])
    return any(parameter.get("in") == "query" for parameter in parameters)


def refuse_query(names=None) -> Response:
    """A call with query parameters to a path that takes none (or ``names``, ones it does not
    take): 400 naming them, as a query schema names its unknown ones (charged like any 400)."""
    raise query_error({name: [UNKNOWN_FIELD] for name in (request.args if names is None else sorted(names))})


def _api_call(view: Callable, scope: str | None, action: str | None) -> Callable:
    takes_query = _takes_query(view)
    reports = "report" in inspect.signature(view).parameters  # it fills the pipeline's report

    @wraps(view)
    def call(self, *args, **kwargs):
        return _calls().call(_view_runner(view, self, args, kwargs, reports, takes_query), scope)
    return _declared(call, scope, action)


def _declared(call: Callable, scope: str | None, action: str | None) -> Callable:
    """``call``, marked as accounted, with what its view declares (read by ``declared``)."""
    call.accounted = True  # type: ignore[attr-defined] # see app.api_calls.check_accounted
    call.scope = scope  # type: ignore[attr-defined]
    call.action = action  # type: ignore[attr-defined]
    return call


def _view_runner(view: Callable, self, args, kwargs, reports: bool, takes_query: bool) -> Callable:
    """The serve step of ``api_call``: the view, given the key (and its ``report`` if it takes one)."""
    def run(key, report) -> Response:
        if request.args and not takes_query:
            refuse_query()
        return view(self, key, *args, report=report, **kwargs) if reports else view(self, key, *args, **kwargs)
    return run


def served_read(serve: str, *, scope: str | None = None, wait=None, action: str | None = None) -> Callable:
    """Wrap a read whose service authenticates, charges and reads in one statement: ``serve``
    names it (``"scan"``, ``"bulk"``: the pipeline's ``serve_scan_read``, ``serve_bulk_read``,
    whose key rules are the pipeline's ``KEY_RULES``, as on every path), ``scope`` and ``action``
    declared as for ``api_call``; the view gets the served read and renders its body. ``wait``: what the read
    waits for when it takes ``?wait=N`` (D27, a ``reads.Awaited``)."""
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def call(self, **route):
            (object_id,) = route.values()
            return _calls().served_read(serve, lambda read: view(self, read), object_id, scope, wait)
        return _declared(call, scope, action)
    return decorate


def declared(app, rule, method: str, what: str) -> str | None:
    """What (``"scope"``, ``"action"``) the view of ``rule`` and ``method`` declares (None: nothing,
    or not wrapped)."""
    view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
    return getattr(getattr(view_class, method.lower(), None), what, None)


def api_views(app) -> Iterator[tuple[Any, str]]:
    """``(rule, method)`` of every view of the customer API (``/api/v1/``)."""
    for rule in app.url_map.iter_rules():
        view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
        if view_class is not None and rule.rule.startswith("/api/v1/"):
            for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
                yield rule, method


def declared_actions(app) -> list[str]:
    """The activity log's names of the API's calls, as their views declare them, sorted."""
    return sorted({action for rule, method in api_views(app) if (action := declared(app, rule, method, "action"))})


ROUTE_ARGUMENT = re.compile(r"<(?:[^:>]+:)?([^>]+)>")  # <scan_id:scan_id> -> {scan_id}


@lru_cache(maxsize=256)
def route_of(rule: str) -> str:
    """A route as the OpenAPI document writes it (``{scan_id}``), from werkzeug's (``<scan_id:scan_id>``)."""
    return ROUTE_ARGUMENT.sub(r"{\1}", rule)


# Views of the API's blueprints outside the accounted wrappers, each on purpose and with why. The
# app refuses to start with any other view under ``/engine/`` (as with any unwrapped ``/api/v1/``).
UNACCOUNTED = {
    "/engine/v1/callbacks": "the engine's callbacks (E7): signed with ENGINE_CALLBACK_SECRET, not a customer's "
                            "key; free, no activity entry (app/tracking/routes.py)",
}
