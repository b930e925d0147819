"""``make run``: the whole service on the embedded defaults, for a newcomer.

Starts (or finds) the embedded PostgreSQL and Redis (``app.embedded``), builds the schema,
makes a demo customer with a fresh key, prints a ready ``curl``, then runs the API
(gunicorn), the held-connection server (``gunicorn.held.conf.py``, on ``API_PORT`` + 1), a
worker and the simulator together under honcho until it is stopped.

However it is stopped, nothing is left running: Ctrl-C, or a SIGTERM to this process (or
to ``make``, which passes it on), stops honcho and its processes first, then this process
exits and the embedded servers stop with it. Should this process be killed outright,
honcho gets a SIGTERM from the kernel (Linux) and the servers' guard stops them; should
its parent (``make``) be killed, this process gets a SIGTERM and stops as above.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from app import create_app, runtime
from app.extensions import db
from app.migrations import upgrade
from app.models import Customer, utcnow
from app.redis_conn import redis_url_of
from app.services.accounts import accounts
from app.services.billing import activity

DEMO_NAME = "Demo customer"
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# The demo's target: a clean one (simulator/results.py makes one target in five "messy", to
# exercise the service's repairs; a newcomer's first scan should not be one of them).
EXAMPLE_TARGET = "john.doe@example.com"


def prepare() -> tuple[str, str]:
    """Schema, demo customer and a new demo key; returns (api_key, redis_url)."""
    create_app()
    redis_conn = runtime.redis()
    with db.connection_context():
        upgrade()
        activity.prepare_partitions(utcnow())  # as `db upgrade` does: before anything writes
        customer = Customer.get_or_none(Customer.name == DEMO_NAME)
        if customer is None:
            customer = accounts.create_customer(DEMO_NAME, "business", 1000)
        _, api_key = accounts.issue_key(customer.id, "demo key (make run)")
    return api_key, redis_url_of(redis_conn)


def _signal_on_parent_death() -> bool:
    """Ask the kernel for a SIGTERM when the parent ends (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0


def stop_with_parent() -> None:
    """A SIGTERM to this process when the one that started it ends (``make`` killed)."""
    parent = os.getppid()
    if not _signal_on_parent_death():
        def watch():  # elsewhere: look for the parent's end every half second
            while os.getppid() == parent:
                time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=watch, daemon=True).start()
    elif os.getppid() != parent:  # it ended before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run_until_stopped(argv: list[str], env: dict) -> int:
    """Run ``argv`` (honcho) until it exits; SIGINT or SIGTERM here asks it to stop (honcho
    stops its processes, SIGKILL after 5 s) and waits for it."""
    process = subprocess.Popen(argv, env=env, preexec_fn=_signal_on_parent_death)
    asked = []

    def stop(signum, frame):
        asked.append(signum)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    status = process.wait()
    return 0 if asked else status  # stopped as asked: not a failure


def main() -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # until honcho runs
    stop_with_parent()
    api_key, redis_url = prepare()
    api_port = os.environ.get("API_PORT", "8000")
    sim_port = os.environ.get("SIM_PORT", "8700")
    held_port = os.environ.get("HELD_PORT", str(int(api_port) + 1))
    bin_dir = os.path.dirname(sys.executable)  # the venv's gunicorn and python come first
    # The API and the worker add up their metrics in one directory, emptied at each start.
    metrics_dir = os.path.join(runtime.config["INSTANCE_PATH"], "prometheus")
    shutil.rmtree(metrics_dir, ignore_errors=True)
    os.makedirs(metrics_dir)
    # The processes use the servers this one started (it owns them: they stop when it ends).
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", APP_ENV="development",
               DATABASE_URL=runtime.config["DATABASE_URL"], REDIS_URL=redis_url,
               ENGINE_URL=f"http://127.0.0.1:{sim_port}",
               API_PORT=api_port, HELD_PORT=held_port, SIM_PORT=sim_port, PUBLIC_BASE_URL=f"http://127.0.0.1:{api_port}",
               SIM_TIME_SCALE=os.environ.get("SIM_TIME_SCALE", "0.1"), PYTHONUNBUFFERED="1",
               PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    base = f"http://127.0.0.1:{api_port}"
    print(f"""
Public Scan API (development) on {base}  -  docs: {base}/api/docs
Demo key (shown once): {api_key}

  curl -s -X POST {base}/api/v1/scan -H 'Authorization: Bearer {api_key}' \\
       -H 'Content-Type: application/json' -d '{{"target": "{EXAMPLE_TARGET}"}}'

Then GET the poll_url it returns with the same header. Ctrl-C stops everything.
Calls that stay open (?wait=N, /api/v1/events/stream) are served without a thread each on
http://127.0.0.1:{held_port} (in production nginx sends them there); {base} serves them too.
""", flush=True)
    return run_until_stopped([os.path.join(bin_dir, "honcho"), "-f", "Procfile.dev", "start"], env)


if __name__ == "__main__":
    raise SystemExit(main())
