"""The webhook delivery endpoints (D17): the customer's deliveries, and redelivery.

Views stay thin: ``app.webhooks.outbox`` owns the query and the rules and raises the domain
errors (``DeliveryNotFound``, ``DeliveryPending``, ``WebhookUrlMissing``, ``InvalidRequest``)
that ``app.errors`` maps to their statuses; authentication, charging (1 credit, as every
call) and the limit headers are ``app.api.hooks.api_call``'s job.
"""
from __future__ import annotations

from flask.views import MethodView

from app.accounts import access
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import ERROR_DOCS, HEADERS, SECURITY, error_documenter
from app.webhooks import delivery_log
from app.webhooks.schemas import DeliveryListArgs, DeliveryListSchema, RedeliveredSchema

blp = ApiBlueprint("deliveries", __name__, url_prefix="/api/v1",
                   description="Webhook deliveries: catch up on the events a receiver missed, and send one again.")

# What every call of these endpoints may answer, in the scans blueprint's words.
ERRORS = {status: ERROR_DOCS[status] for status in (401, 402, 503)}
# One example per code a status carries on these endpoints, as the services word it.
ERROR_EXAMPLES = {
    "invalid_request": "starting_after: no delivery dlv_T3JhbmdlIGp1aWNlIGJveA of this account",
    "webhook_url_missing": "the key has no webhook URL",
    "unauthorized": "the Authorization header must be 'Bearer <API key>'",
    "invalid_token": "the API key is unknown or revoked",
    "key_expired": "this API key has expired",
    "ip_not_allowed": "this API key may not be used from 198.51.100.7, the address this service sees for your call",
    "insufficient_scope": "this API key lacks the scope webhooks, which this call needs",
    "insufficient_balance": "the account balance is below 1 credit",
    "not_found": "no delivery dlv_T3JhbmdlIGp1aWNlIGJveA",
    "delivery_pending": "the delivery is pending: its attempts are still under way",
    "delivery_erased": "the scan of this delivery was erased: there is nothing left to send",
    "service_unavailable": "the database cannot be reached; try again shortly",
}

LIST_EXAMPLE = {"ok": True, "has_more": False, "data": [{
    "delivery_id": "dlv_T3JhbmdlIGp1aWNlIGJveA", "endpoint_id": "ep_Q2hlcnJ5IHRvbWF0b2Vz", "event": "scan.completed",
    "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q",
    "livemode": True, "status": "pending", "created_at": "2026-11-21T12:03:05Z",
    "attempts": [{"attempt": 1, "at": "2026-11-21T12:03:05Z", "outcome": "failed", "http_status": 503,
                  "error": None, "duration_ms": 87},
                 {"attempt": 2, "at": "2026-11-21T12:03:06Z", "outcome": "failed", "http_status": None,
                  "error": "timeout", "duration_ms": 10002}],
    "next_attempt_at": "2026-11-21T12:03:36Z",
    "body": '{"event":"scan.completed","scan_id":"scn_3kT9wQ0vXl2mYp7aRz1b4Q","livemode":true,'
            '"target":"jane.doe@example.com",'
            '"kind":"email","status":"completed","completed_at":"2026-11-21T12:03:05Z","result":{}}'}]}
REDELIVERED_EXAMPLE = {"ok": True, **{k: v for k, v in LIST_EXAMPLE["data"][0].items()
                                      if k != "next_attempt_at"},
                       "status": "pending", "next_attempt_at": "2026-11-21T13:00:00Z"}


documented_errors = error_documenter(blp, ERROR_EXAMPLES)


@blp.route("/deliveries")
class DeliveryList(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="deliveries.list")
    @blp.doc(security=SECURITY, summary="List webhook deliveries", operationId="listDeliveries")
    @blp.arguments(DeliveryListArgs, location="query", as_kwargs=True)
    @blp.response(200, DeliveryListSchema, headers=HEADERS, example=LIST_EXAMPLE,
                  description="One page of deliveries, newest first.")
    @documented_errors({400: "`invalid_request` (a filter, `limit` or `starting_after` refused, `starting_after` "
                             "not one of your deliveries included; with `details` for the query's shape)",
                        **ERRORS})
    @blp.priced("call")
    def get(self, key, limit, **filters):
        """The webhook deliveries of every key of the account, newest first, each with its attempts and
        the exact body sent. A receiver that was down reads here what it missed. Costs {price}."""
        data, has_more = delivery_log.customer_deliveries(key.customer_id, limit=limit, livemode=key.livemode,
                                                      **filters)
        return {"ok": True, "data": data, "has_more": has_more}


@blp.route("/deliveries/<string:delivery_id>/redeliver")
class Redeliver(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="delivery.redeliver")
    @blp.doc(security=SECURITY, summary="Redeliver a webhook", operationId="redeliverDelivery")
    @blp.response(202, RedeliveredSchema, headers=HEADERS, example=REDELIVERED_EXAMPLE,
                  description="A new series of attempts is queued.")
    @documented_errors({400: "`webhook_url_missing` (the key that sent it has no webhook URL now)", **ERRORS,
                        404: "`not_found` (no delivery of this account has this id)",
                        409: "`delivery_pending` (its attempts are still under way), `delivery_erased` (its scan was "
                             "erased, and its body with it); free of charge"})
    @blp.priced("call")
    def post(self, key, delivery_id):
        """Send a failed or succeeded delivery again: same `delivery_id`, same body, signed anew with the key's
        secrets of now, to the key's webhook URL of now, with the full retry schedule. Costs {price}."""
        return {"ok": True, **delivery_log.redelivered(delivery_id, key.customer_id, livemode=key.livemode)}
