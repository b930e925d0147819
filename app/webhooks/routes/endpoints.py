"""The webhook endpoints calls (D22): a key's endpoints, each with its own URL, secret, events,
payload, enabled flag and description; rolling a secret; sending again what an endpoint missed.

Views stay thin: ``app.webhooks.endpoints`` owns the rules and raises ``EndpointNotFound`` (404),
``InvalidRequest`` (400) and ``SecretChanged`` (409 ``conflict``); authentication, the ``webhooks``
scope, charging (1 credit, as every call) and the limit headers are ``app.api.hooks.api_call``'s job.
"""
from __future__ import annotations

from flask.views import MethodView

from app.accounts import access
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.openapi import ERROR_DOCS, HEADERS, SECURITY, error_documenter
from app.plumbing.models import iso
from app.webhooks import endpoints
from app.webhooks.endpoint_schemas import (
    EndpointCreatedSchema,
    EndpointCreateSchema,
    EndpointDeletedSchema,
    EndpointListSchema,
    EndpointOneSchema,
    EndpointUpdateSchema,
    RecoveredSchema,
    RecoverSchema,
    RolledSecretSchema,
    RollSecretSchema,
)

blp = ApiBlueprint("endpoints", __name__, url_prefix="/api/v1",
                   description="Webhook endpoints: where events are sent, which ones, and how.")

# What every call of these endpoints may answer, in the scans blueprint's words.
ERRORS = {status: ERROR_DOCS[status] for status in (401, 402, 503)}
NOT_FOUND = {404: "`not_found` (the calling key has no endpoint with this id)"}
INVALID = {400: "`invalid_request` (a field refused, with its reason: a URL that is not https or not public, an "
                "unknown event...)"}
LIMIT = {409: "`endpoint_limit` (the key has 10 endpoints already: delete one first)"}
ERROR_EXAMPLES = {
    "invalid_request": "the webhook URL must be an absolute https URL",
    "endpoint_limit": "a key has at most 10 endpoints",
    "unauthorized": "the Authorization header must be 'Bearer <API key>'",
    "invalid_token": "the API key is unknown or revoked",
    "key_expired": "this API key has expired",
    "ip_not_allowed": "this API key may not be used from 198.51.100.7, the address this service sees for your call",
    "insufficient_scope": "this API key lacks the scope webhooks, which this call needs",
    "insufficient_balance": "the account balance is below 1 credit",
    "not_found": "no endpoint ep_Q2hlcnJ5IHRvbWF0b2Vz",
    "conflict": "the signing secret was changed by another request meanwhile: nothing was changed; look at the "
                "secret in force and try again if needed",
    "service_unavailable": "the database cannot be reached; try again shortly",
}
CONFLICT = {409: "`conflict` (another roll or switch of this endpoint's secret, made at the same time, won: "
                 "nothing was changed; free of charge)"}
ENDPOINT_EXAMPLE = {"endpoint_id": "ep_Q2hlcnJ5IHRvbWF0b2Vz", "url": "https://hooks.example.com/scans",
                    "events": ["scan.completed", "scan.failed"], "payload": "full", "enabled": True,
                    "description": "Case system", "disabled_at": None, "secret_rotation_ends_at": None}
SECRET_EXAMPLE = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="  # noqa: S105 - a documentation example


documented_errors = error_documenter(blp, ERROR_EXAMPLES)


@blp.route("/endpoints")
class EndpointList(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="endpoints.list")
    @blp.doc(security=SECURITY, summary="List webhook endpoints", operationId="listEndpoints")
    @blp.response(200, EndpointListSchema, headers=HEADERS, example={"ok": True, "data": [ENDPOINT_EXAMPLE]},
                  description="The calling key's endpoints, the first first.")
    @documented_errors(ERRORS)
    @blp.priced("call")
    def get(self, key):
        """The endpoints of the calling key: where its events go. Costs {price}."""
        return {"ok": True, "data": endpoints.list_endpoints(key)}

    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.create")
    @blp.doc(security=SECURITY, summary="Create a webhook endpoint", operationId="createEndpoint")
    @blp.arguments(EndpointCreateSchema, example={"url": "https://hooks.example.com/scans",
                                                  "events": ["scan.completed", "scan.failed"], "payload": "full",
                                                  "description": "Case system"})
    @blp.response(201, EndpointCreatedSchema, headers=HEADERS,
                  example={"ok": True, **ENDPOINT_EXAMPLE, "secret": SECRET_EXAMPLE},
                  description="The endpoint, with its signing secret: shown in this answer only.")
    @documented_errors({**INVALID, **LIMIT, **ERRORS})
    @blp.priced("call")
    def post(self, key, body):
        """Add an endpoint to the calling key (at most 10 per key). Events go to every enabled endpoint that
        lists them, each as its own delivery, signed with the endpoint's own secret. Costs {price}."""
        created, secret = endpoints.create(key, **body)
        return {"ok": True, **created, "secret": secret}


@blp.route("/endpoints/<string:endpoint_id>")
class EndpointOne(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.read")
    @blp.doc(security=SECURITY, summary="Read a webhook endpoint", operationId="getEndpoint")
    @blp.response(200, EndpointOneSchema, headers=HEADERS, example={"ok": True, **ENDPOINT_EXAMPLE})
    @documented_errors({**ERRORS, **NOT_FOUND})
    @blp.priced("call")
    def get(self, key, endpoint_id):
        """One endpoint of the calling key (never its secret). Costs {price}."""
        return {"ok": True, **endpoints.read(key, endpoint_id)}

    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.update")
    @blp.doc(security=SECURITY, summary="Change a webhook endpoint", operationId="updateEndpoint")
    @blp.arguments(EndpointUpdateSchema, example={"events": ["scan.running", "scan.completed"], "enabled": True})
    @blp.response(200, EndpointOneSchema, headers=HEADERS, example={"ok": True, **ENDPOINT_EXAMPLE})
    @documented_errors({**INVALID, **ERRORS, **NOT_FOUND})
    @blp.priced("call")
    def patch(self, key, body, endpoint_id):
        """Change the fields given: `url`, `events`, `payload`, `enabled`, `description`. Enabling an endpoint
        that was disabled after failing for days resumes its deliveries. Costs {price}."""
        return {"ok": True, **endpoints.update(key, endpoint_id, **body)}

    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.delete")
    @blp.doc(security=SECURITY, summary="Delete a webhook endpoint", operationId="deleteEndpoint")
    @blp.response(200, EndpointDeletedSchema, headers=HEADERS,
                  example={"ok": True, "endpoint_id": "ep_Q2hlcnJ5IHRvbWF0b2Vz", "deleted": True})
    @documented_errors({**ERRORS, **NOT_FOUND})
    @blp.priced("call")
    def delete(self, key, endpoint_id):
        """No later event goes to it; its deliveries stay listed. Costs {price}."""
        endpoints.delete(key, endpoint_id)
        return {"ok": True, "endpoint_id": endpoint_id, "deleted": True}


@blp.route("/endpoints/<string:endpoint_id>/roll-secret")
class EndpointRollSecret(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.roll_secret")
    @blp.doc(security=SECURITY, summary="Roll an endpoint's signing secret", operationId="rollEndpointSecret")
    @blp.arguments(RollSecretSchema, example={"overlap_hours": 24})
    @blp.response(200, RolledSecretSchema, headers=HEADERS,
                  example={"ok": True, "endpoint_id": "ep_Q2hlcnJ5IHRvbWF0b2Vz",
                           "secret": "whsec_bmV4dCBzZWNyZXQgMDEyMzQ1Njc4OQ==", "switch_at": "2026-11-22T12:00:00Z"})
    @documented_errors({400: "`invalid_request` (a rotation is already under way, or the overlap refused)",
                        **ERRORS, **NOT_FOUND, **CONFLICT})
    @blp.priced("call")
    def post(self, key, body, endpoint_id):
        """Create the endpoint's next secret, shown in this answer only. Until `switch_at` both secrets sign
        (`webhook-signature` carries both), so receivers can install it without missing an event. Costs
        {price}."""
        rolled = endpoints.roll_secret(key, endpoint_id, overlap_hours=body["overlap_hours"])
        return {"ok": True, "endpoint_id": endpoint_id, "secret": rolled.secret, "switch_at": iso(rolled.switch_at)}


@blp.route("/endpoints/<string:endpoint_id>/switch-secret")
class EndpointSwitchSecret(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.switch_secret")
    @blp.doc(security=SECURITY, summary="End an endpoint's secret rotation now", operationId="switchEndpointSecret")
    @blp.response(200, EndpointOneSchema, headers=HEADERS, example={"ok": True, **ENDPOINT_EXAMPLE})
    @documented_errors({400: "`invalid_request` (no rotation is under way: roll the secret first)",
                        **ERRORS, **NOT_FOUND, **CONFLICT})
    @blp.priced("call")
    def post(self, key, endpoint_id):
        """Switch now, before `switch_at`: the rolled secret becomes the only one and the old one stops
        signing at once (`secret_rotation_ends_at` is null again). Install it at every receiver first.
        Costs {price}."""
        return {"ok": True, **endpoints.switch_secret(key, endpoint_id)}


@blp.route("/endpoints/<string:endpoint_id>/recover")
class EndpointRecover(MethodView):
    @hooks.api_call(scope=access.WEBHOOKS, action="endpoint.recover")
    @blp.doc(security=SECURITY, summary="Send again what an endpoint missed", operationId="recoverEndpoint")
    @blp.arguments(RecoverSchema, example={"since": "2026-11-20T00:00:00Z"})
    @blp.response(202, RecoveredSchema, headers=HEADERS, example={"ok": True, "queued": 12})
    @documented_errors({400: "`invalid_request` (`since` missing, or not before `until`)", **ERRORS, **NOT_FOUND})
    @blp.priced("call")
    def post(self, key, body, endpoint_id):
        """Every delivery to the endpoint created in the window that failed, or was skipped while the endpoint
        was disabled, is sent again, once, oldest first, to its URL of now. Costs {price}."""
        return {"ok": True, "queued": endpoints.recover(key, endpoint_id, since=body["since"],
                                                        until=body.get("until"))}
