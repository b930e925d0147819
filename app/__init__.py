"""The Public Scan API: ``create_app`` builds the Flask application.

Settings come from the environment (``app.plumbing.config``) with ``config`` overriding them;
the database, Redis, error handlers, the flask-smorest ``Api`` with its OpenAPI
document, the blueprints and the operator CLI are bound here and nowhere else.
"""
from __future__ import annotations

import re

from flask import Flask, abort, g, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import NotFound
from werkzeug.routing import RequestRedirect

# First of the app: every domain's event kinds and scopes declared before any module can read them.
from app import declared  # noqa: F401
from app.errors import allow_header, register_error_handlers
from app.extensions import csrf, db
from app.plumbing import config as app_config
from app.plumbing import runtime
from app.plumbing.db import database_url, init_db
from app.plumbing.logging_setup import setup_logging
from app.request_ids import request_id

SLASHES_RE = re.compile(r"/{2,}")


def is_api_path(path: str) -> bool:
    """``/api/...``, also when written with doubled slashes (``//api//v1/scan``)."""
    return SLASHES_RE.sub("/", path).startswith("/api/")


class PortalSessionInterface(SecureCookieSessionInterface):
    """The signed cookie session belongs to the portal. API calls authenticate with a
    bearer key, and the engine's callbacks with a signature: neither uses it, so they get
    Flask's null session: no cookie is verified on the way in or written on the way out (a
    tenth of a read's Python time, and of a forged callback's refusal)."""

    def open_session(self, app, request):
        if request.path.startswith(("/api/", "/engine/", "/scim/")):  # SCIM: the customer's bearer token, no cookie
            return self.make_null_session(app)
        return super().open_session(app, request)


def create_app(config: dict | None = None, *, operator: bool = False) -> Flask:
    """The application. ``operator``: for an operator command (``flask --app wsgi GROUP ...``),
    which serves no request: the API, the portal and /metrics are not built (their imports and
    the OpenAPI document were most of a command's seconds), the CLI alone is bound."""
    settings = app_config.load_settings()
    settings.update(config or {})
    settings = app_config.finalize(settings)
    settings["DATABASE_URL"] = database_url(settings)  # unset: the embedded server's
    settings["DATABASE_DIRECT_URL"] = settings.get("DATABASE_DIRECT_URL") or settings["DATABASE_URL"]

    app = Flask(__name__, instance_path=settings["INSTANCE_PATH"], instance_relative_config=False)
    if settings.get("TRUSTED_PROXIES"):
        # The client address and scheme as the trusted proxies saw them; with 0 (the default)
        # X-Forwarded-For is never read, so a client cannot pick its own address.
        from werkzeug.middleware.proxy_fix import ProxyFix
        proxies = int(settings["TRUSTED_PROXIES"])
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=proxies, x_proto=proxies)
    app.session_interface = PortalSessionInterface()
    app.config.update(settings)
    app.config.update(
        JSON_SORT_KEYS=False,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings["APP_ENV"] == "production",
        WTF_CSRF_TIME_LIMIT=None,
        PERMANENT_SESSION_LIFETIME=8 * 3600,
    )
    app.json.sort_keys = False
    setup_logging(settings["LOG_LEVEL"], settings["LOG_FORMAT"])

    init_db(settings["DATABASE_URL"])
    runtime.bind(app.config)

    from app.cli import register_cli
    register_cli(app)
    _hand_down_the_watches()
    if operator:
        return app

    _series_at_zero()
    _register_request_hooks(app)
    register_error_handlers(app)
    csrf.init_app(app)

    from app.blueprints import register_api, register_portal
    register_api(app)
    register_portal(app)

    from app import metrics_http
    metrics_http.init_app(app)  # /metrics, and a log line and counters per request

    from app.tracking import routes as callbacks
    callbacks.install_fast_path(app)  # the engine's callbacks taken, answered in front of Flask
    return app


def _hand_down_the_watches() -> None:
    """Give the domains below the watches what they ask of them: tracking compares a finished watch
    scan with the watch's previous one, privacy finds and ends a person's watches. The watches stand
    above both, as they create their scans through intake, which uses them. Every process builds the
    app (the API, the workers, an operator's command), so every one has them, loaded when first
    asked: an operator's command that never asks does not import the watches (nor the job queue)."""
    from app.privacy import handed_in as privacy
    from app.tracking import handed_in as tracking
    tracking.WATCH_SCANS_FINISHED.install_later(_watch_scans_finished)
    privacy.WATCHES.install_later(_target_watches)


def _series_at_zero() -> None:
    """The metrics' series of every event kind at 0 in a process that serves them (the API, the
    workers): the names are a domain's registry's, which the metrics below the domains do not reach."""
    from app.events import kinds
    from app.plumbing import metrics
    metrics.start_events_at_zero(kinds.delivery_events())


def _watch_scans_finished():
    from app.watches import watch_changes
    return watch_changes.record_changes


def _target_watches():
    from app.privacy.handed_in import TargetWatches
    from app.watches import statements as watch_store
    from app.watches import watch_changes
    return TargetWatches(open_with_optout_hash=watch_store.open_with_optout_hash,
                         end_watches_of_optout=watch_changes.end_watches_of_optout)


def _register_request_hooks(app: Flask) -> None:
    @app.before_request
    def assign_request_id():
        g.request_id = request_id(request.environ)

    @app.before_request
    def refuse_oversized_streams():
        # A chunked body has no Content-Length to refuse up front, and werkzeug's limit on the
        # stream hands over its first MAX_CONTENT_LENGTH bytes as if they were all: look past them.
        limit = app.config.get("MAX_CONTENT_LENGTH")
        if (limit and request.content_length is None and request.environ.get("wsgi.input_terminated")
                and len(request.get_data(cache=True)) >= limit and request.environ["wsgi.input"].read(1)):
            abort(413)

    @app.before_request
    def no_redirects_on_the_api():
        # werkzeug answers "//api/v1/scan/x" (merged slashes) and a missing trailing slash
        # with an HTML 308 whose Location is built from the client's Host header. The API
        # redirects nowhere: such a path is one it does not have (D2: 404 not_found).
        if isinstance(request.routing_exception, RequestRedirect) and is_api_path(request.path):
            raise NotFound()

    @app.before_request
    def answer_api_options():
        # Flask's automatic OPTIONS would run the API's authentication and be charged as a
        # 200: answer it here, before any key is looked at, free and with an empty body.
        if request.method != "OPTIONS" or not is_api_path(request.path) or request.url_rule is None:
            return None
        try:
            methods = app.url_map.bind_to_environ(request.environ).allowed_methods()
        except Exception:  # pragma: no cover - the path matched a rule a moment ago
            methods = request.url_rule.methods or ()
        response = app.response_class(status=204)
        del response.headers["Content-Type"]  # no body, so no type
        response.headers["Allow"] = allow_header(methods)
        return response

    @app.before_request
    def refuse_nul_in_path():
        # No id holds a NUL byte, and PostgreSQL refuses to even compare one: an unknown path.
        if "\x00" in request.path:
            abort(404)

    @app.after_request
    def add_request_id(response):
        response.headers["X-Request-Id"] = g.get("request_id", "")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if is_api_path(request.path) and not request.path.startswith("/api/docs/"):  # docs assets cache
            # Scan reads, creations and batches carry personal data: no cache may keep them.
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.teardown_request
    def close_db(exc):
        # Return the connection to the pool after
        # every request, as the Flask + peewee docs recommend.
        if not db.is_closed():
            db.close()
