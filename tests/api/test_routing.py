"""Routing on the API's paths: 405 with Allow, free OPTIONS, no redirects, no caching (D1, D2)."""
import re

import pytest

from app.billing import charges
from app.extensions import db
from tests.api.test_auth_and_errors import assert_error

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def balance(account):
    with db.connection_context():
        return charges.balance_of(account.id)


def call(client, method, path, **kwargs):
    """``path`` as the raw PATH_INFO: the test client would read "//api/..." as a host name."""
    return client.open("/", method=method, environ_overrides={"PATH_INFO": path}, **kwargs)


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "PATCH", "DELETE"])
def test_any_method_but_post_on_the_bulk_path_is_405_allow_post_and_free(client, account, method):
    response = client.open(BULK, method=method, headers=account.headers)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    if method != "HEAD":
        assert_error(response, 405, "method_not_allowed")
    assert "X-Credits-Remaining" not in response.headers
    assert balance(account) == 100
    # Without a key too: the path is known, the method is not (before authentication).
    assert client.open(BULK, method=method).status_code == 405


def test_scan_ids_and_the_bulk_path_still_route_as_before(client, account):
    assert client.post(BULK, json={"targets": [{"target": "jane@example.com"}]},
                       headers=account.headers).status_code == 202
    assert_error(client.get(f"{SCAN}/bulkx", headers=account.headers), 404, "not_found")
    assert_error(client.get(f"{SCAN}/xbulk", headers=account.headers), 404, "not_found")
    assert_error(client.get(f"{BULK}/blk_x", headers=account.headers), 404, "not_found")
    response = client.put(f"{SCAN}/scn_x", headers=account.headers)
    assert_error(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == "DELETE, GET, HEAD"
    assert client.put(SCAN, headers=account.headers).headers["Allow"] == "POST"


@pytest.mark.parametrize("path,allow", [(SCAN, "POST"), (BULK, "POST"), (f"{SCAN}/scn_x", "DELETE, GET, HEAD"),
                                        (f"{BULK}/blk_x", "DELETE, GET, HEAD"), ("/api/v1/openapi.json", "GET, HEAD")])
def test_options_is_free_empty_and_names_the_methods(client, account, path, allow):
    for headers in (account.headers, {}, {"Authorization": "Bearer service_live_unknown"}):
        response = client.options(path, headers=headers)
        assert response.status_code == 204
        assert response.get_data() == b"" and "text/html" not in response.headers.get("Content-Type", "")
        assert response.headers["Allow"] == allow
        assert "X-Credits-Remaining" not in response.headers
    assert balance(account) == 100
    with db.connection_context():
        assert charges.ledger_sum(account.id) == 100


def test_options_on_an_unknown_api_path_is_404_json(client, account):
    assert_error(client.options("/api/v1/nope", headers=account.headers), 404, "not_found")


@pytest.mark.parametrize("method,path", [("GET", "/api/v1//scan/x"), ("GET", "/api//v1/scan/x"),
                                         ("GET", "/api/v1/scan//x"), ("GET", "/api/v1/scan/bulk//blk_x"),
                                         ("POST", "/api/v1//scan"), ("POST", "/api/v1/scan//bulk")])
def test_doubled_slashes_are_404_json_not_a_redirect_built_from_the_host_header(client, account, method, path):
    # (Leading slashes are dropped by werkzeug before routing: "//api/v1/scan/x" is that path.)
    response = call(client, method, path, headers={**account.headers, "Host": "evil.example"},
                    json={"target": "jane@example.com"} if method == "POST" else None)
    assert_error(response, 404, "not_found")
    assert "Location" not in response.headers
    assert balance(account) == 100


def api_paths(app):
    """One concrete path per /api rule, with a value in each of its variables."""
    paths = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/"):
            paths.add(re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: "swagger-ui.css" if m.group(1) == "filename"
                             else "x_1", rule.rule))
    return sorted(paths)


def variants(path):
    yield path
    yield path + "/"
    yield path + "//"
    yield "/" + path
    for i in [m.start() for m in re.finditer("/", path)][1:]:
        yield path[:i] + "/" + path[i:]


def test_no_api_path_answers_a_redirect(app, client, account):
    paths = api_paths(app)
    assert {"/api/v1/scan", "/api/v1/scan/bulk", "/api/v1/scan/x_1", "/api/v1/openapi.json", "/api/docs"} <= set(paths)
    seen = 0
    for path in paths:
        for variant in variants(path):
            for method in METHODS:
                response = call(client, method, variant, headers=account.headers)
                seen += 1
                assert not 300 <= response.status_code < 400, (method, variant, response.status_code)
                assert "Location" not in response.headers, (method, variant)
    assert seen > 300


def test_api_answers_are_not_stored_by_caches(client, account):
    created = client.post(SCAN, json={"target": "jane@example.com"}, headers=account.headers)
    bulk = client.post(BULK, json={"targets": [{"target": "jane@example.com"}]}, headers=account.headers)
    for response in (created, bulk, client.get(f"{SCAN}/{created.json['scan_id']}", headers=account.headers),
                     client.get(f"{BULK}/{bulk.json['bulk_id']}", headers=account.headers),
                     client.get(f"{SCAN}/scn_x", headers=account.headers), client.get(f"{SCAN}/scn_x"),
                     client.get("/api/v1/nope"), client.get("/api/v1/openapi.json"), client.options(SCAN)):
        assert response.headers["Cache-Control"] == "no-store", response.request.path
