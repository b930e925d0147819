"""Fixtures of the security tests: figures (see tests/reliability/figures.py) and gunicorn."""
from __future__ import annotations

import pytest

from tests.processes import service_env
from tests.reliability.figures import make_fixture, stash_report
from tests.reliability.servers import Gunicorn

figures = make_fixture()


@pytest.fixture
def gunicorn(app, simulator, tmp_path):
    """The API under gunicorn (1 worker x 4 threads, keep-alive on), on this test's database and Redis."""
    server = Gunicorn(service_env(app, simulator.url, tmp_path / "instance", LOG_LEVEL="WARNING"),
                      tmp_path / "gunicorn.log", workers=1, threads=4)
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    stash_report(item, call, outcome)
