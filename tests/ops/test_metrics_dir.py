"""The shared metrics folder (PROMETHEUS_MULTIPROC_DIR): operator commands leave nothing in it,
and a folder that does not exist yet is made, not a traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.processes


def test_operator_commands_write_nothing_into_the_shared_metrics_folder(app, simulator, tmp_path):
    folder = tmp_path / "not-made-yet" / "prometheus"
    env = service_env(app, simulator.url, tmp_path / "instance", PROMETHEUS_MULTIPROC_DIR=folder)
    for args in (["db", "upgrade"], ["customers", "list"]):
        done = subprocess.run([str(BIN / "flask"), "--app", "wsgi", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    assert not folder.exists() or list(folder.iterdir()) == []


def test_a_worker_makes_a_missing_metrics_folder(app, simulator, tmp_path):
    folder = tmp_path / "fresh" / "prometheus"
    env = service_env(app, simulator.url, tmp_path / "instance", PROMETHEUS_MULTIPROC_DIR=folder)
    done = subprocess.run([sys.executable, "-m", "workers", "--burst"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert folder.is_dir()
    assert list(folder.iterdir())  # the worker's own counters, as the scrape expects
