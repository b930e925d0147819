"""Slow clients behind nginx (ops/nginx.conf): ten sockets that never finish a chunked body
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
    report = check_slow_clients.run(gunicorn, attackers=10, seconds=8, nginx_binary=NGINX)
    print(json.dumps(report))
    direct, behind = report["direct_to_gunicorn"], report["behind_nginx"]
    assert direct["failed_or_timed_out"] > 0 or direct["max_ms"] > 2000  # the attack works on gunicorn alone
    assert behind["failed_or_timed_out"] == 0 and behind["max_ms"] < 1000, report


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


def test_what_nginx_refuses_is_answered_in_the_json_envelope(gunicorn):
    server = check_slow_clients.Nginx(gunicorn, NGINX)
    try:
        base = f"https://127.0.0.1:{server.https_port}"
        big = requests.post(f"{base}/api/v1/scan", data=b"x" * (1024 * 1024 + 1), verify=False, timeout=15,
                            headers={"Content-Type": "application/json", "X-Request-Id": "req-too-big"})
        assert big.status_code == 413 and big.headers["Content-Type"] == "application/json"
        assert big.json() == {"ok": False, "error": "payload_too_large", "message": "the request body is larger "
                              "than 1 MiB", "request_id": "req-too-big"}
        status, body = raw(server.https_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000
                           + b"\r\n\r\n")
        assert status in (400, 431, 494) and body["ok"] is False and body["request_id"].startswith("req_")
        status, body = raw(server.https_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
        assert status == 400 and body["error"] == "invalid_request"
        assert requests.get(f"{base}/metrics", verify=False, timeout=5).status_code == 404  # internal only
        proxied = requests.get(f"{base}/healthz", verify=False, timeout=5)
        assert proxied.status_code == 200 and proxied.headers["X-Request-Id"].startswith("req_")
    finally:
        server.stop()
