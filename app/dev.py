"""``make run``: the whole service on the embedded defaults, for a newcomer.

Starts (or finds) the embedded Redis, creates the SQLite schema, makes a demo
customer with a fresh key, prints a ready ``curl``, then runs the API (gunicorn), a
worker and the simulator together under honcho until Ctrl-C.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from app import create_app, runtime
from app.extensions import db
from app.migrations import upgrade
from app.models import Customer
from app.redis_conn import redis_url_of
from app.services import accounts

DEMO_NAME = "Demo customer"


def prepare() -> tuple[str, str]:
    """Schema, demo customer and a new demo key; returns (api_key, redis_url)."""
    create_app()
    redis_conn = runtime.redis()
    with db.connection_context():
        upgrade()
        customer = Customer.get_or_none(Customer.name == DEMO_NAME)
        if customer is None:
            customer = accounts.create_customer(DEMO_NAME, "business", 1000)
        _, api_key = accounts.issue_key(customer.id, "demo key (make run)")
    return api_key, redis_url_of(redis_conn)


def main() -> int:
    api_key, redis_url = prepare()
    api_port = os.environ.get("API_PORT", "8000")
    sim_port = os.environ.get("SIM_PORT", "8700")
    bin_dir = os.path.dirname(sys.executable)  # the venv's gunicorn and python come first
    # The API and the worker add up their metrics in one directory, emptied at each start.
    metrics_dir = os.path.join(runtime.config["INSTANCE_PATH"], "prometheus")
    shutil.rmtree(metrics_dir, ignore_errors=True)
    os.makedirs(metrics_dir)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", REDIS_URL=redis_url, ENGINE_URL=f"http://127.0.0.1:{sim_port}",
               API_PORT=api_port, SIM_PORT=sim_port, PUBLIC_BASE_URL=f"http://127.0.0.1:{api_port}",
               SIM_TIME_SCALE=os.environ.get("SIM_TIME_SCALE", "0.1"), PYTHONUNBUFFERED="1",
               PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    base = f"http://127.0.0.1:{api_port}"
    print(f"""
Public Scan API (development) on {base}  -  docs: {base}/api/docs
Demo key (shown once): {api_key}

  curl -s -X POST {base}/api/v1/scan -H 'Authorization: Bearer {api_key}' \\
       -H 'Content-Type: application/json' -d '{{"target": "jane.doe@example.com"}}'

Then GET the poll_url it returns with the same header. Ctrl-C stops everything.
""", flush=True)
    honcho = os.path.join(bin_dir, "honcho")
    try:
        return subprocess.call([honcho, "-f", "Procfile.dev", "start"], env=env)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
