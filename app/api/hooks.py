"""The HTTP adapter of every authenticated API call: it reads the request's facts once
(``_request``), hands the call to ``app.pipeline`` (authenticate, D21's access check,
``Idempotency-Key``, can pay, serve, charge, record) and writes the answer the pipeline's
``Outcome`` says: the view's response (or the pipeline's own: 402, 503, a replay) with
``X-Credits-Remaining`` and the RateLimit fields (D8).

A view is wrapped by ``api_call`` (or ``served_read``, for the reads that authenticate in the
statement that reads). A view whose service charged the call in its own transaction (a
creation, the account's read) or names the entry's object declares a ``report`` parameter (a
``pipeline.Served``) and fills it: the pipeline then charges nothing more. Nothing decides a
charge through ``flask.g`` or an attribute of a response: the only things kept in ``g`` are who
is calling (``g.caller``) and, for a key D21 refused, why (``g.refused``), for the log line and
the metrics.
"""
from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from functools import cache, partial, wraps

from flask import Response, current_app, g, request

from app import pipeline
from app.accounts import access
from app.accounts.models import ApiKey
from app.accounts.routes.auth import bearer_token, client_address
from app.actions import action_for, check_named, route_of
from app.activity import entries
from app.billing import charges, quotas
from app.billing.limits import DAY, HOUR, Limits
from app.errors import SCIM_PATH, UNKNOWN_FIELD, ApiError, from_service_error, query_error, service_unavailable
from app.events import waits
from app.plumbing import rawjson
from app.plumbing.errors import Forbidden, InsufficientBalance, KeyRefused, NotFound, ServiceError
from app.scans import confidence, reads

log = logging.getLogger(__name__)


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


def charged(report: pipeline.Served, *, balance: int, usage: quotas.Usage | None, limits: Limits | None = None,
            credits: int, subject: entries.Subject | None = None, recorded: entries.Recorded | None = None,
            replayable: bool = False, stored: tuple[int, str] | None = None) -> None:
    """Say in the view's ``report`` what its service charged in its own transaction (the
    pipeline charges nothing more), what the entry says about its object, the entry written with
    the charge (D25) and ``replayable``: an answer other than a 202 that created something, which
    an ``Idempotency-Key`` replays as it does every 202 (never a 201 holding a secret); ``stored``:
    the answer (status, text) an ``Idempotency-Key`` replays in place of this one."""
    report.charge = pipeline.Charge(balance, usage, limits, credits=credits)
    report.subject, report.recorded, report.replayable = subject, recorded, replayable
    report.stored = stored


def call_entry(key: ApiKey, status: int) -> entries.CallEntry:
    """This call's activity entry, for the statement or transaction that charges the call to
    write with its charge (D25); ``status``: the answer the call gives when served."""
    return pipeline.call_entry(key, _request(), status)


def api_call(view: Callable | None = None, *, scope: str | None = None) -> Callable:
    """Wrap a view (``view(self, key, ...)``): the key is authenticated before anything else,
    then D21's check of the key for ``scope``, the one place the view declares the scope it
    needs (``access.SCOPES``, or ``access.ANY_SCOPE``): ``@hooks.api_call(scope=access.SCANS_READ)``.
    A bare ``@hooks.api_call`` declares none, and the app refuses to start (``check_accounted``)."""
    if view is None:
        return lambda wrapped: _api_call(wrapped, scope)
    return _api_call(view, None)


def _takes_query(view: Callable) -> bool:
    """Whether the view declares query parameters (flask-smorest's ``arguments(..., location="query")``)."""
    parameters = getattr(view, "_apidoc", {}).get("arguments", {}).get("parameters", [])
    return any(parameter.get("in") == "query" for parameter in parameters)


def refuse_query(names=None) -> Response:
    """A call with query parameters to a path that takes none (or ``names``, ones it does not
    take): 400 naming them, as a query schema names its unknown ones (charged like any 400)."""
    raise query_error({name: [UNKNOWN_FIELD] for name in (request.args if names is None else sorted(names))})


def _api_call(view: Callable, scope: str | None) -> Callable:
    takes_query = _takes_query(view)
    reports = "report" in inspect.signature(view).parameters  # it fills a pipeline.Served

    @wraps(view)
    def call(self, *args, **kwargs):
        facts = _request(scope)
        answer = _Answer(_view_runner(view, self, args, kwargs, reports, takes_query))
        key = _authorize(facts)
        return _respond(pipeline.account(key, facts, answer, idempotent=request.method == "POST"), answer)
    call.accounted = True  # type: ignore[attr-defined] # see check_accounted
    call.scope = scope  # type: ignore[attr-defined]
    return call


def _view_runner(view: Callable, self, args, kwargs, reports: bool, takes_query: bool) -> Callable:
    """The serve step of ``api_call``: the view, given the key (and its ``report`` if it takes one)."""
    def run(key: ApiKey, report: pipeline.Served) -> Response:
        if request.args and not takes_query:
            refuse_query()
        return view(self, key, *args, report=report, **kwargs) if reports else view(self, key, *args, **kwargs)
    return run


def served_read(serve: Callable, *, scope: str | None = None, wait: reads.Awaited | None = None) -> Callable:
    """Wrap a read whose service authenticates, charges and reads in one statement
    (``pipeline.serve_*``: the key's rules are ``pipeline.KEY_RULES``, as on every path,
    ``scope`` declared as for ``api_call``); the view gets the ``ServedRead`` and renders its body.
    ``wait``: the read takes ``?wait=N`` (D27, ``_waiting_read``)."""
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def call(self, **route):
            (object_id,) = route.values()
            facts = _request(scope)
            unknown = set(request.args) - READ_QUERY if wait is not None else set(request.args)
            if unknown:  # refused before the read, after the key's checks, as on other paths
                return _refused_read(facts, lambda key, report: refuse_query(unknown))
            try:
                minimum = _min_confidence_arg()
            except ApiError as exc:  # a 400, charged as any (D3)
                return _refused_read(facts, partial(_raise_for, exc))
            if "wait" in request.args:
                return _waiting_read(lambda read: view(self, read), serve, wait, object_id, facts, minimum)
            return _read(lambda read: view(self, read), serve, object_id, facts, minimum=minimum)
        call.accounted = True  # type: ignore[attr-defined] # see check_accounted
        call.scope = scope  # type: ignore[attr-defined]
        return call
    return decorate


# The query parameters of the served reads (D27's wait, D29's min_confidence).
READ_QUERY = frozenset({"wait", "min_confidence"})


def _refused_read(facts: pipeline.Request, refuse: Callable) -> Response:
    """A served read refused for its query (400, charged as any), after the key's checks."""
    answer = _Answer(refuse)
    key = _authorize(facts)
    return _respond(pipeline.account(key, facts, answer, idempotent=False), answer)


def _min_confidence_arg() -> float | None:
    """The read's ``min_confidence`` (D29), or None; 400 naming it when it is not 0 to 1."""
    if "min_confidence" not in request.args:
        return None
    try:
        return confidence.check_minimum(request.args.get("min_confidence", ""))
    except ValueError as exc:
        raise query_error({"min_confidence": [str(exc)]}) from None


def _read(render_read: Callable, serve: Callable, object_id: str, facts: pipeline.Request, *,
          minimum: float | None = None) -> Response:
    """The served read (its one statement), then its answer rendered and accounted (the
    statement charged it and wrote its entry: the pipeline corrects the status if it changed);
    ``minimum``: the read's ``min_confidence`` (D29)."""
    read = _serve_read(serve, object_id, facts, minimum)
    answer = _Answer(_read_runner(render_read, read))
    g.caller = read.key
    return _respond(pipeline.account(read.key, facts, answer, idempotent=False, recorded=read.recorded), answer)


def _read_runner(render_read: Callable, read: pipeline.ServedRead) -> Callable:
    def run(key: ApiKey, report: pipeline.Served) -> Response:
        report.charge = read.charge
        if read.error is not None:  # the refusal the statement found (402, 403, 404), charged as it says
            return _error_answer(read.error)
        return render_read(read)
    return run


def _serve_read(serve: Callable, object_id: str, facts: pipeline.Request,
                minimum: float | None = None) -> pipeline.ServedRead:
    try:
        return pipeline.read(serve, bearer_token(), object_id, facts, _status_of, entry=_read_entry(facts),
                             min_confidence=minimum)
    except KeyRefused as exc:
        _note_refusal(exc)
        raise


def _waiting_read(render_read: Callable, serve: Callable, awaited: reads.Awaited, object_id: str,
                  facts: pipeline.Request, minimum: float | None = None) -> Response:
    """A read that answers once its object is final or after ``wait`` seconds (D27), charged
    once, as the read: the key's checks first (free refusals), then one of the key's held
    connections (429 ``rate_limited`` beyond the limit, free), the waiting, with uncharged reads,
    and at its end the served read (key, charge, entry and object in one statement) whose body
    is the answer. Charged when it answers, not when it began: a wait cut short (its process
    stopped, the client gone) is not charged, and a key refused meanwhile (revoked, expired,
    narrowed: asked every ``waits.KEY_CHECK_SECONDS``) gets its refusal, free, as any call."""
    key = _authorize(facts)
    try:
        seconds = waits.parse_wait(request.args.get("wait", ""))
        held = waits.hold(key.id, seconds)
    except ServiceError as exc:  # a 400 is charged as any, a 429 is free (D3)
        refused = _Answer(partial(_raise_for, exc))
        return _respond(pipeline.account(key, facts, refused, idempotent=False), refused)
    try:
        waiter = waits.subscribe(awaited.topic(object_id))  # before the read: no change falls between
        try:
            first = _awaitable(key, awaited, object_id)
            if first is not None:
                waits.wait_until(waiter, seconds, lambda: awaited.read(key.customer_id, object_id, key.livemode),
                                 awaited.done, first, still_allowed(key, facts.scope))
        finally:
            waits.unsubscribe(waiter)
    finally:
        waits.release(held)
    return _read(render_read, serve, object_id, facts, minimum=minimum)


def _awaitable(key: ApiKey, awaited: reads.Awaited, object_id: str) -> dict | None:
    """The object's body, read uncharged, if a wait for it may begin; None when the served read
    must answer at once (no such object, another customer's, a balance below one read)."""
    try:
        charges.check_can_pay(key.customer.balance, key.livemode)
        return awaited.read(key.customer_id, object_id, key.livemode)
    except ServiceError:
        return None


def still_allowed(key: ApiKey, scope: str) -> Callable[[], bool]:
    """Whether ``key`` may still make a call needing ``scope`` from this call's address: what a
    call that stays open (a wait, a stream) asks while it runs (``pipeline.still_allowed``)."""
    return partial(pipeline.still_allowed, key.id, pipeline.Caller(scope, client_address()))


def _raise_for(exc: Exception, key: ApiKey, report: pipeline.Served):
    raise exc


def _read_entry(facts: pipeline.Request) -> entries.ReadEntry:
    """This read's activity entry, for its statement to write (the status the error table gives
    the object not found, none (200), another customer's, the balance short)."""
    return entries.read_entry(action=facts.action, resource_id=facts.resource_id,
                               client_address=facts.client_address, request_id=facts.request_id,
                               statuses=_read_statuses())


@cache
def _read_statuses() -> tuple[int, int, int, int]:
    """Constants of the error table, made once (per read they cost 2% of its CPU, profiled)."""
    return (_status_of(NotFound("")), 200, _status_of(Forbidden("")), _status_of(InsufficientBalance(0)))


def _authorize(facts: pipeline.Request) -> ApiKey:
    """The request's key, authenticated and allowed the call (D21's refusals raised free and
    recorded by the pipeline, before anything is claimed or charged)."""
    try:
        key = pipeline.authorize(bearer_token(), facts, _status_of)
    except KeyRefused as exc:
        _note_refusal(exc)
        raise
    g.caller = key
    return key


def _note_refusal(exc: KeyRefused) -> None:
    """The request's log line and metrics name the refused key's customer and the refusal (no
    address); the pipeline recorded the refused call (D20, D21), free."""
    g.caller = exc.key
    g.refused = exc.code


def declared_scope(app, rule, method: str) -> str | None:
    """The scope the view of ``rule`` and ``method`` declares (None: none, or not wrapped)."""
    view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
    return getattr(getattr(view_class, method.lower(), None), "scope", None)


# Views of the API's blueprints outside the accounted wrappers, each on purpose and with why. The
# app refuses to start with any other view under ``/engine/`` (as with any unwrapped ``/api/v1/``).
UNACCOUNTED = {
    "/engine/v1/callbacks": "the engine's callbacks (E7): signed with ENGINE_CALLBACK_SECRET, not a customer's "
                            "key; free, no activity entry (app/tracking/routes.py)",
}


def check_accounted(app) -> None:
    """Refuse to start when a view of the API is not wrapped by ``api_call`` or ``served_read``,
    or declares no scope (D21): it would answer without authentication, access check or charge
    (fail closed, at start, not per request). ``UNACCOUNTED`` lists the views outside them; a view
    under ``/scim/`` must be wrapped by SCIM's own authentication instead."""
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/engine/") and rule.rule not in UNACCOUNTED:
            raise RuntimeError(f"{rule.endpoint} ({rule.rule}) is outside hooks.api_call: list it in "
                               f"hooks.UNACCOUNTED, saying why, if it must be")
        if rule.rule.startswith(SCIM_PATH) and not getattr(app.view_functions.get(rule.endpoint),
                                                            "scim_authenticated", False):
            # SCIM (D32) is outside the customer API's accounting, but never outside its own token.
            raise RuntimeError(f"{rule.endpoint} ({rule.rule}) is not wrapped by "
                               "app.accounts.routes.scim.scim_authenticated")
        view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
        if view_class is None or not rule.rule.startswith("/api/v1/"):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            if not getattr(getattr(view_class, method.lower(), None), "accounted", False):
                raise RuntimeError(f"{rule.endpoint} {method} is not wrapped by hooks.api_call or served_read")
            scope = declared_scope(app, rule, method)
            if scope != access.ANY_SCOPE and scope not in access.SCOPES:
                raise RuntimeError(f"{rule.endpoint} {method} declares no scope: give its hooks.api_call or "
                                   f"served_read scope=access.<SCOPE> (one of {', '.join(access.SCOPES)}) "
                                   f"or access.ANY_SCOPE")
    check_named(app)  # and every call has its activity log action


class _Answer:
    """The HTTP side of one call for the pipeline (``pipeline.Answerer``): the view, run with the
    key, and the app's error table; it keeps the response the outcome will be answered with."""

    def __init__(self, run: Callable[[ApiKey, pipeline.Served], Response]):
        self.run = run
        self.response: Response | None = None

    def serve(self, key: ApiKey) -> pipeline.Served:
        report = pipeline.Served(0)
        return self._keep(self.run(key, report), report)

    def refuse(self, exc: Exception) -> pipeline.Served:
        return self._keep(_error_answer(exc), pipeline.Served(0, code=getattr(exc, "code", None)))

    def unavailable(self) -> pipeline.Served:
        return self._keep(service_unavailable(), pipeline.Served(0))

    def status_of(self, exc: Exception) -> int:
        return _status_of(exc)

    def _keep(self, response: Response, served: pipeline.Served) -> pipeline.Served:
        self.response = response
        served.status = response.status_code
        served.text = lambda: response.get_data(as_text=True)
        return served


def _error_answer(exc: Exception) -> Response:
    """The app's error answer to ``exc`` (its one error table; the unexpected ones a logged 500)."""
    return current_app.make_response(current_app.handle_user_exception(exc))


def _respond(outcome: pipeline.Outcome, answer: _Answer) -> Response:
    """The answer the outcome says, with ``X-Credits-Remaining`` and the RateLimit fields."""
    if outcome.replay is not None:
        response = current_app.response_class(outcome.replay[1], status=outcome.replay[0],
                                              mimetype="application/json")
        response.headers["Idempotent-Replayed"] = "true"
    else:
        response = answer.response
    if outcome.balance is not None:
        response.headers["X-Credits-Remaining"] = str(outcome.balance)
    if outcome.limits is not None and outcome.usage is not None:
        response.headers.update(rate_limit_headers(outcome.limits, outcome.usage))
    return response


def _request(scope: str | None = None) -> pipeline.Request:
    """The call's facts, read off the request once."""
    rule = request.url_rule.rule if request.url_rule else request.path
    values = list((request.view_args or {}).values())
    return pipeline.Request(
        method=request.method, path=request.path, scope=scope or "", client_address=client_address(),
        request_id=g.get("request_id"), action=action_for(request.method, rule),
        # The object a route names (``/scan/{scan_id}``, ``/deliveries/{delivery_id}/...``), or None.
        resource_id=str(values[-1]) if values else None,
        route=route_of(request.url_rule.rule) if request.url_rule is not None else None,
        idempotency_key=request.headers.get("Idempotency-Key"), body=lambda: request.get_data(cache=True))


def ledger_notes() -> dict[int, str]:
    """The ledger note of this call for each answer a read can be charged for (200, 403, 404)."""
    facts = _request()
    return {status: facts.note(status) for status in (200, 403, 404)}


def rate_limit_headers(limits: Limits, usage: quotas.Usage) -> dict:
    """IETF httpapi RateLimit draft-10 fields for the hour and day windows."""
    hour_reset, day_reset = quotas.resets(usage)
    return {
        "RateLimit-Policy": f'"hour";q={limits.hour};w={HOUR}, "day";q={limits.day};w={DAY}',
        "RateLimit": (f'"hour";r={max(0, limits.hour - usage.hour)};t={hour_reset}, '
                      f'"day";r={max(0, limits.day - usage.day)};t={day_reset}'),
    }


def _status_of(exc: Exception) -> int:
    """The status the app's error table gives an exception that left ``_answer``."""
    if isinstance(exc, ServiceError):
        return from_service_error(exc).status
    status = getattr(exc, "status", None) or getattr(exc, "code", None)  # ApiError, werkzeug's HTTPException
    return status if isinstance(status, int) else 500
