"""The versioned JSON API: the flask-smorest ``Api`` and its blueprints.

The OpenAPI document is served at ``/api/v1/openapi.json`` and an interactive page
at ``/api/docs``, whose Swagger UI assets come from the installed
``swagger_ui_bundle`` package so the page works without internet. The page has no
inline script (its start-up is ``static/docs-init.js``), so it is served with the
portal's frame and content-security headers, scripts allowed from this site only.
"""
from __future__ import annotations

import os
from html import escape

from flask import Flask, request, send_from_directory, url_for
from flask_smorest import Api

from app.portal.security import CSP as PORTAL_CSP
from app.schemas.errors import ErrorSchema

STATIC = os.path.join(os.path.dirname(__file__), "static")
DOCS_CSP = PORTAL_CSP.replace("script-src 'none'", "script-src 'self'")
assert DOCS_CSP != PORTAL_CSP, "the portal's CSP changed: review DOCS_CSP"

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
call answered 2xx, 400, 403 or 404 costs 1 credit; 401, 402, 409, 429, 5xx and
idempotent replays cost nothing. Every authenticated answer carries
`X-Credits-Remaining`, `RateLimit-Policy` and `RateLimit`. Every error has the body
`{"ok": false, "error", "message", "request_id"}`.

Test keys (`service_test_...`) work on every endpoint without spending credits: their
scans run in a sandbox with deterministic results (targets starting with `fail`, `slow`
or `hang`, or phone numbers ending in 0000, 9999 or 8888, test the failure, slow and
timeout paths), every body says `"livemode": false`, and test and live data never see
each other.
"""


class ScanApi(Api):
    """flask-smorest's Api with our error body: ``app.errors`` handles every error."""

    ERROR_SCHEMA = ErrorSchema

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
    from app.api.base import ScanIdConverter
    app.url_map.converters["scan_id"] = ScanIdConverter
    api = ScanApi(app, spec_kwargs={
        "info": {"description": API_DESCRIPTION},
        # Relative to the document itself unless the public address is known.
        "servers": [{"url": app.config.get("PUBLIC_BASE_URL") or "/", "description": "This service"}],
        "tags": [{"name": "scans", "description": "Create scans, read them, list them, and do both in bulk."},
                 {"name": "deliveries", "description": "Webhook deliveries: catch up on the events a receiver "
                                                       "missed, and send one again."},
                 {"name": "webhooks", "description": "Events the service sends to your webhook URL when a scan "
                                                     "finishes, signed two ways."}]})
    api.register_converter(ScanIdConverter, lambda converter: {"type": "string"})
    api.spec.components.security_scheme("bearerAuth", {
        "type": "http", "scheme": "bearer", "bearerFormat": "service_live_<random> or service_test_<random>"})

    from app.api.scans import blp as scans_blp
    from app.schemas.scans import BulkTargetSchema, WebhookCompletedSchema, WebhookFailedSchema
    api.spec.components.schema("BulkTarget", schema=BulkTargetSchema)
    api.spec.components.schema("WebhookCompleted", schema=WebhookCompletedSchema)
    api.spec.components.schema("WebhookFailed", schema=WebhookFailedSchema)
    api.register_blueprint(scans_blp)
    from app.api.deliveries import blp as deliveries_blp
    api.register_blueprint(deliveries_blp)
    # The JSON API authenticates with bearer keys, never cookies: CSRF cannot apply.
    from app.extensions import csrf
    csrf.exempt(scans_blp)
    csrf.exempt(deliveries_blp)

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
