"""Slow clients behind nginx (ops/nginx.conf): sockets that never finish a chunked body
hold every gunicorn thread when they reach it directly, and none behind nginx, which
buffers bodies whole before passing them on. Also: what nginx refuses itself answers
in the API's JSON error envelope. Skipped where nginx is not installed."""
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.ops.test_observability import wait_until
from tests.ops.test_startup import closed_port
from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install -y nginx)"),
]

sys.path.insert(0, str(ROOT / "ops"))
import check_slow_clients  # noqa: E402


@pytest.fixture
def gunicorn(app, simulator, tmp_path):
    port = closed_port()
    env = service_env(app, simulator.url, tmp_path / "instance", GUNICORN_BIND=f"127.0.0.1:{port}",
                      WEB_CONCURRENCY=2, GUNICORN_THREADS=4, LOG_LEVEL="WARNING")
    proc = subprocess.Popen([str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok, 30, "gunicorn")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)


def test_slow_clients_stall_gunicorn_alone_but_not_behind_nginx(gunicorn):
    # 3 attackers per thread (2 workers x 4): each worker takes the connections it accepts, so with
    # barely more attackers than threads one worker could keep a thread free and answer every probe.
    report = check_slow_clients.run(gunicorn, attackers=24, seconds=8, nginx_binary=NGINX)
    print(json.dumps(report))
    direct, behind = report["direct_to_gunicorn"], report["behind_nginx"]
    assert direct["failed_or_timed_out"] > 0 or direct["max_ms"] > 2000  # the attack works on gunicorn alone
    # Behind nginx every probe is answered (none waits out its 5 s), and sooner than gunicorn alone
    # answered in the same run: a comparison, not a time, so a loaded machine does not fail it
    # (its time goal is `ops/check_slow_clients.py --max-ms`, run by an operator).
    assert behind["failed_or_timed_out"] == 0, report
    assert direct["failed_or_timed_out"] > 0 or behind["max_ms"] < direct["max_ms"], report


def raw(port: int, request: bytes) -> tuple[int, dict]:
    import ssl
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15),
                             server_hostname="localhost") as sock:
        sock.sendall(request)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_the_check_runs_nginx_on_the_ports_chosen(gunicorn, capsys):
    """It always took free ports; --http-port and --https-port choose them (a firewall, a container)."""
    http_port, https_port = closed_port(), closed_port()
    status = check_slow_clients.main(["--upstream", gunicorn, "--attackers", "1", "--seconds", "1", "--max-ms",
                                      "60000", "--nginx", NGINX, "--http-port", str(http_port),
                                      "--https-port", str(https_port)])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["nginx_ports"] == {"http": http_port, "https": https_port}
    assert report["behind_nginx"]["failed_or_timed_out"] == 0  # probes went through nginx on that port


def test_a_chosen_port_in_use_is_refused_before_nginx_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} is in use"):
            check_slow_clients.Nginx(f"127.0.0.1:{closed_port()}", NGINX, https_port=port)


def test_what_nginx_refuses_is_answered_in_the_json_envelope(gunicorn):
    server = check_slow_clients.Nginx(gunicorn, NGINX)
    try:
        base = f"https://127.0.0.1:{server.https_port}"
        # nginx's body limit is the app's (MAX_CONTENT_LENGTH, 256 KiB): one answer whichever refuses.
        big = requests.post(f"{base}/api/v1/scan", data=b"x" * (256 * 1024 + 1), verify=False, timeout=15,
                            headers={"Content-Type": "application/json", "X-Request-Id": "req-too-big"})
        assert big.status_code == 413
        assert big.headers["Content-Type"] == "application/json"
        assert big.json() == {"ok": False, "error": "payload_too_large", "message": "the request body is larger than 256 KB",
                              "request_id": "req-too-big"}
        status, body = raw(server.https_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
        assert status == 400
        assert body["error"] == "invalid_request"
    finally:
        server.stop()


REFUSED_BY_NGINX = {
    # name: (raw request, status, error code)
    # nginx's header buffers are 32 KB (a 16 KB header reaches the app's own 431 over HTTP/2 too).
    "a header over 32 KB": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 33000 + b"\r\n\r\n", 431,
                           "headers_too_large"),
    "a URI over 8 KB": (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
    "a NUL byte in the path": (b"GET /api/v1/scan/%00 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request"),
    "a malformed method": (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request"),
    "no request line at all": (b"\x16\x03garbage\r\n\r\n", 400, "invalid_request"),
}


@pytest.fixture
def nginx_in_front(gunicorn):
    server = check_slow_clients.Nginx(gunicorn, NGINX)
    yield server
    server.stop()


@pytest.mark.parametrize("name", list(REFUSED_BY_NGINX), ids=list(REFUSED_BY_NGINX))
def test_every_answer_nginx_makes_itself_is_the_json_envelope(nginx_in_front, name):
    """Requests nginx refuses before parsing a URI used to get its own HTML 500 ("empty URI in
    redirect to named location"), and a 9 KB header a 400: each is the JSON envelope, right status."""
    request, status, error = REFUSED_BY_NGINX[name]
    got, body = raw(nginx_in_front.https_port, request)
    assert got == status, body
    assert body["ok"] is False
    assert body["error"] == error
    assert body["request_id"].startswith("req_")


def test_the_metrics_and_health_routes_behind_nginx(gunicorn):
    server = check_slow_clients.Nginx(gunicorn, NGINX)
    base = f"https://127.0.0.1:{server.https_port}"
    try:
        assert requests.get(f"{base}/metrics", verify=False, timeout=5).status_code == 404  # internal only
        proxied = requests.get(f"{base}/healthz", verify=False, timeout=5)
        assert proxied.status_code == 200 and proxied.headers["X-Request-Id"].startswith("req_")
    finally:
        server.stop()


@pytest.fixture
def production_gunicorn(app, simulator, tmp_path):
    """gunicorn as production runs it behind one proxy: APP_ENV=production, TRUSTED_PROXIES=1."""
    port = closed_port()
    env = service_env(app, simulator.url, tmp_path / "instance", GUNICORN_BIND=f"127.0.0.1:{port}",
                      WEB_CONCURRENCY=1, GUNICORN_THREADS=4, LOG_LEVEL="INFO", APP_ENV="production",
                      SECRET_KEY="prod-test-secret-" + "x" * 32, PUBLIC_BASE_URL="https://api.example.com",
                      TRUSTED_PROXIES=1)
    log = tmp_path / "gunicorn.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"], cwd=ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok, 30, "gunicorn")
        yield f"127.0.0.1:{port}", log
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_portal_login_works_behind_nginx_on_a_port_other_than_443(production_gunicorn, make_customer):
    """nginx sent Host without its port, so the CSRF check's "same origin" saw
    https://127.0.0.1 against a Referer of https://127.0.0.1:PORT and refused every login."""
    from app.accounts import admin
    from tests.portal.helpers import CSRF_RE, PASSWORD
    upstream, log = production_gunicorn
    account = make_customer()
    admin.create_user(account.id, "ops@acme.example", PASSWORD)
    server = check_slow_clients.Nginx(upstream, NGINX)
    base = f"https://127.0.0.1:{server.https_port}"
    try:
        session = requests.Session()  # verify=False on each call: REQUESTS_CA_BUNDLE would override the session's
        page = session.get(f"{base}/app/login", timeout=10, verify=False)
        token = CSRF_RE.search(page.text).group(1)
        answer = session.post(f"{base}/app/login", allow_redirects=False, timeout=10, verify=False,
                              headers={"Referer": f"{base}/app/login", "Origin": base},
                              data={"email": "ops@acme.example", "password": PASSWORD, "csrf_token": token})
        assert answer.status_code == 302, answer.text[:300]
        keys = session.get(f"{base}/app/api-keys", timeout=10, verify=False)
        assert keys.status_code == 200
        # A form posted from another site (a valid token, the wrong Referer) is refused, and the log says why.
        forged = session.post(f"{base}/app/logout", timeout=10, verify=False,
                              headers={"Referer": "https://evil.example/"},
                              data={"csrf_token": CSRF_RE.search(keys.text).group(1)})
        assert forged.status_code == 400
        assert forged.json()["error"] == "csrf_failed"
    finally:
        server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    refusals = [line for line in lines if "CSRF" in line.get("message", "")]
    assert refusals, log.read_text()[-2000:]
    assert "referrer does not match" in refusals[-1]["message"].lower()
