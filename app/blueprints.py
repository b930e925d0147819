"""Every blueprint, registered from here: the versioned JSON API (the flask-smorest ``Api`` and its
blueprints, from their one list, ``BLUEPRINTS``) and the portal (its pages, from their one list,
``PAGES``). The domains' routes and pages use the HTTP toolkits (``app.api``, ``app.portal``), which
know no domain: this module hands them, at start, what runs an API call (``app.api_calls``, the
pipeline's HTTP adapter), what billing charges in words, and what the portal asks of the accounts
and the activity log.

The OpenAPI document is served at ``/api/v1/openapi.json`` and an interactive page
at ``/api/docs``, whose Swagger UI assets come from the installed
``swagger_ui_bundle`` package so the page works without internet. The page has no
inline script (its start-up is ``static/docs-init.js``), so it is served with the
portal's frame and content-security headers, scripts allowed from this site only.
"""
from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from html import escape

from flask import Flask, request, send_from_directory, url_for
from flask_smorest import Api

import app.api_calls as api_calls
from app.accounts import access, portal_roles, portal_users, two_factor
from app.accounts.pages import login, team
from app.accounts.pages import two_factor as two_factor_pages
from app.activity import entries
from app.activity.pages import activity_log, single_sign_on
from app.api import hooks
from app.api.base import ApiBlueprint
from app.api.envelope import ErrorSchema
from app.billing import charges
from app.billing import pages as usage_pages
from app.events import kinds as events
from app.intake import pages as intake_pages
from app.plumbing.config import retry_schedule_words
from app.portal import audit, security
from app.portal.blueprint import bp as portal_bp
from app.privacy import pages as privacy_pages
from app.scans import pages as scan_pages
from app.scans.purposes import PURPOSES
from app.sources import pages as source_pages
from app.targets.schemas import TARGET_PATTERNS
from app.watches import pages as watch_pages
from app.watches import watch_changes
from app.watches.event_kinds import WATCH_KINDS
from app.webhooks import delivery_log
from app.webhooks.pages import endpoints as endpoint_pages
from app.webhooks.pages import keys as key_pages

STATIC = os.path.join(os.path.dirname(__file__), "api", "static")
DOCS_CSP = security.CSP.replace("script-src 'none'", "script-src 'self'")
if DOCS_CSP == security.CSP:  # the replace above found nothing: the docs page would run no script
    raise RuntimeError("the portal's CSP changed: review DOCS_CSP")

DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>{title}</title>
    <link href="{assets}swagger-ui.css" rel="stylesheet" type="text/css">
  </head>
  <body>
    <div id="swagger-ui-container" data-spec-url="{spec_url}"></div>
    <script src="{assets}swagger-ui-standalone-preset.js"></script>
    <script src="{assets}swagger-ui-bundle.js"></script>
    <script src="{init}"></script>
  </body>
</html>
"""

API_DESCRIPTION = """\
Queue an investigation of an e-mail address, phone number or username and get a
structured result by polling or by a signed webhook.

Every endpoint needs `Authorization: Bearer service_live_...`. Every authenticated
call answered 2xx, 400, 403 or 404 costs {call_price}, except {free_403}; 401, 402,
409, 429, 5xx and idempotent replays cost nothing. Every authenticated answer carries
`X-Credits-Remaining`, `RateLimit-Policy` and `RateLimit`. Every error has the body
`{"ok": false, "error", "message", "request_id"}`.

Each key carries scopes, and each operation says the one it needs:

{scopes}

A call without that scope answers 403 `insufficient_scope` (its message names the scope). A key
may also expire (then 401 `key_expired`) and be limited to IP addresses or CIDR blocks (a call
from elsewhere: 403 `ip_not_allowed`). These refusals cost nothing. `GET /api/v1/account` shows
the calling key's scopes, expiry and allowed addresses, with the balance, limits and usage.

Test keys (`service_test_...`) work on every endpoint without spending credits: their
scans run in a sandbox with deterministic results (targets starting with `fail`, `slow`
or `hang`, or phone numbers ending in 0000, 9999 or 8888, test the failure, slow and
timeout paths), every body says `"livemode": false`, and test and live data never see
each other.

## Webhooks

The service POSTs these events to the webhook URL of the API key that created the scan (set
on the key's page):

{events}

and these to the endpoints of the key that created the watch that list them (`POST
/api/v1/endpoints` with `events`; the bodies are under **Callbacks** of "Create a watch", and as
the {watch_schemas} schemas, thin: the same names ending in `Thin`):

{watch_events}

and, to any endpoint of your keys that lists them, `source.degraded` (a source the investigations
consult became `degraded`, `down` or `broken`) and `source.recovered` (it is `healthy` again), with
the body `{"event", "source_id", "name", "status", "previous_status", "at"}` (see `GET /api/v1/sources`).

Each is signed with the key's secret: the
Standard Webhooks headers `webhook-id`, `webhook-timestamp` and `webhook-signature`, and
`X-Service-Signature: sha256=<hex HMAC-SHA256 of the raw body>`. The bodies and headers are
under **Callbacks** of "Create a scan" and "Create scans in bulk", and as the {schemas}
schemas. A 2xx answer received whole within {timeout} seconds acknowledges;
otherwise the delivery is {retries} (each delay counted from the previous failure), with the
same delivery id and body. `GET /api/v1/deliveries` lists every delivery with its attempts.
A key set to send thin bodies (the key page, or your account manager) sends only the scan's
ids, status, times, purpose and case reference: the {thin_schemas} schemas. No target, result
or failure message leaves the service that way; your receiver reads them with
`GET /api/v1/scan/{scan_id}`.
"""


@dataclass(frozen=True)
class Mount:
    """One blueprint of the API package: the module whose ``blp`` it is, whether it is in the
    OpenAPI document (flask-smorest's; every view of it accounted by ``hooks``, checked at start)
    or beside it, and whether CSRF is off for it (no cookie authenticates it)."""

    module: str
    documented: bool = True
    csrf_exempt: bool = True

    def blueprint(self):
        return importlib.import_module(self.module).blp


# Every blueprint of the API package, registered in this order (the document's order of
# operations) by ``register_api``, and nowhere else. The documented ones authenticate with bearer
# keys, never cookies; the engine's callbacks (E7) are signed by the engine, outside the document
# and its accounting (``hooks.UNACCOUNTED``); SCIM (D32) authenticates with the customer's SCIM
# token, outside the document and its accounting too (``api_calls.check_accounted`` holds every view under
# ``/scim/`` to ``scim.scim_authenticated``); the health checks take no key and no form.
BLUEPRINTS = (
    Mount("app.intake.routes"),
    Mount("app.scans.routes"),
    Mount("app.privacy.routes"),
    Mount("app.webhooks.routes.deliveries"),
    Mount("app.webhooks.routes.endpoints"),
    Mount("app.activity.routes"),
    Mount("app.events.routes"),
    Mount("app.watches.routes"),
    Mount("app.billing.routes"),
    Mount("app.sources.routes.catalogue"),
    Mount("app.tracking.routes", documented=False),
    Mount("app.accounts.routes.scim", documented=False),
    Mount("app.api.health", documented=False, csrf_exempt=False),
    Mount("app.sources.routes.status", documented=False, csrf_exempt=False),
)


class ScanApi(Api):
    """flask-smorest's Api with our error body (``app.errors`` handles every error), and a document
    written the first time it is read, not at each start.

    Documenting the ~90 operations was two thirds of building an app (0.2 s), which every API
    process paid at start and the test suite once per test, while the document is read by a
    client now and then. ``later`` queues a step of the document (a blueprint's views, a shape
    given to its schemas); the first read of ``spec`` runs them in order, once: a thread reading
    meanwhile waits for the whole document. (The steps are handed the spec: none reads ``spec``.)"""

    ERROR_SCHEMA = ErrorSchema

    def __init__(self, *args, **kwargs):
        self._steps: list = []
        self._writing = threading.Lock()
        super().__init__(*args, **kwargs)

    @property
    def written(self) -> bool:
        return not self._steps

    @property
    def spec(self):
        if self._steps:
            with self._writing:
                # Cleared only once every step ran: a reader that came meanwhile found steps left,
                # waited for the lock, and finds none.
                for step in self._steps:
                    step(self._spec)
                self._steps = []
        return self._spec

    @spec.setter
    def spec(self, value):
        self._spec = value  # flask-smorest's _init_spec

    def later(self, step) -> None:
        """Run ``step(spec)`` when the document is first read, after the steps queued before it."""
        with self._writing:
            self._steps.append(step)

    def register_blueprint(self, blp, *, parameters=None, **options):
        """As flask-smorest's, its views documented later."""
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)

        def document(spec):
            blp.register_views_in_doc(self, self._app, spec, name=name, parameters=parameters)
            spec.tag({"name": name, "description": blp.description})
        self.later(document)

    def _register_error_handlers(self):
        # app.errors has registered one handler for all layers; flask-smorest's own
        # would answer HTTP errors in its {code, status} shape instead of D1's.
        pass

    def _openapi_swagger_ui(self):
        # flask-smorest's page starts Swagger UI with an inline script, which a CSP without
        # 'unsafe-inline' refuses: the same page, its start-up moved to a file.
        return DOCS_PAGE.format(title=escape(self.spec.title), assets=escape(self._swagger_ui_url),
                                spec_url=escape(url_for("api-docs.openapi_json")),
                                init=escape(url_for("swagger_init")))


def register_api(app: Flask) -> Api:
    import swagger_ui_bundle

    app.config.update(
        API_TITLE="Public Scan API",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/api",
        OPENAPI_JSON_PATH="v1/openapi.json",
        OPENAPI_SWAGGER_UI_PATH="docs",
        OPENAPI_SWAGGER_UI_URL="/api/docs/assets/",
    )
    from app.api.base import ScanIdConverter, WatchIdConverter
    hooks.install(api_calls)  # the views' wrappers run their calls through the pipeline
    ApiBlueprint.install_prices(charges.PRICE_WORDS)
    app.url_map.converters["scan_id"] = ScanIdConverter
    app.url_map.converters["watch_id"] = WatchIdConverter
    api = ScanApi(app, spec_kwargs={
        # The settings customers read about are rendered from the configuration, never restated.
        "info": {"description": API_DESCRIPTION
                 .replace("{events}", "\n".join(f"- `{kind.name}`: {kind.fires}." for kind in events.EVENTS))
                 .replace("{schemas}", " and ".join(f"`{kind.schema}`" for kind in events.EVENTS))
                 .replace("{thin_schemas}", " and ".join(f"`{kind.schema}Thin`" for kind in events.EVENTS))
                 .replace("{watch_events}", "\n".join(f"- `{kind.name}`: {kind.fires}." for kind in WATCH_KINDS))
                 .replace("{watch_schemas}", ", ".join(f"`{kind.schema}`" for kind in WATCH_KINDS))
                 .replace("{call_price}", charges.PRICE_WORDS["call"])
                 .replace("{free_403}", charges.PRICE_WORDS["free_403"])
                 .replace("{scopes}", "\n".join(f"- `{scope}`: {words}." for scope, words
                                                 in access.SCOPE_WORDS.items()))
                 .replace("{timeout}", f'{app.config["WEBHOOK_TIMEOUT_SECONDS"]:g}')
                 .replace("{retries}", retry_schedule_words(app.config["WEBHOOK_RETRY_SCHEDULE"]))},
        # Relative to the document itself unless the public address is known.
        "servers": [{"url": app.config.get("PUBLIC_BASE_URL") or "/", "description": "This service"}],
        "tags": [{"name": "scans", "description": "Create scans, read them, list them, and do both in bulk."},
                 {"name": "deliveries", "description": "Webhook deliveries: catch up on the events a receiver "
                                                       "missed, and send one again."},
                 {"name": "endpoints", "description": "Webhook endpoints: where a key's events are sent, which "
                                                      "ones, in what shape, signed with which secret."},
                 {"name": "activity", "description": "The activity log: who called the API or acted in the "
                                                     "portal, when, from where, and at what cost."},
                 {"name": "events", "description": "Events: what happened to your scans, to list or "
                                                   "follow instead of receiving webhooks."},
                 {"name": "watches", "description": "Watches: targets scanned again on a schedule, what "
                                                    "changed announced."},
                 {"name": "sources", "description": "The sources the investigations consult, and how well "
                                                    "each answers now."},
                 {"name": "account", "description": "Your balance, limits and usage, and what the calling key "
                                                    "may do."},
                 {"name": "webhooks", "description": "Events the service sends to your webhook URL when a scan "
                                                     "finishes, signed two ways."}]})
    api.register_converter(ScanIdConverter, lambda converter: {"type": "string"})
    api.register_converter(WatchIdConverter, lambda converter: {"type": "string"})
    api.later(_components)
    from app.extensions import csrf
    for mount in BLUEPRINTS:
        blueprint = mount.blueprint()
        if mount.documented:
            api.register_blueprint(blueprint)
        else:
            app.register_blueprint(blueprint)
        if mount.csrf_exempt:
            csrf.exempt(blueprint)
    api.later(_shape_schemas)
    api.later(lambda spec: _document_scopes(app, spec))
    api_calls.check_accounted(app)
    app.extensions[audit.API_ACTIONS] = hooks.declared_actions(app)  # the activity log's filter lists them

    assets = swagger_ui_bundle.swagger_ui_path

    @app.route("/api/docs/assets/<path:filename>")
    def swagger_assets(filename):
        return send_from_directory(assets, filename, max_age=86400)

    @app.route("/api/docs/init.js")
    def swagger_init():
        return send_from_directory(STATIC, "docs-init.js", max_age=300)

    @app.after_request
    def docs_security_headers(response):
        if request.path == "/api/docs" or request.path.startswith("/api/docs/"):
            response.headers["Content-Security-Policy"] = DOCS_CSP
            response.headers["X-Frame-Options"] = "DENY"
            response.headers["Referrer-Policy"] = "same-origin"
        return response

    app.extensions["scan_api"] = api
    return api


def _components(spec) -> None:
    """What the document names that no view's arguments or answers do: the bearer scheme, a bulk
    call's items and the webhooks' bodies."""
    spec.components.security_scheme("bearerAuth", {
        "type": "http", "scheme": "bearer", "bearerFormat": "service_live_<random> or service_test_<random>"})
    from app.scans.schemas import WEBHOOK_BODY_SCHEMAS, BulkTargetSchema
    spec.components.schema("BulkTarget", schema=BulkTargetSchema)
    from app.watches.schemas import WATCH_EVENT_SCHEMAS
    for name, schema in {**WEBHOOK_BODY_SCHEMAS, **WATCH_EVENT_SCHEMAS}.items():
        spec.components.schema(name, schema=schema)


def _document_scopes(app: Flask, spec) -> None:
    """Each operation's description ends with the scope its view declares (``hooks.api_call``'s
    ``scope=``), so the document says what its code checks, never a copy of it."""
    for rule, method in hooks.api_views(app):
        operation = spec._paths.get(hooks.route_of(rule.rule), {}).get(method.lower())
        scope = hooks.declared(app, rule, method, "scope")
        if not isinstance(operation, dict) or scope is None:
            continue
        needs = ("Any key may call it, whatever its scopes." if scope == access.ANY_SCOPE
                 else f"Needs the key scope `{scope}`.")
        operation["description"] = f"{operation.get('description', '').rstrip()}\n\n{needs}".lstrip()


KINDS = ("email", "phone", "username")
REF = "#/components/schemas/{}"


def _shape_schemas(spec) -> None:
    """What marshmallow cannot say, said once in the document, so that a client generated from it
    uses its own models:
    - a bulk call's ``targets`` are ``BulkTarget`` items (the field stays loose on input, so that an
      invalid target is a ``rejected`` entry, not a 400 for the whole call);
    - a nullable nested object is a nullable reference, not an ``anyOf`` with an anonymous object
      (generators made a ``ResultPhoneProfileType1Type0`` class of it);
    - the kind of a target is one ``Kind`` enum, referenced wherever it appears;
    - a target given with a kind has that kind's form (``_KIND_AGREES``).
    """
    schemas = spec.components.schemas
    for name in ("BulkCreate", "WatchBulkCreate"):
        schemas[name]["properties"]["targets"]["items"] = {"$ref": REF.format("BulkTarget")}
    for name in ("ScanCreate", "BulkTarget", "WatchCreate"):
        schemas[name]["not"] = _KIND_DISAGREES
    spec.components.schema("Kind", {"type": "string", "enum": list(KINDS),
                                    "description": "What a target is: an e-mail address, a phone number or a "
                                                   "username."})
    spec.components.schema("Purpose", {"type": "string", "enum": list(PURPOSES),
                                       "description": "Why a person is looked up."})
    for schema in schemas.values():
        for name, prop in schema.get("properties", {}).items():
            if name == "purpose" and prop.get("enum") == list(PURPOSES):
                # One Purpose enum, nullable beside its reference: null is accepted, as the service does.
                schema["properties"][name] = _ref_to("Purpose", prop)
            elif name == "kind" and prop.get("enum") == list(KINDS):
                schema["properties"][name] = _ref_to("Kind", prop)
            elif _nullable_ref(prop):
                schema["properties"][name] = _ref_to(prop["anyOf"][0]["$ref"].rsplit("/", 1)[-1],
                                                     {**prop, "nullable": True})
    for operations in spec._paths.values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter.get("name") == "kind" and parameter.get("schema", {}).get("enum") == list(KINDS):
                    parameter["schema"] = {"$ref": REF.format("Kind")}


# A body whose kind and target disagree (kind email with a phone number...): the service refuses it
# (invalid_target), so the document does. Said with "not", which generated clients leave alone.
_KIND_DISAGREES = {"anyOf": [
    {"required": ["kind", "target"],
     "properties": {"kind": {"enum": [kind]}, "target": {"not": {"pattern": f"^({pattern})$"}}}}
    for kind, pattern in TARGET_PATTERNS.items()]}


def _nullable_ref(prop: dict) -> bool:
    """apispec's shape of a nullable nested schema: ``anyOf: [{$ref}, {type: object, nullable: true}]``."""
    parts = prop.get("anyOf", [])
    return len(parts) == 2 and "$ref" in parts[0] and parts[1].get("nullable") is True


def _ref_to(component: str, prop: dict) -> dict:
    """``prop`` as a reference to ``component`` (through allOf, which keeps the property's own
    description, example and nullability beside the reference in OpenAPI 3.0)."""
    kept = {k: v for k, v in prop.items() if k in ("description", "example", "nullable", "readOnly")}
    return {"allOf": [{"$ref": REF.format(component)}], **kept}



# The portal's pages, each domain's (``app/<domain>/pages``): importing a page module registers its
# routes on the portal's blueprint, each with the one permission it needs (``security.requires``) or
# ``security.public``. This is the one list of them.
PAGES = (login, single_sign_on, team, two_factor_pages, activity_log, usage_pages, scan_pages, intake_pages,
         privacy_pages, source_pages, watch_pages, endpoint_pages, key_pages)


def portal_blueprint():
    """The portal's blueprint with every page on it, its toolkit handed what it asks of the
    accounts (the session's user, a role's permissions, two-factor login) and the activity log, and
    the scan's page what it shows from the domains above scans."""
    security.install(security.Accounts(
        session_user=portal_users.session_user, start_session=portal_users.start_session,
        end_session=portal_users.end_session, two_factor_required=two_factor.required, allows=portal_roles.allows,
        check_permission=portal_roles.check_permission, roles=portal_roles))
    audit.install(entries)
    scan_pages.NEIGHBOURS.install(scan_pages.Neighbours(deliveries=delivery_log.scan_deliveries,
                                                        watch_changes=watch_changes.since_previous))
    return portal_bp


def register_portal(app: Flask) -> None:
    app.register_blueprint(portal_blueprint())
    security.check_declared(app)  # every portal view says which role it needs
