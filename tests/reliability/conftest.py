"""Fixtures of the reliability tests: figures, gunicorn and a dedicated redis-server."""
from __future__ import annotations

import pytest

from app import create_app
from tests.conftest import marked_config
from tests.reliability.figures import make_fixture, stash_report
from tests.reliability.servers import RedisServer

figures = make_fixture()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    stash_report(item, call, outcome)


@pytest.fixture
def dedicated_redis(tmp_path):
    """A redis-server of this test's own, which it may kill and restart."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.kill()


@pytest.fixture
def redis_app(app, base_config, dedicated_redis, request):
    """The app of this test, bound to the dedicated redis-server (tables emptied by ``app``)."""
    return create_app(dict(base_config, REDIS_URL=dedicated_redis.url, **marked_config(request)))
