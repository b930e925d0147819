"""The production configuration, run as operators run it: gunicorn with gunicorn.conf.py
and ``python -m workers`` under ``APP_ENV=production`` on PostgreSQL and Redis, with a
scan taken end to end over HTTP. Needs TEST_DATABASE_URL (PostgreSQL) and
TEST_REDIS_URL, as CI's second run sets them.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from simulator.procutil import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.processes, pytest.mark.skipif(
    not (os.environ.get("TEST_DATABASE_URL", "").startswith("postgres") and os.environ.get("TEST_REDIS_URL")),
    reason="needs TEST_DATABASE_URL=postgresql://... and TEST_REDIS_URL (CI's second run)")]


def test_production_stack_runs_a_scan_end_to_end(app, simulator, tmp_path):
    port = free_port()
    env = dict(os.environ, APP_ENV="production", SECRET_KEY="prod-test-secret-" + "x" * 32,
               GUNICORN_BIND=f"127.0.0.1:{port}", PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
               DATABASE_URL=os.environ["TEST_DATABASE_URL"], REDIS_URL=os.environ["TEST_REDIS_URL"],
               ENGINE_URL=simulator.url, ENGINE_TOKEN="test-engine-token", WEB_CONCURRENCY="2",
               GUNICORN_THREADS="4", ENGINE_POLL_SECONDS="1", PYTHONUNBUFFERED="1")
    missing = subprocess.run([str(BIN / "flask"), "--app", "wsgi", "db", "upgrade"], cwd=ROOT, capture_output=True,
                             text=True, env={k: v for k, v in env.items() if k != "ENGINE_URL"})
    assert missing.returncode != 0 and "ENGINE_URL" in missing.stderr  # refuses to start without it

    def cli(*args):
        out = subprocess.run([str(BIN / "flask"), "--app", "wsgi", *args, "--json"], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    cli("db", "upgrade")
    customer = cli("customers", "create", "--name", "Prod", "--tier", "business", "--credits", "1000")
    api_key = cli("keys", "issue", customer["customer_id"])["api_key"]
    logs = {name: open(tmp_path / f"{name}.log", "w+") for name in ("web", "worker")}
    procs = [subprocess.Popen([str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"], cwd=ROOT,
                              env=env, stdout=logs["web"], stderr=subprocess.STDOUT),
             subprocess.Popen([str(BIN / "python"), "-m", "workers"], cwd=ROOT, env=env,
                              stdout=logs["worker"], stderr=subprocess.STDOUT)]
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(f"{base}/readyz", timeout=2).status_code == 200, 30, "readyz")
        headers = {"Authorization": f"Bearer {api_key}"}
        created = requests.post(f"{base}/api/v1/scan", json={"target": "+14155552671"}, headers=headers, timeout=10)
        assert created.status_code == 202, created.text
        poll_url = created.json()["poll_url"]
        wait_until(lambda: requests.get(poll_url, headers=headers, timeout=5).json()["status"] == "completed",
                   60, "the scan to complete")
        done = requests.get(poll_url, headers=headers, timeout=5)
        assert done.json()["result"]["phone_profile"]["region"] == "US"
        assert 0 < int(done.headers["X-Credits-Remaining"]) < 999  # the creation and every poll were charged
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    logs["worker"].seek(0)
    worker_lines = [line for line in logs["worker"].read().splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in worker_lines]
    assert any(e.get("scan_id") == created.json()["scan_id"] for e in entries), (tmp_path / "worker.log").read_text()[-3000:]
    assert api_key not in (tmp_path / "web.log").read_text() + (tmp_path / "worker.log").read_text()
