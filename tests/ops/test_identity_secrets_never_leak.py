"""The secrets of enterprise identity and audit (D32) in a full run of the real processes: the OpenID
client secret, the SCIM token and the SIEM token are kept encrypted or digested, and none of them (nor
their base64 or URL-encoded forms) is in anything the processes wrote: gunicorn's and the worker's
logs, the operator commands' error output and other output, the activity log, any error body.

The run: ``customers sso`` with a known client secret, ``customers scim-token``, ``customers
audit-sink`` with a known token pointing at the simulator's HEC receiver; SCIM calls with the token
(and one with a wrong token, one with the token on the API, the token in X-Request-Id of a SCIM and
an API call, whose activity entry the sink receives); a
portal SSO sign-in whose code the provider refuses, so the client secret is sent to the provider's
token endpoint and its refusal handled; the worker's pusher delivering the entries to the receiver.
"""
from __future__ import annotations

import base64
import html
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import requests

from app.accounts.models import Customer
from app.activity.audit_models import AuditSink
from app.activity.models import ActivityEntry
from app.extensions import db
from simulator.procutil import wait_until
from tests import oidc_provider as op
from tests.ops.test_startup import closed_port
from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SINK_TOKEN = "hec-" + uuid.uuid4().hex

pytestmark = pytest.mark.processes


def forms(secret: str, *prefixes: str) -> set[str]:
    """A secret as it might be written: itself, URL-encoded, in base64 (also with a prefix such as a
    Basic credential's ``client_id:``)."""
    found = {secret, quote(secret, safe="")}
    for prefix in ("", *prefixes):
        raw = (prefix + secret).encode()
        found |= {base64.b64encode(raw).decode().rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("=")}
    return found


@pytest.fixture
def run(app, simulator, oidc_provider, make_customer, tmp_path):
    """gunicorn and one worker (JSON logs into files), a customer, and a ``cli(*args, stdin=)``."""
    port = closed_port()
    base = f"http://127.0.0.1:{port}"
    instance = tmp_path / "instance"
    env = service_env(app, simulator.url, instance, LOG_FORMAT="json", PUBLIC_BASE_URL=base,
                      GUNICORN_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY=2, GUNICORN_THREADS=2,
                      ENGINE_POLL_SECONDS=1, RECOVERY_INTERVAL_SECONDS=1)
    logs = tmp_path / "logs"
    logs.mkdir()
    outputs = []

    def cli(*args, stdin=""):
        done = subprocess.run([str(BIN / "flask"), "--app", "wsgi", *args], cwd=ROOT, env=env, input=stdin,
                              capture_output=True, text=True, timeout=60)
        outputs.append((args, done.stdout, done.stderr))
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(logs / f"{name}.out", "w"),
                              stderr=open(logs / f"{name}.err", "w"))
             for name, cmd in (("web", [str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"]),
                               ("worker", [str(BIN / "python"), "-m", "workers"]))]
    try:
        wait_until(lambda: requests.get(f"{base}/readyz", timeout=2).status_code == 200, 30, "readyz")
        yield base, make_customer(tier="business", credits=100), cli, outputs, tmp_path
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_no_identity_secret_in_any_log_error_or_activity_entry_nor_in_clear_in_the_database(
        run, simulator, oidc_provider):
    base, customer, cli, outputs, folder = run
    client_secret = oidc_provider.secrets[op.PORTAL_CLIENT]
    answers = []  # every body the service answered

    # The operator's commands.
    cli("customers", "sso", customer.id, "--issuer", oidc_provider.issuer, "--client-id", op.PORTAL_CLIENT,
        "--client-secret-stdin", "--domains", "acme.example", stdin=client_secret + "\n")
    scim_token = json.loads(cli("customers", "scim-token", customer.id, "--json"))["scim_token"]
    outputs.pop()  # the one output meant to show the token, once
    receiver = f"hec-{uuid.uuid4().hex[:12]}"
    requests.post(f"{simulator.url}/_sim/receivers/{receiver}", json={"secret": SINK_TOKEN, "responses": [200]},
                  timeout=5).raise_for_status()
    cli("customers", "audit-sink", customer.id, "--url",
        f"{simulator.url}/_sim/hec/{receiver}/services/collector/event", "--token-stdin", stdin=SINK_TOKEN + "\n")
    cli("customers", "audit-sinks", customer.id)
    cli("customers", "sso", customer.id)

    # SCIM, with the token, a wrong one, the token in X-Request-Id, the token on the API.
    scim = f"{base}/scim/v2"
    bearer = {"Authorization": f"Bearer {scim_token}", "Content-Type": "application/scim+json"}
    made = requests.post(f"{scim}/Users", headers={**bearer, "X-Request-Id": f"req-{scim_token}"}, timeout=10,
                         json={"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
                               "userName": "carol@acme.example", "roles": [{"value": "developer"}]})
    answers.append(made)
    assert made.status_code == 201, made.text
    assert made.headers["X-Request-Id"] != f"req-{scim_token}"
    user_id = made.json()["id"]
    answers.append(requests.get(f"{scim}/Users", params={"filter": 'userName eq "carol@acme.example"'},
                                headers={**bearer, "X-Request-Id": scim_token}, timeout=10))
    answers.append(requests.patch(f"{scim}/Users/{user_id}", headers=bearer, timeout=10, json={
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "path": "active", "value": False}]}))
    assert [a.status_code for a in answers] == [201, 200, 200], [a.text for a in answers]
    wrong = scim_token[:-4] + ("AAAA" if not scim_token.endswith("AAAA") else "BBBB")
    refused = [requests.get(f"{scim}/Users", headers={"Authorization": f"Bearer {wrong}"}, timeout=10),
               requests.get(f"{scim}/Users", headers={"Authorization": f"Basic {scim_token}"}, timeout=10),
               requests.get(f"{base}/api/v1/account", headers={"Authorization": f"Bearer {scim_token}",
                                                             "X-Request-Id": scim_token}, timeout=10)]
    assert [a.status_code for a in refused[:2]] == [401, 401] and refused[2].status_code == 401, \
        [a.text for a in refused]
    answers += refused
    # An API call (an activity entry, which the sink pushes) with the token as its request id.
    used = requests.get(f"{base}/api/v1/account", headers={**customer.headers, "X-Request-Id": f"req.{scim_token}"},
                        timeout=10)
    answers.append(used)
    assert used.status_code == 200, used.text

    # A portal SSO sign-in whose code the provider refuses: the client secret goes to its token endpoint.
    browser = requests.Session()
    page = browser.get(f"{base}/app/login", timeout=10).text
    csrf = re.search(r'name="csrf_token"[^>]*value="([^"]+)"', page).group(1)
    start = browser.post(f"{base}/app/login", data={"email": "dave@acme.example", "password": "", "sso": "1",
                                                    "csrf_token": csrf, "next": ""}, timeout=10)
    answers.append(start)
    authorize = html.unescape(re.search(r'id="sso-continue" href="([^"]+)"', start.text).group(1))
    state = parse_qs(urlsplit(authorize).query)["state"][0]
    back = browser.get(f"{base}/app/login/sso/callback", params={"code": "not-a-code", "state": state}, timeout=10)
    answers.append(back)
    assert back.status_code == 401 and "Single sign-on did not succeed" in back.text

    # The pusher delivers the entries SCIM wrote.
    def delivered():
        got = requests.get(f"{simulator.url}/_sim/receivers/{receiver}/deliveries", timeout=5).json()["deliveries"]
        return [e for d in got for e in d["events"] if e["event"]["status"] == 200] and got
    batches = wait_until(delivered, 60, "the audit sink's delivery")
    assert all(b["token_valid"] for b in batches)
    # The worker logs a batch once it has recorded it, which may come after the receiver has it.
    worker_log = folder / "logs" / "worker.err"
    wait_until(lambda: "entries acknowledged" in worker_log.read_text(errors="replace"), 30,
               "the worker's record of the acknowledged batch")

    # What the processes wrote, what the service answered, what the activity log holds.
    secrets = {"client secret": forms(client_secret, f"{op.PORTAL_CLIENT}:"), "SCIM token": forms(scim_token),
               "sink token": forms(SINK_TOKEN)}
    with db.connection_context():
        entries = [json.dumps(e.__data__, default=str) for e in ActivityEntry.select().where(
            ActivityEntry.customer_id == customer.id)]
    assert entries
    written = {str(path.relative_to(folder)): path.read_bytes().decode(errors="replace")
               for path in folder.rglob("*") if path.is_file()}
    logs = {name: text for name, text in written.items() if name.startswith("logs/")}
    # The logs saw the run: the SCIM calls, the provider's refusal of the code, the sink's delivery.
    assert "/scim/v2/Users" in logs["logs/web.err"] and "token request refused" in logs["logs/web.err"]
    assert "entries acknowledged" in logs["logs/worker.err"]
    written.update({f"cli {' '.join(args)}": out + err for args, out, err in outputs})
    written.update({f"answer {a.request.method} {a.url}": a.text + json.dumps(dict(a.headers)) for a in answers})
    written.update({f"activity entry {i}": text for i, text in enumerate(entries)})
    for name, text in written.items():
        for what, shapes in secrets.items():
            assert not [s for s in shapes if s in text], f"the {what} is in {name}"

    # At rest: the client secret and the sink's token encrypted, the SCIM token only as its digest.
    with db.connection_context():
        rows = []
        for (table,) in db.execute_sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall():
            rows += [row for (row,) in db.execute_sql(f'SELECT t::text FROM "{table}" t').fetchall()]
        dump = "\n".join(rows)
        assert Customer.get_by_id(customer.id).scim_token_digest
        assert AuditSink.get(AuditSink.customer_id == customer.id).token_encrypted
    for what, secret in (("client secret", client_secret), ("SCIM token", scim_token), ("sink token", SINK_TOKEN)):
        assert secret not in dump, f"the {what} is stored in clear"
        assert base64.b64encode(secret.encode()).decode().rstrip("=") not in dump, f"the {what} is stored in base64"
