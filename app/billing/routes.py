"""``GET /api/v1/account`` (D21): the calling key's account and what the key may do.

Billing's, as its body is the account's balance, limits and usage. The view stays thin:
``usage.account_view`` charges the call (so the balance in the body is the one after it) and
builds the body; authentication and D21's check of the key (any scope) are
``app.api.hooks.api_call``'s.
"""
from __future__ import annotations

from flask import g
from flask.views import MethodView

from app.accounts import access
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, SECURITY, documented_errors
from app.billing import usage
from app.billing.schemas import AccountSchema

blp = ApiBlueprint("account", __name__, url_prefix="/api/v1",
                   description="Your account: balance, limits, usage, and what the calling key may do.")

EXAMPLE = {"ok": True, "customer_id": "cus_Q2x0mV8rLk1cYt6nWb3a9g", "tier": "business", "balance": 4199,
           "limits": {"inflight": 10, "hour": 100, "day": 1000}, "usage": {"inflight": 2, "hour": 17, "day": 230},
           "key": {"key_id": "key_7Hc2pQ9xVb4nLm1kRt8s0w", "livemode": True, "scopes": ["scans:write", "scans:read"],
                   "expires_at": "2027-05-21T12:00:00Z", "allowed_ips": ["203.0.113.0/24", "2001:db8::/32"]}}


@blp.route("/account")
class Account(MethodView):
    @hooks.api_call(scope=access.ANY_SCOPE, action="account.read")
    @blp.doc(security=SECURITY, summary="Read your account", operationId="getAccount")
    @blp.response(200, AccountSchema, headers=HEADERS, example=EXAMPLE,
                  description="The account and the calling key.")
    @documented_errors(401, 402, 503, blueprint=blp)
    @blp.priced("call")
    def get(self, key, *, report):
        """Your balance, your limits and where you stand against them, and what the key making the call
        may do: its scopes, expiry and IP allowlist. Costs {price}; the balance shown is the one after
        this call."""
        view = usage.account_view(key, request_id=g.request_id, endpoint=hooks.ledger_notes()[200],
                                  entry=hooks.call_entry(key, 200))
        hooks.charged(report, balance=view.balance, usage=view.usage, limits=view.limits, credits=view.credits,
                      recorded=view.recorded)
        return hooks.render(view.body)
