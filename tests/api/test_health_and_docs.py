"""Operator endpoints and the OpenAPI document: no key, no charge (D2)."""
import pytest

from app import create_app
from app.accounts import admin
from tests.portal.helpers import PASSWORD, login


def test_healthz_and_readyz_answer_without_a_key(client):
    assert client.get("/healthz").get_json() == {"ok": True, "status": "alive"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json()["checks"] == {"database": "ok", "redis": "ok"}


@pytest.mark.parametrize("broken,part", [
    ({"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}, "database"),
    ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "redis"),
])
def test_readyz_is_503_naming_the_failed_part(base_config, broken, part, app):
    broken_app = create_app(dict(base_config, **broken))
    response = broken_app.test_client().get("/readyz")
    assert response.status_code == 503
    body = response.get_json()
    assert body["ok"] is False and body["error"] == "service_unavailable"
    assert part in body["message"] and body["checks"][part].startswith("failed")
    assert response.headers["Retry-After"]
    create_app(base_config)  # rebind the good database for the fixtures' teardown


def test_database_down_gives_503_json_on_api_routes(base_config, app):
    broken_app = create_app(dict(base_config, DATABASE_URL="postgresql://postgres@127.0.0.1:1/none"))
    response = broken_app.test_client().get("/api/v1/scan/scn_x",
                                            headers={"Authorization": "Bearer service_live_x"})
    assert response.status_code == 503
    assert response.get_json()["error"] == "service_unavailable"
    assert response.headers["Retry-After"]
    create_app(base_config)


def test_openapi_document_declares_every_endpoint_code_and_the_bearer_scheme(client):
    spec = client.get("/api/v1/openapi.json").get_json()
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    paths = spec["paths"]
    expected = {
        ("/api/v1/scan", "post"): {"202", "400", "401", "402", "409", "429", "502"},
        ("/api/v1/scan/{scan_id}", "get"): {"200", "401", "402", "403", "404"},
        ("/api/v1/scan/bulk", "post"): {"202", "400", "401", "402", "403", "409", "429", "502"},
        ("/api/v1/scan/bulk/{bulk_id}", "get"): {"200", "401", "402", "403", "404"},
    }
    for (path, method), codes in expected.items():
        operation = paths[path][method]
        assert codes <= set(operation["responses"]), (path, method)
        assert operation["security"] == [{"bearerAuth": []}]
    error = spec["components"]["schemas"]["Error"]
    assert {"ok", "error", "message", "request_id"} <= set(error["required"])
    result = spec["components"]["schemas"]["Result"]
    assert set(result["properties"]) == {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile",
                                         "ai_summary", "artifacts", "sources", "coverage", "partial", "findings", "match",
                                         "filtered"}
    created = paths["/api/v1/scan"]["post"]["responses"]["202"]
    assert {"X-Credits-Remaining", "RateLimit", "RateLimit-Policy"} <= set(created["headers"])


def test_docs_page_works_offline(client):
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "/api/docs/assets/swagger-ui-bundle.js" in html and "http" not in html.split("<body>")[0].split("href=")[1][:6]
    assert client.get("/api/docs/assets/swagger-ui-bundle.js").status_code == 200
    assert client.get("/api/docs/assets/swagger-ui.css").status_code == 200


def test_docs_page_has_the_portals_frame_and_csp_headers_and_no_inline_script(client):
    import re

    from app.portal.security import CSP as PORTAL_CSP
    page = client.get("/api/docs")
    assert page.status_code == 200
    csp = page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
    # The portal's policy, only scripts allowed from this site.
    assert csp.replace("script-src 'self'", "script-src 'none'") == PORTAL_CSP
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Referrer-Policy"] == "same-origin"
    assert page.headers["Cache-Control"] == "no-store"
    html = page.get_data(as_text=True)
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.DOTALL)
    assert scripts and all('src="' in attrs and not body.strip() for attrs, body in scripts)  # nothing inline
    assert "style=" not in html and "<style" not in html
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert {"/api/docs/assets/swagger-ui.css", "/api/docs/assets/swagger-ui-bundle.js",
            "/api/docs/assets/swagger-ui-standalone-preset.js", "/api/docs/init.js"} <= set(sources)
    for source in sources:
        asset = client.get(source)
        assert asset.status_code == 200, source
    init = client.get("/api/docs/init.js")
    assert init.mimetype in ("text/javascript", "application/javascript")
    assert "SwaggerUIBundle" in init.get_data(as_text=True)
    assert 'data-spec-url="/api/v1/openapi.json"' in html


def test_openapi_texts_cite_no_internal_rule_ids(client):
    """Customers read these texts: no "D4", "(D9)", "§6", "E3" or the engine contract document of the internal specification."""
    import json
    import re

    text = client.get("/api/v1/openapi.json").get_data(as_text=True)
    rule_id = re.compile(r"\bD\d{1,2}[a-z]?\b|§|engine\.md|\bE[1-5]\b")
    assert not rule_id.findall(text), sorted(set(rule_id.findall(text)))
    prose = re.compile(r"\b(spec|specification|decisions?)\b", re.IGNORECASE)
    texts = []

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("description", "summary", "title") and isinstance(value, str):
                    texts.append(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(json.loads(text))
    assert len(texts) > 30
    assert not [t for t in texts if prose.search(t)]
    kind = json.loads(text)["components"]["schemas"]["ScanCreate"]["properties"]["kind"]["description"]
    assert "leading `@`" in kind  # the inference rule is spelled out instead of cited


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(0.0, 90.0, 3600.0), WEBHOOK_TIMEOUT_SECONDS=7.0)
def test_the_webhook_settings_customers_read_are_rendered_from_the_configuration(client, make_customer):
    """The retry schedule and timeout are the configured ones, in the docs' Webhooks section and on
    the key's page: a fourth retry or a new timeout is a setting, not text restated by hand."""
    described = client.get("/api/v1/openapi.json").get_json()["info"]["description"]
    assert "## Webhooks" in described
    assert "retried 3 times: at once, after 90 seconds, after 1 hour" in described
    assert "within 7 seconds" in described
    account = make_customer()
    admin.create_user(account.id, "ops@acme.example", PASSWORD)
    login(client)
    page = client.get(f"/app/api-keys/{account.key.id}").get_data(as_text=True)
    assert "retried 3 times: at once, after 90 seconds, after 1 hour" in page
    assert "within 7 seconds" in page


def test_a_pool_with_no_connection_free_in_time_gives_503_json(base_config, app):
    """Every connection of the pool taken for its whole timeout (thousands of held calls on a
    starved CPU) is the database not answering in time: 503 with Retry-After, not a 500."""
    import threading

    from app.extensions import db
    from app.plumbing.db import make_database
    # A pool of its own with one connection: the suite's pool may hold idle connections, which
    # peewee hands out whatever its limit, and threads of earlier tests may give some back.
    saved = db.obj
    pool = make_database(saved._bound_url, max_connections=1, timeout=0.2)
    taken, done = threading.Event(), threading.Event()

    def hold_the_only_connection():
        with db.connection_context():
            taken.set()
            done.wait(10)
    holder = threading.Thread(target=hold_the_only_connection)
    db.initialize(pool)
    try:
        holder.start()
        assert taken.wait(5)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(app.test_client().get(  # no connection of its own
            "/api/v1/scan/scn_x", headers={"Authorization": "Bearer service_live_x"})))
        asking.start()
        asking.join()
        response, = answers
        assert response.status_code == 503 and response.get_json()["error"] == "service_unavailable"
        assert response.headers["Retry-After"]
    finally:
        done.set()
        holder.join()
        db.initialize(saved)
        pool.close_all()
