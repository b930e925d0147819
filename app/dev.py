"""``make run``: the whole service on the embedded defaults, for a newcomer.

Starts (or finds) the embedded PostgreSQL and Redis (``app.plumbing.embedded``), builds the schema,
makes a demo customer with a fresh key and a portal owner (its password printed when it is made),
and a demo customer signing in ``sso.example`` by single sign-on through the simulator's stand-in
OpenID provider (``simulator.oidc``),
prints them with a ready ``curl`` (and one that waits on the held-connection server), then runs the API
(gunicorn), the held-connection server (``gunicorn.held.conf.py``, on ``API_PORT`` + 1), a
worker and the simulator together under honcho until it is stopped.

However it is stopped, nothing is left running: Ctrl-C, or a SIGTERM to this process (or
to ``make``, which passes it on), stops honcho and its processes first, then this process
exits and the embedded servers stop with it. Should this process be killed outright,
honcho gets a SIGTERM from the kernel (Linux) and the servers' guard stops them; should
its parent (``make``) be killed, this process gets a SIGTERM and stops as above.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from app import create_app
from app.accounts import admin, portal_users, sso
from app.accounts.models import Customer
from app.activity import entries
from app.billing import customers
from app.extensions import db
from app.migrations import upgrade
from app.plumbing import runtime
from app.plumbing.errors import AccountError
from app.plumbing.models import utcnow
from app.plumbing.redis_conn import redis_url_of

DEMO_NAME = "Demo customer"
DEMO_PORTAL_EMAIL = "demo@example.com"  # the demo customer's portal owner
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The demo SSO customer: its domain's people are the simulator's demo users (simulator/oidc.py).
DEMO_SSO_NAME = "Demo SSO customer"
DEMO_SSO_DOMAIN = "sso.example"
DEMO_SSO_EMAIL = "jane@sso.example"
DEMO_SSO_CLIENT = "scan-portal-demo"
DEMO_SSO_ROLE_MAP = "scan-admins=admin,scan-devs=developer"

# The demo's target: a clean one (simulator/results.py makes one target in five "messy", to
# exercise the service's repairs; a newcomer's first scan should not be one of them).
EXAMPLE_TARGET = "john.doe@example.com"


@dataclass(frozen=True)
class Demo:
    """What ``make run`` prints: the demo customer, its new key and its portal login."""

    customer_id: str
    api_key: str
    portal_email: str
    portal_password: str | None  # None: the user existed; its password was printed when it was made


def demo_accounts() -> Demo:
    """The demo customer (made on the first run), a new key of it, and its portal owner (made,
    with a random password printed once, when there is none). Inside a database connection."""
    customer = Customer.get_or_none(Customer.name == DEMO_NAME)
    if customer is None:
        customer = customers.create_customer(DEMO_NAME, "business", 1000)
    _, api_key = admin.issue_key(customer.id, "demo key (make run)")
    password = None
    try:
        portal_users.get_user(DEMO_PORTAL_EMAIL)
    except AccountError:
        password = secrets.token_urlsafe(12)
        admin.create_user(customer.id, DEMO_PORTAL_EMAIL, password)
    return Demo(customer.id, api_key, DEMO_PORTAL_EMAIL, password)


@dataclass(frozen=True)
class DemoSso:
    """The demo SSO customer and the client the simulator's provider is to know it by."""

    customer_id: str
    issuer: str
    client_secret: str
    redirect_uris: list[str]

    def sim_clients(self) -> str:
        """``SIM_OIDC_CLIENTS`` for the simulator's process."""
        return json.dumps({DEMO_SSO_CLIENT: {"secret": self.client_secret, "redirect_uris": self.redirect_uris}})


def demo_sso(api_port: str, sim_port: str) -> DemoSso:
    """The demo SSO customer (made on the first run) signing in ``sso.example`` through the
    simulator's provider on ``sim_port``. Its settings are set again at every run, with a new client
    secret: the simulator keeps its clients in memory only, so the secret is handed to it afresh
    (and a SECRET_KEY changed since the last run does not matter). Inside a database connection."""
    customer = Customer.get_or_none(Customer.name == DEMO_SSO_NAME)
    if customer is None:
        customer = customers.create_customer(DEMO_SSO_NAME, "business", 1000)
    issuer = f"http://127.0.0.1:{sim_port}/_sim/oidc"  # http: accepted outside production only
    secret = secrets.token_urlsafe(24)
    sso.configure(customer.id, issuer=issuer, client_id=DEMO_SSO_CLIENT, client_secret=secret,
                  domains=DEMO_SSO_DOMAIN, role_claim="groups", role_map=DEMO_SSO_ROLE_MAP)
    # the portal's callback as the browser's address names it (url_for(_external=True))
    callbacks = [f"http://{host}:{api_port}/app/login/sso/callback" for host in ("127.0.0.1", "localhost")]
    return DemoSso(customer.id, issuer, secret, callbacks)


def prepare(api_port: str = "8000", sim_port: str = "8700") -> tuple[Demo, DemoSso, str]:
    """Schema, demo customer, a new demo key, the portal user and the demo SSO customer; returns
    (demo, demo_sso, redis_url)."""
    create_app()
    redis_conn = runtime.redis()
    with db.connection_context():
        upgrade()
        entries.prepare_partitions(utcnow())  # as `db upgrade` does: before anything writes
        demo = demo_accounts()
        demo_sso_customer = demo_sso(api_port, sim_port)
    return demo, demo_sso_customer, redis_url_of(redis_conn)


def sso_banner(demo_sso_customer: DemoSso, api_port: str) -> str:
    """How to sign in by single sign-on (in ``banner``, after the password login)."""
    return f"""Portal by single sign-on: {DEMO_SSO_NAME} ({demo_sso_customer.customer_id}) signs in @{DEMO_SSO_DOMAIN}
through the simulator's stand-in OpenID provider ({demo_sso_customer.issuer}, development only):
at http://127.0.0.1:{api_port}/app/login type {DEMO_SSO_EMAIL} and press "Sign in with SSO", then pick who
you are on the simulator's page (jane: admin, sam: developer, val: viewer; una's e-mail is not
verified, so the portal refuses her).
"""


def banner(demo: Demo, api_port: str, held_port: str, demo_sso_customer: DemoSso | None = None) -> str:
    """The lines ``make run`` prints before it starts the processes."""
    base, held = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{held_port}"
    if demo.portal_password:
        login = f"{demo.portal_email}  password: {demo.portal_password}  (shown once)"
    else:
        login = (f"{demo.portal_email}  (its password was shown when make run made it; a new one: "
                 f"flask --app wsgi users reset-password {demo.portal_email})")
    single_sign_on = "\n" + sso_banner(demo_sso_customer, api_port) if demo_sso_customer else ""
    return f"""
Public Scan API (development) on {base}  -  docs: {base}/api/docs
Demo customer: {demo.customer_id}
Demo key (shown once): {demo.api_key}
Portal: {base}/app/login  {login}
{single_sign_on}
  curl -s -X POST {base}/api/v1/scan -H 'Authorization: Bearer {demo.api_key}' \\
       -H 'Content-Type: application/json' -d '{{"target": "{EXAMPLE_TARGET}"}}'

Then GET the poll_url it returns with the same header. Or let the server wait for the result, in
one call of up to 60 s, on the held-connection server ({held}, API_PORT + 1):

  curl -s -X POST '{held}/api/v1/scan?wait=60' -H 'Authorization: Bearer {demo.api_key}' \\
       -H 'Content-Type: application/json' -d '{{"target": "{EXAMPLE_TARGET}"}}'

(a read waits the same: GET {held}/api/v1/scan/SCAN_ID?wait=60). Calls that stay
open (?wait=N and /api/v1/events/stream) are served there without a thread each (in production
nginx sends them there; {base} answers them too). Ctrl-C stops everything.
"""


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
    api_port = os.environ.get("API_PORT", "8000")
    sim_port = os.environ.get("SIM_PORT", "8700")
    demo, demo_sso_customer, redis_url = prepare(api_port, sim_port)
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
               PROMETHEUS_MULTIPROC_DIR=metrics_dir, SIM_OIDC_CLIENTS=demo_sso_customer.sim_clients())
    print(banner(demo, api_port, held_port, demo_sso_customer), flush=True)
    return run_until_stopped([os.path.join(bin_dir, "honcho"), "-f", "Procfile.dev", "start"], env)


if __name__ == "__main__":
    raise SystemExit(main())
