"""The client as customers get it: ``pip install ./client`` into a virtualenv that has nothing else,
then its ``scan-api`` command against the served API."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"
SUBCOMMANDS = ("scan", "bulk", "get", "get-bulk", "list", "deliveries", "redeliver")


@pytest.mark.processes
def test_installs_alone_and_its_command_line_scans(served_app, account, tmp_path):
    source = tmp_path / "client"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(source)],
                               capture_output=True, text=True, env=env, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"], capture_output=True,
                            text=True, env=env, timeout=60)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"scan-api-client", "requests", "tqdm"} <= names
    assert not names & {"flask", "peewee", "public-scan-api", "rq", "redis"}
    # importing the client loads nothing of the service's stack
    probe = subprocess.run([str(bin_dir / "python"), "-c", "import sys, scan_api_client; "
                            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                            "{'flask', 'peewee', 'app', 'workers'}))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert probe.stdout.strip() == "[]", probe.stderr

    scan_api = str(bin_dir / "scan-api")
    for command in ((), *((name,) for name in SUBCOMMANDS)):
        helped = subprocess.run([scan_api, *command, "--help"], capture_output=True, text=True, env=env, timeout=60)
        assert helped.returncode == 0 and "usage: scan-api" in helped.stdout, (command, helped.stderr)
    run_env = dict(env, SCAN_API_URL=served_app.url, SCAN_API_KEY=account.api_key)
    created = subprocess.run([scan_api, "scan", "jane@example.com"], capture_output=True, text=True, env=run_env,
                             timeout=60)
    assert created.returncode == 0, created.stderr
    scan_id = json.loads(created.stdout)["scan_id"]
    read = subprocess.run([scan_api, "get", scan_id, "--format", "csv"], capture_output=True, text=True,
                          env=run_env, timeout=60)
    assert read.returncode == 0 and f"{scan_id},jane@example.com,email,queued" in read.stdout
    bad = subprocess.run([scan_api, "get", scan_id, "--key", "service_live_nope"], capture_output=True, text=True,
                         env=run_env, timeout=60)
    assert bad.returncode == 1 and "invalid_token" in bad.stderr and "Traceback" not in bad.stderr
