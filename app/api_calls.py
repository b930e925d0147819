"""The pipeline's HTTP adapter, installed into ``app.api.hooks`` at start: it runs every
authenticated API call a view's wrapper hands it. It reads the request's facts once
(``_request``), hands the call to ``app.pipeline`` (authenticate, D21's access check,
``Idempotency-Key``, can pay, serve, charge, record) and writes the answer the pipeline's
``Outcome`` says: the view's response (or the pipeline's own: 402, 503, a replay) with
``X-Credits-Remaining`` and the RateLimit fields (D8).

It stands above the pipeline and the domains, and no domain's routes import it: they declare
themselves with ``app.api.hooks``, which knows no domain. Nothing decides a charge through
``flask.g`` or an attribute of a response: the only things kept in ``g`` are who is calling
(``g.caller``) and, for a key D21 refused, why (``g.refused``), for the log line and the metrics.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial

from flask import Response, current_app, g, request

import app.pipeline as pipeline
from app.accounts import access
from app.accounts.models import ApiKey
from app.accounts.routes.auth import bearer_token, client_address
from app.activity import entries
from app.api.hooks import UNACCOUNTED, api_views, declared, refuse_query, route_of
from app.billing import charges, quotas
from app.billing.limits import DAY, HOUR, Limits
from app.errors import SCIM_PATH, ApiError, from_service_error, query_error, service_unavailable
from app.events import waits
from app.plumbing.errors import Forbidden, InsufficientBalance, KeyRefused, NotFound, ServiceError
from app.scans import confidence, reads


def charged(report: pipeline.Served, *, balance: int, usage: quotas.Usage | None, limits: Limits | None = None,
            credits: int, subject: entries.Subject | None = None, recorded: entries.Recorded | None = None,
            replayable: bool = False, stored: tuple[int, str] | None = None) -> None:
    """``hooks.charged``: the view's ``report`` says what its service charged."""
    report.charge = pipeline.Charge(balance, usage, limits, credits=credits)
    report.subject, report.recorded, report.replayable = subject, recorded, replayable
    report.stored = stored


def call_entry(key: ApiKey, status: int) -> entries.CallEntry:
    """``hooks.call_entry``: this call's activity entry."""
    return pipeline.call_entry(key, _request(), status)


def call(run: Callable[[ApiKey, pipeline.Served], Response], scope: str | None) -> Response:
    """A call wrapped by ``hooks.api_call``: ``run`` serves it, given the authenticated key."""
    facts = _request(scope)
    answer = _Answer(run)
    key = _authorize(facts)
    return _respond(pipeline.account(key, facts, answer, idempotent=request.method == "POST"), answer)


# The reads ``hooks.served_read`` names, each served by its one statement.
SERVED_READS: dict[str, Callable[..., pipeline.ServedRead]] = {
    "scan": pipeline.serve_scan_read, "bulk": pipeline.serve_bulk_read}


def served_read(read_name: str, render_read: Callable, object_id: str, scope: str | None,
                wait: reads.Awaited | None) -> Response:
    """A read wrapped by ``hooks.served_read``: the query checked after the key's checks, then
    the read at once or after its wait (D27)."""
    serve = SERVED_READS[read_name]
    facts = _request(scope)
    unknown = set(request.args) - READ_QUERY if wait is not None else set(request.args)
    if unknown:  # refused before the read, after the key's checks, as on other paths
        return _refused_read(facts, lambda key, report: refuse_query(unknown))
    try:
        minimum = _min_confidence_arg()
    except ApiError as exc:  # a 400, charged as any (D3)
        return _refused_read(facts, partial(_raise_for, exc))
    if "wait" in request.args:
        return _waiting_read(render_read, serve, wait, object_id, facts, minimum)
    return _read(render_read, serve, object_id, facts, minimum=minimum)


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


def check_accounted(app) -> None:
    """Refuse to start when a view of the API is not wrapped by ``api_call`` or ``served_read``,
    or declares no scope (D21) or no activity log action (D20): it would answer without
    authentication, access check or charge, or be logged without a name (fail closed, at start,
    not per request). ``UNACCOUNTED`` lists the views outside them; a view under ``/scim/`` must be
    wrapped by SCIM's own authentication instead."""
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/engine/") and rule.rule not in UNACCOUNTED:
            raise RuntimeError(f"{rule.endpoint} ({rule.rule}) is outside hooks.api_call: list it in "
                               f"hooks.UNACCOUNTED, saying why, if it must be")
        if rule.rule.startswith(SCIM_PATH) and not getattr(app.view_functions.get(rule.endpoint),
                                                            "scim_authenticated", False):
            # SCIM (D32) is outside the customer API's accounting, but never outside its own token.
            raise RuntimeError(f"{rule.endpoint} ({rule.rule}) is not wrapped by "
                               "app.accounts.routes.scim.scim_authenticated")
    for rule, method in api_views(app):
        if not declared(app, rule, method, "accounted"):
            raise RuntimeError(f"{rule.endpoint} {method} is not wrapped by hooks.api_call or served_read")
        scope = declared(app, rule, method, "scope")
        if scope != access.ANY_SCOPE and scope not in access.SCOPES:
            raise RuntimeError(f"{rule.endpoint} {method} declares no scope: give its hooks.api_call or "
                               f"served_read scope=access.<SCOPE> (one of {', '.join(access.SCOPES)}) "
                               f"or access.ANY_SCOPE")
        if not declared(app, rule, method, "action"):
            raise RuntimeError(f"{rule.endpoint} {method} ({method} {route_of(rule.rule)}) declares no activity "
                               f"log action: give its hooks.api_call or served_read action=\"<name>\"")


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
    action = declared(current_app, request.url_rule, request.method, "action") if request.url_rule else None
    return pipeline.Request(
        method=request.method, path=request.path, scope=scope or "", client_address=client_address(),
        request_id=g.get("request_id"), action=action or f"{request.method} {route_of(rule)}",
        # The object a route names (``/scan/{scan_id}``, ``/deliveries/{delivery_id}/...``), or None.
        resource_id=str(values[-1]) if values else None,
        route=route_of(request.url_rule.rule) if request.url_rule is not None else None,
        idempotency_key=request.headers.get("Idempotency-Key"), body=lambda: request.get_data(cache=True))


def ledger_notes() -> dict[int, str]:
    """``hooks.ledger_notes``: the ledger note of this call for each answer a read can be charged for."""
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
