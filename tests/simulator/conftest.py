"""The simulator's own tests drive its Flask app in process (``client``); they never need the
service's app, whose ``client`` fixture this one stands in for here."""
import pytest

from simulator.app import create_sim_app


@pytest.fixture
def client(monkeypatch):
    # The environment must not leak a token or a time scale into these tests.
    monkeypatch.delenv("ENGINE_TOKEN", raising=False)
    monkeypatch.delenv("SIM_TIME_SCALE", raising=False)
    return create_sim_app().test_client()
