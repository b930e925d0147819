"""Fixtures of the reliability tests: figures, gunicorn and a dedicated redis-server."""
from __future__ import annotations

import pytest

from tests.reliability.figures import make_fixture, stash_report

figures = make_fixture()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    stash_report(item, call, outcome)
