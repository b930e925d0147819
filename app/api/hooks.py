"""What every authenticated API call goes through, around its view.

A view is wrapped by ``api_call`` (or ``served_read``, for the reads that authenticate in
the statement that reads): authenticate (401), check what the key may do for the scope the
view declares (D21: 401 ``key_expired``, 403 ``ip_not_allowed``, 403 ``insufficient_scope``,
free like a 401), claim or replay an ``Idempotency-Key`` (D9),
refuse a balance below 1 credit (402) before any validation, as D3 orders; run the view; charge
the call's 1 credit when its answer is chargeable (D3: 2xx, 400, 403, 404) unless the view's
service already charged it (creations, reads: their ``Charged`` goes with the response they
render); then add ``X-Credits-Remaining`` and the RateLimit fields (D8), and store or release
the idempotency claim; last, write the call's activity log entry (D20: one INSERT, its
action named by ``app.actions``), unless the call's charge wrote it (D25: the charge's
statement or transaction writes the entry ``call_entry`` made, so no charge commits without it;
then only its status is corrected, if the answer changed). Nothing passes between the steps through ``flask.g``:
what the view's service charged (``Charged``) and what the entry says about its object
(``activity.Subject``) travel as attributes of the response; the only things kept in ``g`` are
who is calling (``g.caller``) and, for a key D21 refused, why (``g.refused``), for the log line
and the metrics.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial, wraps

from flask import Response, current_app, g, request

from app import rawjson
from app.actions import action_for, check_named, route_of
from app.api.auth import authenticate, bearer_token, client_address
from app.db import CONNECTION_ERRORS
from app.errors import UNKNOWN_FIELD, from_service_error, handle_api_error, query_error, service_unavailable
from app.models import ApiKey, utcnow
from app.services import access, activity, billing, idempotency, quotas, reads, waits
from app.services.errors import Forbidden, InsufficientBalance, KeyRefused, NotFound, ServiceError
from app.services.limits import DAY, HOUR, Limits, limits_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Charged:
    """What a service that charged the call inside its own transaction reports: the balance
    after the charge, and the limits and window usage the answer's headers show (None: read
    them); ``credits``: what the call cost (the activity log's entry says it)."""

    balance: int
    usage: quotas.Usage | None = None
    limits: Limits | None = None
    credits: int = 0


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


def render(body: dict, status: int = 200, *, charged: Charged | None = None,
           subject: activity.Subject | None = None, recorded: activity.Recorded | None = None,
           replayable: bool = False) -> Response:
    """The JSON answer of a view, carrying what its service charged (None: ``_charge`` charges it),
    what the activity log's entry says about its object (a creation's), the entry its service
    wrote with its charge (``recorded``, D25: ``call_entry``) and ``replayable``: an answer other
    than a 202 that created something, which an ``Idempotency-Key`` replays as it does every 202
    (a watch's 201, a creation answered 200 after waiting; never a 201 holding a secret)."""
    response = json_body(body, status)
    response.replayable = replayable  # type: ignore[attr-defined] # read back by _answer
    response.charged = charged  # type: ignore[attr-defined] # read back by _charge
    response.subject = subject  # type: ignore[attr-defined] # read back by _record
    response.recorded = recorded  # type: ignore[attr-defined] # read back by _account
    return response


def refusal(exc: Exception, *, charged: Charged | None = None) -> Response:
    """The app's error answer to ``exc`` (its one error table), carrying what was charged and the
    entry a service wrote with a charge before the call failed (``activity.RECORDED``)."""
    response = current_app.make_response(current_app.handle_user_exception(exc))
    response.charged = charged  # type: ignore[attr-defined] # read back by _charge
    response.recorded = getattr(exc, activity.RECORDED, None)  # type: ignore[attr-defined] # read by _account
    return response


def call_entry(key: ApiKey, status: int) -> activity.CallEntry:
    """This call's activity entry, for the statement or transaction that charges the call to
    write with its charge (D25); ``status``: the answer the call gives when served."""
    return activity.call_entry(customer_id=key.customer_id, livemode=key.livemode, key_id=key.id, action=_action(),
                               resource_id=_route_object(), client_address=client_address(),
                               request_id=g.get("request_id"), status=status)


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


def refuse_query() -> Response:
    """A call with query parameters to a path that takes none: 400 naming them, as a query
    schema names its unknown ones (charged like any 400)."""
    raise query_error({name: [UNKNOWN_FIELD] for name in request.args})


def _api_call(view: Callable, scope: str | None) -> Callable:
    takes_query = _takes_query(view)

    @wraps(view)
    def call(self, *args, **kwargs):
        key = authenticate()
        _check_access(key, scope)
        run = refuse_query if request.args and not takes_query else lambda: view(self, key, *args, **kwargs)
        return _account(key, run, idempotent=request.method == "POST")
    call.accounted = True  # type: ignore[attr-defined] # see check_accounted
    call.scope = scope  # type: ignore[attr-defined]
    return call


def served_read(serve: Callable, *, scope: str | None = None, wait: reads.Awaited | None = None) -> Callable:
    """Wrap a read whose service authenticates, charges and reads in one statement
    (``services.reads.serve_*``: the key's rules are ``keyauth``'s and ``access``'s, as on every
    path, ``scope`` declared as for ``api_call``); the view gets the ``ServedRead`` and renders it.
    ``wait``: the read takes ``?wait=N`` (D27, ``_waiting_read``)."""
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def call(self, **route):
            (object_id,) = route.values()
            if wait is not None and list(request.args) == ["wait"]:
                return _waiting_read(lambda read: view(self, read), serve, wait, object_id, scope)
            if request.args:  # refused before the read, after the key's checks, as on other paths
                key = authenticate()
                _check_access(key, scope)
                return _account(key, refuse_query, idempotent=False)
            try:
                read = serve(bearer_token(), object_id, g.request_id, ledger_notes(),
                             caller=reads.Caller(scope or "", client_address()), entry=_read_entry())
            except KeyRefused as exc:
                _note_refusal(exc)
                raise
            return _account(read.key, lambda: view(self, read), idempotent=False, recorded=read.recorded)
        call.accounted = True  # type: ignore[attr-defined] # see check_accounted
        call.scope = scope  # type: ignore[attr-defined]
        return call
    return decorate


def _waiting_read(render_read: Callable, serve: Callable, awaited: reads.Awaited, object_id: str,
                  scope: str | None) -> Response:
    """A read that answers once its object is final or after ``wait`` seconds (D27), charged
    once, as the read: the key's checks first (free refusals), then one of the key's held
    connections (429 ``rate_limited`` beyond the limit, free), the served read, and while its
    object is not final the waiting, with uncharged reads of it again."""
    key = authenticate()
    _check_access(key, scope)
    try:
        seconds = waits.check_wait(_int_arg("wait"))
        held = waits.hold(key.id, seconds)
    except ServiceError as exc:  # a 400 is charged as any, a 429 is free (D3)
        return _account(key, partial(_raise, exc), idempotent=False)
    try:
        waiter = waits.subscribe(awaited.topic(object_id))  # before the read: no change falls between
        try:
            read = serve(bearer_token(), object_id, g.request_id, ledger_notes(),
                         caller=reads.Caller(scope or "", client_address()), entry=_read_entry())
            if read.body is not None and read.error is None:
                read.body = waits.wait_until(
                    waiter, seconds, lambda: awaited.read(read.key.customer_id, object_id, read.key.livemode),
                    awaited.done, read.body)
        finally:
            waits.unsubscribe(waiter)
    finally:
        waits.release(held)
    return _account(read.key, lambda: render_read(read), idempotent=False, recorded=read.recorded)


def _int_arg(name: str):
    """The query's ``name`` as a whole number, or the text given (the check names it)."""
    text = request.args.get(name, "")
    return int(text) if text.isascii() and text.isdigit() and len(text) < 6 else text


def _raise(exc: Exception):
    raise exc


def _read_entry() -> activity.ReadEntry:
    """This read's activity entry, for its statement to write (``_record``'s fields; the status
    the error table gives the object not found, none (200), another customer's, the balance short)."""
    return activity.read_entry(action=_action(), resource_id=_route_object(), client_address=client_address(),
                               request_id=g.get("request_id"), statuses=_read_statuses())


@cache
def _read_statuses() -> tuple[int, int, int, int]:
    """Constants of the error table, made once (per read they cost 2% of its CPU, profiled)."""
    return (_status_of(NotFound("")), 200, _status_of(Forbidden("")), _status_of(InsufficientBalance(0)))


def _check_access(key: ApiKey, scope: str | None) -> None:
    """D21's refusals of the key (expired, outside its allowlist, lacking ``scope``): raised
    before anything is claimed or charged, so they cost nothing (``access.check`` says in which
    order)."""
    try:
        access.check(key, scope=scope or "", client_address=client_address(), now=utcnow())
    except KeyRefused as exc:
        _note_refusal(exc)
        raise


def _note_refusal(exc: KeyRefused) -> None:
    """The request's log line names the refused key's customer and the refusal (no address),
    and the activity log has the refused call (D20, D21), free."""
    g.caller = exc.key
    g.refused = exc.code
    _record(exc.key, _status_of(exc), None)


def declared_scope(app, rule, method: str) -> str | None:
    """The scope the view of ``rule`` and ``method`` declares (None: none, or not wrapped)."""
    view_class = getattr(app.view_functions.get(rule.endpoint), "view_class", None)
    return getattr(getattr(view_class, method.lower(), None), "scope", None)


# Views of the API's blueprints outside the accounted wrappers, each on purpose and with why. The
# app refuses to start with any other view under ``/engine/`` (as with any unwrapped ``/api/v1/``).
UNACCOUNTED = {
    "/engine/v1/callbacks": "the engine's callbacks (E7): signed with ENGINE_CALLBACK_SECRET, not a customer's "
                            "key; free, no activity entry (app/api/callbacks.py)",
}


def check_accounted(app) -> None:
    """Refuse to start when a view of the API is not wrapped by ``api_call`` or ``served_read``,
    or declares no scope (D21): it would answer without authentication, access check or charge
    (fail closed, at start, not per request). ``UNACCOUNTED`` lists the views outside them."""
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/engine/") and rule.rule not in UNACCOUNTED:
            raise RuntimeError(f"{rule.endpoint} ({rule.rule}) is outside hooks.api_call: list it in "
                               f"hooks.UNACCOUNTED, saying why, if it must be")
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


def _account(key: ApiKey, run: Callable[[], Response], *, idempotent: bool,
             recorded: activity.Recorded | None = None) -> Response:
    """``recorded``: the entry a served read's statement already wrote, as does the charge of
    any call (``Charged``, ``_charge``: D25); ``_record`` then only corrects its status if the
    answer is not the one written."""
    g.caller = key
    try:
        response = _answer(key, run, idempotent=idempotent)
    except Exception as exc:  # answered by the app's error table (an Idempotency-Key refused): logged too
        _record(key, _status_of(exc), None, recorded or getattr(exc, activity.RECORDED, None))
        raise
    _record(key, response.status_code, response, recorded or getattr(response, "recorded", None))
    return response


def _answer(key: ApiKey, run: Callable[[], Response], *, idempotent: bool) -> Response:
    record = None
    if idempotent and "Idempotency-Key" in request.headers:
        claim = idempotency.claim_request(key.customer_id, request.headers["Idempotency-Key"], request.path,
                                          request.get_data(cache=True), livemode=key.livemode)
        if claim[0] != "new":
            return _finish(_replay(*claim[1:]), key, None)  # a replay is free
        record = claim[1]
    try:
        try:
            billing.check_can_pay(key.customer.balance, key.livemode)
            response = run()
        except Exception as exc:  # the app's error table answers it (the unexpected ones as a logged 500)
            free = not billing.refusal_is_charged(getattr(exc, "code", None))
            response = refusal(exc, charged=Charged(key.customer.balance) if free else None)
        response, charged = _charge(response, key)
        response.charged = charged  # type: ignore[attr-defined] # what the call cost, for _record
        response = _finish(response, key, charged)
        if record is not None:
            idempotency.settle(record, response.status_code, lambda: response.get_data(as_text=True),
                               created=getattr(response, "replayable", False))
            record = None
        return response
    finally:
        if record is not None:  # a claim must not outlive a call that died before it was settled
            _release(record)


def _replay(status: int, body: str) -> Response:
    response = current_app.response_class(body, status=status, mimetype="application/json")
    response.headers["Idempotent-Replayed"] = "true"
    return response


def _release(record_id) -> None:
    try:
        idempotency.release(record_id)
    except Exception:
        log.exception("could not release idempotency claim %s", record_id)


def _ledger_endpoint(status: int) -> str:
    """What the ledger row of a charged call says it paid for: the method and path of a
    served call; for a refused one the route (``/api/v1/scan/{scan_id}``) and the status,
    so the customer's ledger never repeats an id that was not theirs. A read's is its route
    whatever its answer: its minute's reads of that endpoint are summed in one row (D24)."""
    if request.url_rule is None:
        return f"{request.method} {request.path}"
    route = route_of(request.url_rule.rule)
    if billing.is_read(request.method):
        return f"{request.method} {route}"
    if 200 <= status < 300:
        return f"{request.method} {request.path}"
    return f"{request.method} {route} ({status})"


def ledger_notes() -> dict[int, str]:
    """The ledger note of this call for each answer a read can be charged for (200, 403, 404)."""
    return {status: _ledger_endpoint(status) for status in (200, 403, 404)}


def _charge(response: Response, key: ApiKey) -> tuple[Response, Charged | None]:
    """Charge the call unless its service did (``render``) or its answer is free (D3)."""
    charged = getattr(response, "charged", None)
    if charged is not None or not billing.call_is_charged(response.status_code, key.livemode):
        return response, charged
    entry = call_entry(key, response.status_code)
    try:
        balance, usage = billing.charge_call(key.customer_id, g.get("request_id"), utcnow(),
                                             _ledger_endpoint(response.status_code),
                                             entry=entry.row(credits=billing.CALL_PRICE,
                                                             subject=getattr(response, "subject", None)),
                                             read_of=key.livemode if billing.is_read(request.method) else None)
    except CONNECTION_ERRORS:
        # The call cannot be charged, so it is not served: D3 charges every 2xx/400/403/404
        # and no 5xx. (The charge is one transaction: nothing of it was written.)
        log.error("database unavailable while charging this call")  # noqa: TRY400 - an outage, not a bug: no traceback
        return service_unavailable(), None
    if balance is None:
        # The balance ran out between the check and this charge: the call is not served.
        balance = billing.balance_of(key.customer_id)
        return handle_api_error(from_service_error(InsufficientBalance(balance))), Charged(balance)
    response.recorded = entry.recorded()  # type: ignore[attr-defined] # written with the charge: _account
    return response, Charged(balance, usage, credits=billing.CALL_PRICE)


def _finish(response: Response, key: ApiKey, charged: Charged | None) -> Response:
    """``X-Credits-Remaining`` and the RateLimit fields; a failure to read them must not turn
    the decided answer into a 500."""
    try:
        balance = charged.balance if charged is not None else billing.balance_of(key.customer_id)
        response.headers["X-Credits-Remaining"] = str(balance)
        # A test key's answers report its own windows (D15: counted apart from live scans).
        usage = (charged.usage if charged is not None else None) \
            or quotas.window_usage(key.customer_id, utcnow(), key.livemode)
        limits = (charged.limits if charged is not None else None) or limits_for(key.customer)
        response.headers.update(rate_limit_headers(limits, usage))
    except Exception:
        log.exception("could not finish the accounting of this call")
    return response


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


def _record(key: ApiKey, status: int, response: Response | None,
            recorded: activity.Recorded | None = None) -> None:
    """The call's activity log entry: one INSERT, unless the read's statement wrote it
    (``recorded``: then an UPDATE only when the answer's status is not the one it wrote, a body
    that failed to render). The answer is decided: a failure here is one log line (no personal
    data, not even the driver's message), never a changed answer."""
    charged = getattr(response, "charged", None)
    try:
        if recorded is not None:
            if recorded.status != status:
                activity.restate(recorded, status)
            return
        activity.record(customer_id=key.customer_id, livemode=key.livemode, key_id=key.id, action=_action(),
                        status=status, credits=charged.credits if charged is not None else 0,
                        resource_id=_route_object(), client_address=client_address(),
                        request_id=g.get("request_id"), subject=getattr(response, "subject", None))
    except Exception as exc:
        log.error("could not write this call's activity log entry: %s", exc.__class__.__name__)  # noqa: TRY400


def _action() -> str:
    return action_for(request.method, request.url_rule.rule if request.url_rule else request.path)


def _route_object() -> str | None:
    """The object a route names (``/scan/{scan_id}``, ``/deliveries/{delivery_id}/...``), or None."""
    values = list((request.view_args or {}).values())
    return str(values[-1]) if values else None

