"""Every API view goes through the accounting wrapper (app.api.hooks, whose calls app.api_calls runs) and
declares its scope and its activity log action there: one that does not would answer without
authentication or charge, or be logged without a name, so the app refuses to start with it."""
import pytest
from flask import Flask
from flask.views import MethodView

from app import api_calls
from app.accounts import access
from app.api import hooks


def _app_with(view_class) -> Flask:
    app = Flask(__name__)
    app.add_url_rule("/api/v1/thing", view_func=view_class.as_view("thing"))
    return app


def test_an_api_view_without_the_wrapper_stops_the_start():
    class Bare(MethodView):
        def get(self):
            return {"ok": True}

    with pytest.raises(RuntimeError, match="thing GET is not wrapped"):
        api_calls.check_accounted(_app_with(Bare))


def test_an_api_view_that_declares_no_scope_stops_the_start():
    """D21: every endpoint says which scope it needs, in its wrapper; a bare one does not start."""
    class Unscoped(MethodView):
        @hooks.api_call
        def get(self, key):
            return {"ok": True}

    with pytest.raises(RuntimeError, match="thing GET declares no scope"):
        api_calls.check_accounted(_app_with(Unscoped))

    class Unknown(MethodView):
        @hooks.api_call(scope="scans:everything")
        def get(self, key):
            return {"ok": True}

    with pytest.raises(RuntimeError, match="thing GET declares no scope"):
        api_calls.check_accounted(_app_with(Unknown))


def test_wrapped_views_and_pages_outside_the_api_pass():
    class Wrapped(MethodView):
        @hooks.api_call(scope=access.SCANS_READ, action="thing.read")
        def get(self, key):
            return {"ok": True}

        @hooks.api_call(scope=access.ANY_SCOPE, action="thing.create")
        def post(self, key):
            return {"ok": True}

    app = _app_with(Wrapped)
    api_calls.check_accounted(app)
    assert hooks.declared_actions(app) == ["thing.create", "thing.read"]
    app = Flask(__name__)

    class Page(MethodView):
        def get(self):
            return "page"

    app.add_url_rule("/app/page", view_func=Page.as_view("page"))
    api_calls.check_accounted(app)


def test_an_api_route_without_an_activity_log_action_stops_the_start():
    class Wrapped(MethodView):
        @hooks.api_call(scope=access.SCANS_READ, action="thing.read")
        def get(self, key):
            return {"ok": True}

        @hooks.api_call(scope=access.SCANS_ERASE)
        def delete(self, key):
            return {"ok": True}

    with pytest.raises(RuntimeError, match=r"thing DELETE \(DELETE /api/v1/thing\) declares no activity log action"):
        api_calls.check_accounted(_app_with(Wrapped))

    class Read(MethodView):
        @hooks.served_read("scan", scope=access.SCANS_READ)
        def get(self, read):
            return {"ok": True}

    with pytest.raises(RuntimeError, match=r"thing GET \(GET /api/v1/thing\) declares no activity log action"):
        api_calls.check_accounted(_app_with(Read))


def test_every_served_api_route_has_an_action_of_its_own(app):
    named = {f"{method} {hooks.route_of(rule.rule)}": hooks.declared(app, rule, method, "action")
             for rule, method in hooks.api_views(app)}
    assert named["POST /api/v1/scan"] == "scan.create" and named["GET /api/v1/activity"] == "activity.list"
    assert named["GET /api/v1/scan/{scan_id}"] == "scan.read"  # a served read declares it too
    assert len(named) >= 30 and all(named.values())
    assert len(set(named.values())) == len(named)  # an entry's action tells which call it was
    assert hooks.declared_actions(app) == sorted(named.values())


def test_the_served_app_has_every_api_method_wrapped(app):
    routes = [rule for rule in app.url_map.iter_rules() if rule.rule.startswith("/api/v1/")
              and getattr(app.view_functions[rule.endpoint], "view_class", None)]
    assert len(routes) >= 7  # scans, reads, bulk, list, deliveries: the walk really saw them
    api_calls.check_accounted(app)


def test_a_refused_body_is_charged_after_authentication_and_a_missing_key_first(client, account):
    bad = client.post("/api/v1/scan", json={"kind": "email"})
    assert bad.status_code == 401  # no key: 401 before the body is looked at (D3)
    refused = client.post("/api/v1/scan", json={"kind": "email"}, headers=account.headers)
    assert refused.status_code == 400
    assert refused.headers["X-Credits-Remaining"] == "99"  # charged, and said so
