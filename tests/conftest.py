"""Shared fixtures: real parts only.

- Redis: ``TEST_REDIS_URL`` (CI: the machine's Redis) or an embedded server for the
  session (``app.plumbing.embedded``), flushed before every test, as rq's own tests do.
- Database: ``TEST_DATABASE_URL`` (CI: the machine's PostgreSQL) or an embedded PostgreSQL
  for the session (``app.plumbing.embedded``, in a temporary folder, stopped with the session); the
  schema is built once per session with ``db upgrade`` and every table emptied per test.
- The engine: the bundled simulator served over real HTTP on a free port.
- ``served_app``: the API itself on a real threaded HTTP server, for concurrency tests.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
import requests
from werkzeug.serving import make_server

from app import create_app
from app.extensions import db
from app.plumbing import runtime
from app.schema_version import SchemaVersion
from app.tables import ALL_MODELS
from tests import factories

# One line per request from the in-test servers buries the output that matters.
logging.getLogger("werkzeug").setLevel(logging.WARNING)


class ServerThread:
    """A WSGI app on a real socket in a daemon thread (threaded, like gunicorn's threads)."""

    def __init__(self, wsgi_app, port: int = 0):
        self.server = make_server("127.0.0.1", port, wsgi_app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _tallies_written():
    """What the service logs in aggregate (``app.plumbing.log_tally``: engine callbacks refused and taken) is
    written out when each test ends, while pytest's streams are open: at the worker's exit it was a
    logging error each."""
    yield
    from app.tracking import callbacks
    for tally in (callbacks.REFUSALS, callbacks.TAKEN_LINES):
        tally.flush()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    url = os.environ.get("TEST_REDIS_URL")
    if url:
        yield url
        return
    from app.plumbing import embedded
    folder = tmp_path_factory.mktemp("redis")
    server = embedded.redis_client(folder)
    yield f"unix://{server.socket_file}"
    embedded.stop(folder)


@pytest.fixture(scope="session")
def database_url(tmp_path_factory):
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    from app.plumbing import embedded
    folder = embedded_folder("postgres")
    yield embedded.postgres_url(folder, durable=False)  # the session's throwaway data
    embedded.stop(folder)
    shutil.rmtree(folder, ignore_errors=True)


def embedded_folder(what: str) -> Path:
    """A folder for an embedded server's data, outside pytest's temporary folders: a pytest
    starting meanwhile (another session, a pytester) makes ``/tmp/pytest-of-<user>`` private
    again, and PostgreSQL, which runs as a user of its own when we are root, would lose its
    data folder mid-session."""
    return Path(tempfile.mkdtemp(prefix=f"scan-api-test-{what}-"))


@pytest.fixture(scope="session")
def simulator():
    from simulator.app import create_sim_app
    sim_app = create_sim_app({"SIM_TIME_SCALE": 0.01, "ENGINE_TOKEN": "test-engine-token"})
    server = ServerThread(sim_app)
    yield server
    server.stop()


@pytest.fixture
def sim_receiver(simulator):
    """A fresh simulator receiver: ``sim_receiver(secret, responses)`` -> ``(hook URL, a function
    listing what it received)``; answers ``responses`` in order, the last one repeated."""
    def make(secret, responses=(200,)):
        name = f"rcv-{uuid.uuid4().hex[:12]}"
        requests.post(f"{simulator.url}/_sim/receivers/{name}",
                      json={"secret": secret, "responses": list(responses)}, timeout=5).raise_for_status()
        return (f"{simulator.url}/_sim/hooks/{name}",
                lambda: requests.get(f"{simulator.url}/_sim/receivers/{name}/deliveries", timeout=5)
                .json()["deliveries"])
    return make


@pytest.fixture(scope="session")
def base_config(database_url, redis_url, simulator, tmp_path_factory):
    return {
        "APP_ENV": "test",
        "DATABASE_URL": database_url,
        # Behind a pooler in transaction mode (tests.ops.pgbouncer): LISTEN needs the server itself.
        "DATABASE_DIRECT_URL": os.environ.get("TEST_DATABASE_DIRECT_URL") or database_url,
        "REDIS_URL": redis_url,
        "ENGINE_URL": simulator.url,
        "ENGINE_TOKEN": "test-engine-token",
        "SECRET_KEY": "test-secret-key",
        "INSTANCE_PATH": str(tmp_path_factory.mktemp("instance")),
        "ENGINE_POLL_SECONDS": 10.0,
        "RECOVERY_STALE_SECONDS": 60,
        "WTF_CSRF_ENABLED": True,
    }


@pytest.fixture(scope="session")
def _schema(base_config):
    app = create_app(base_config)
    with app.app_context():
        db.drop_tables(list(reversed(ALL_MODELS)), safe=True, cascade=True)
        from app.migrations import upgrade
        upgrade()
        db.close()
    return app


def _empty_tables():
    from app.activity import entries
    from app.plumbing.models import utcnow

    with db.connection_context(), db.atomic():
        for model in reversed(ALL_MODELS):
            if model is not SchemaVersion:
                model.delete().execute()
    with db.connection_context():
        # The activity log's partitions of today and the coming week, as `db upgrade` and the
        # periodic job leave them (a test before may have dropped them): a test's processes
        # never meet one being made while they write.
        entries.prepare_partitions(utcnow())


def marked_config(request) -> dict:
    """The settings of a test's ``@pytest.mark.config(...)`` marks: a module's ``pytestmark``, a
    test's own and its parameter's merge, the closest winning."""
    config: dict = {}
    for marker in reversed(list(request.node.iter_markers("config"))):
        config.update(marker.kwargs)
    return config


@pytest.fixture
def app(_schema, base_config, request):
    """A fresh app bound to emptied tables and a flushed Redis; ``@pytest.mark.config(...)`` overrides."""
    config = dict(base_config, **marked_config(request))
    application = create_app(config)
    _empty_tables()
    runtime.redis().flushdb()
    requests_reset(base_config["ENGINE_URL"])
    yield application
    if not db.is_closed():
        db.close()


def requests_reset(engine_url):
    import requests
    requests.post(f"{engine_url}/_sim/engine/reset", timeout=5)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    """A real OpenID provider (npm ``oidc-provider``) for the session: tests/oidc_provider.py."""
    from tests import oidc_provider as provider
    running = provider.start(tmp_path_factory.mktemp("oidc"))
    yield running
    provider.stop(running)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def redis_conn(app):
    return runtime.redis()


@pytest.fixture
def served_app(app):
    server = ServerThread(app)
    yield server
    server.stop()


@pytest.fixture
def make_customer(app):
    def make(tier="business", credits=100, **overrides):
        with db.connection_context():
            return factories.customer(tier=tier, credits=credits, **overrides)
    return make


@pytest.fixture
def account(make_customer):
    """A Business customer with 100 credits and a key: ``.customer``, ``.key``, ``.api_key``, ``.headers``."""
    return make_customer()


@pytest.fixture
def jobs(app):
    from tests.jobrunner import JobRunner
    return JobRunner(runtime.redis())


# Fixtures that start a real process; a test using one must carry ``@pytest.mark.processes``
# so that ``make test-fast`` (-m "not processes and not slow") really leaves it out.
PROCESS_FIXTURES = {"gunicorn", "dedicated_redis", "stack", "browser", "oidc_provider"}


def pytest_collection_modifyitems(config, items):
    unmarked = [item.nodeid for item in items if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
                and not item.get_closest_marker("processes")]
    if unmarked:
        raise pytest.UsageError("tests that start real processes need @pytest.mark.processes: " + ", ".join(unmarked))
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, as xdist requires
        items.sort(key=_long_first)


# The modules whose tests run longest (measured with --durations on 2026-11-29, seconds a test),
# longest first. Under xdist a worker takes the next test of the collection's order whenever it is
# free: the fuzzer's 130 s test, collected among the last, ran alone for two minutes after every
# other worker had finished. Sent out first, the long tests overlap the many short ones, which then
# fill the end evenly. Only the order changes; a module missing here just keeps its place.
LONG_FIRST = (
    "tests/security/test_fuzz.py",                  # 130 s: schemathesis over every operation
    "tests/ops/test_cluster.py",                    # 80 s: make cluster and its failovers
    "tests/e2e/test_scenarios.py",                  # stacks of their own, 10 to 20 s each
    "tests/reliability/test_callback_flood.py",     # 33 s
    "tests/ops/test_embedded_servers.py",           # make run stopped four ways, 12 to 22 s each
    "tests/reliability/test_database_hosts.py",     # 25 s: a primary cut off for up to 30 s
    "tests/ops/test_slow_clients.py",               # 23 s
    "tests/reliability/test_redis_failover.py",     # Sentinel failovers, 10 to 22 s each
    "tests/reliability/test_held_connections.py",   # 15 to 20 s each
    "tests/client/test_docs_examples.py",           # 10 and 21 s
    "tests/reliability/test_faults.py",
    "tests/reliability/test_load.py",
    "tests/workers/test_audit_sinks.py",
    "tests/reliability/test_delivery_pool_faults.py",
)


def _long_first(item) -> int:
    module = item.nodeid.split("::", 1)[0]
    return LONG_FIRST.index(module) if module in LONG_FIRST else len(LONG_FIRST)


# The fixtures of the domains' tests (tests/<domain>/) and of the portal's pages, wherever their tests are.
pytest_plugins = ["tests.domain_fixtures", "tests.portal_fixtures"]
