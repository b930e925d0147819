"""What every authenticated API call goes through, before and after its view.

Before: authenticate (401), claim or replay an ``Idempotency-Key`` (D9), and refuse a
balance below 1 credit (402) before any validation, as D3 orders.
After: charge the call's 1 credit when its answer is chargeable (D3: 2xx, 400, 403,
404) unless the view already charged it inside its own transaction (creations) or
it was a replay; then add ``X-Credits-Remaining`` and the RateLimit fields (D8), and
store or release the idempotency claim.
"""
from __future__ import annotations

import logging
import re

from flask import current_app, g, request

from app.api.auth import authenticate
from app.db import CONNECTION_ERRORS
from app.errors import from_service_error, handle_api_error, service_unavailable
from app.models import utcnow
from app.services import billing, idempotency, quotas
from app.services.errors import InsufficientBalance
from app.services.limits import DAY, HOUR, Limits, limits_for

log = logging.getLogger(__name__)
ROUTE_ARGUMENT = re.compile(r"<(?:[^:>]+:)?([^>]+)>")  # <scan_id:scan_id> -> {scan_id}


# Views that authenticate and charge their call themselves, in the statement that reads
# (``services.reads.serve_*``); they hand the outcome over with ``served_read``.
AUTHENTICATED_IN_VIEW: set[str] = set()


def before_api_request():
    if request.endpoint in AUTHENTICATED_IN_VIEW and request.method in ("GET", "HEAD"):
        return None  # OPTIONS and the rest still authenticate here
    key = authenticate()
    g.api_key, g.customer = key, key.customer
    if request.method == "POST" and "Idempotency-Key" in request.headers:
        replay = _claim_idempotency(request.headers["Idempotency-Key"])
        if replay is not None:
            return replay
    billing.check_can_pay(g.customer.balance, key.livemode)
    return None


def _claim_idempotency(key: str):
    claim = idempotency.claim_request(g.customer.id, key, request.path, request.get_data(cache=True),
                                      livemode=g.api_key.livemode)
    if claim[0] == "new":
        g.idempotency_record = claim[1]
        return None
    _, status, body = claim
    g.free_call = True
    response = current_app.response_class(body, status=status, mimetype="application/json")
    response.headers["Idempotent-Replayed"] = "true"
    return response


def after_api_request(response):
    customer = g.get("customer")
    if customer is None:
        return response  # 401: no account is known, nothing to charge or report
    try:
        response = _charge(response, customer)
    except CONNECTION_ERRORS:
        # The call cannot be charged, so it is not served: D3 charges every 2xx/400/403/404
        # and no 5xx. (The charge is one transaction: nothing of it was written.)
        log.error("database unavailable while charging this call")  # noqa: TRY400 - an outage, not a bug: no traceback
        response = service_unavailable()
    try:
        _report(response, customer)
        _settle_idempotency(response)
    except Exception:  # the answer is already decided; a reporting failure must not turn it into a 500
        log.exception("could not finish the accounting of this call")
    return response


def _ledger_endpoint(status: int) -> str:
    """What the ledger row of a charged call says it paid for: the method and path of a
    served call; for a refused one the route (``/api/v1/scan/{scan_id}``) and the status,
    so the customer's ledger never repeats an id that was not theirs."""
    if 200 <= status < 300 or request.url_rule is None:
        return f"{request.method} {request.path}"
    route = ROUTE_ARGUMENT.sub(r"{\1}", request.url_rule.rule)
    return f"{request.method} {route} ({status})"


def ledger_notes() -> dict[int, str]:
    """The ledger note of this call for each answer a read can be charged for (200, 403, 404)."""
    return {status: _ledger_endpoint(status) for status in (200, 403, 404)}


def _charge(response, customer):
    if not billing.call_is_charged(response.status_code, g.api_key.livemode) or g.get("charged") \
            or g.get("free_call"):
        return response
    balance, g.usage = billing.charge_call(customer.id, g.get("request_id"), utcnow(),
                                             _ledger_endpoint(response.status_code))
    if balance is None:
        # The balance ran out between the check and this charge: the call is not served.
        g.balance = billing.balance_of(customer.id)
        return handle_api_error(from_service_error(InsufficientBalance(g.balance)))
    g.balance, g.charged = balance, True
    return response


def _report(response, customer):
    balance = g.get("balance")
    if balance is None:
        balance = billing.balance_of(customer.id)
    response.headers["X-Credits-Remaining"] = str(balance)
    # A test key's answers report its own windows (D15: counted apart from live scans).
    usage = g.get("usage") or quotas.window_usage(customer.id, utcnow(), g.api_key.livemode)
    response.headers.update(rate_limit_headers(g.get("limits") or limits_for(customer), usage))


def rate_limit_headers(limits: Limits, usage: quotas.Usage) -> dict:
    """IETF httpapi RateLimit draft-10 fields for the hour and day windows."""
    hour_reset, day_reset = quotas.resets(usage)
    return {
        "RateLimit-Policy": f'"hour";q={limits.hour};w={HOUR}, "day";q={limits.day};w={DAY}',
        "RateLimit": (f'"hour";r={max(0, limits.hour - usage.hour)};t={hour_reset}, '
                      f'"day";r={max(0, limits.day - usage.day)};t={day_reset}'),
    }


def _settle_idempotency(response):
    record_id = g.pop("idempotency_record", None)
    if record_id is None:
        return
    idempotency.settle(record_id, response.status_code, lambda: response.get_data(as_text=True))


def teardown_api_request(exc):
    """A claim must not outlive a request that died before after_request ran."""
    record_id = g.pop("idempotency_record", None)
    if record_id is not None:
        try:
            idempotency.release(record_id)
        except Exception:
            log.exception("could not release idempotency claim %s", record_id)


def served(outcome):
    """Note that a view charged inside its own transaction; hand over its balance and headers."""
    g.charged = True
    g.balance = outcome.balance
    g.limits, g.usage = outcome.limits, outcome.usage
    return outcome.body


def served_read(read):
    """Note what a view that authenticated and charged its own call found (``reads.ServedRead``),
    as the hooks would have; raise its refusal (402, 403, 404), else return its body."""
    g.api_key, g.customer = read.key, read.key.customer
    if read.balance is not None:
        g.charged, g.balance, g.usage = True, read.balance, read.usage
    if read.error is not None:
        raise read.error
    return read.body


def install(blueprint) -> None:
    """Put an API blueprint's routes behind authentication and per-call accounting."""
    blueprint.before_request(before_api_request)
    blueprint.after_request(after_api_request)
    blueprint.teardown_request(teardown_api_request)
