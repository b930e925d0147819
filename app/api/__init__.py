"""The versioned JSON API: the flask-smorest ``Api`` and its blueprints.

The OpenAPI document is served at ``/api/v1/openapi.json`` and an interactive page
at ``/api/docs``, whose Swagger UI assets come from the installed
``swagger_ui_bundle`` package so the page works without internet.
"""
from __future__ import annotations

from flask import Flask, send_from_directory
from flask_smorest import Api

from app.schemas.errors import ErrorSchema

API_DESCRIPTION = """\
Queue an investigation of an e-mail address, phone number or username and get a
structured result by polling or by a signed webhook.

Every endpoint needs `Authorization: Bearer service_live_...`. Every authenticated
call answered 2xx, 400, 403 or 404 costs 1 credit; 401, 402, 409, 429, 5xx and
idempotent replays cost nothing. Every authenticated answer carries
`X-Credits-Remaining`, `RateLimit-Policy` and `RateLimit`. Every error has the body
`{"ok": false, "error", "message", "request_id"}`.
"""


class ScanApi(Api):
    """flask-smorest's Api with our error body: ``app.errors`` handles every error."""

    ERROR_SCHEMA = ErrorSchema

    def _register_error_handlers(self):
        # app.errors has registered one handler for all layers; flask-smorest's own
        # would answer HTTP errors in its {code, status} shape instead of D1's.
        pass


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
    api = ScanApi(app, spec_kwargs={"info": {"description": API_DESCRIPTION}})
    api.register_converter(ScanIdConverter, lambda converter: {"type": "string"})
    api.spec.components.security_scheme("bearerAuth", {
        "type": "http", "scheme": "bearer", "bearerFormat": "service_live_<random>"})

    from app.api.scans import blp as scans_blp
    from app.schemas.scans import BulkTargetSchema
    api.spec.components.schema("BulkTarget", schema=BulkTargetSchema)
    api.register_blueprint(scans_blp)
    # The JSON API authenticates with bearer keys, never cookies: CSRF cannot apply.
    from app.extensions import csrf
    csrf.exempt(scans_blp)

    assets = swagger_ui_bundle.swagger_ui_path

    @app.route("/api/docs/assets/<path:filename>")
    def swagger_assets(filename):
        return send_from_directory(assets, filename, max_age=86400)

    app.extensions["scan_api"] = api
    return api
