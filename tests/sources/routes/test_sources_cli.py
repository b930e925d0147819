"""The operators' commands of source health (D30): list, probe now, quarantine, release."""
import pytest
import requests

from app.sources import health
from tests.api.test_cli import run, run_json


@pytest.fixture(autouse=True)
def fresh_cache(app):
    health.forget_cache()
    yield
    health.forget_cache()


def test_probe_list_quarantine_and_release(app, simulator):
    requests.post(f"{simulator.url}/_sim/engine/sources/gravatar", json={"mode": "wrong"}, timeout=5)
    assert run_json(app, "sources", "list")["sources"] == []
    probed = run_json(app, "sources", "probe", "gravatar", "--wait", "10")
    assert probed["report"]["probes_sent"] == 1 and probed["report"]["probes_wrong"] == 1
    (gravatar,) = probed["sources"]
    assert (gravatar["id"], gravatar["last_probe_ok"], gravatar["probe_streak"]) == ("gravatar", False, -1)
    listed = {s["id"]: s for s in run_json(app, "sources", "list")["sources"]}
    assert len(listed) >= 10 and listed["gravatar"]["kinds"]
    held = run_json(app, "sources", "quarantine", "github", "--reason", "pages changed")
    assert held["source"]["quarantined"] is True
    table = run(app, "sources", "list")
    assert table.exit_code == 0 and "pages changed" in table.output
    assert run_json(app, "sources", "release", "github")["source"]["quarantined"] is False
    missing = run(app, "sources", "release", "nope")
    assert missing.exit_code == 1 and "no source with this id" in missing.output
    refused = run(app, "sources", "quarantine", "github")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
