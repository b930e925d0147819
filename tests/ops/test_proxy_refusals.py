"""Every refusal of the shipped proxy set-up (ops/nginx.conf in front of gunicorn.conf.py), over
HTTP/1.1 and HTTP/2, is the API's JSON error envelope; no log line of nginx, gunicorn or the app
carries a query string; a request id shaped like a key is never echoed. Real nginx, real gunicorn,
curl as the client."""
from __future__ import annotations

import base64
import json
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from tests.ops.test_startup import closed_port
from tests.processes import service_env, wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
CURL = shutil.which("curl")
needs_nginx = [pytest.mark.processes,
               pytest.mark.skipif(NGINX is None or CURL is None, reason="nginx and curl are not installed")]

sys.path.insert(0, str(ROOT / "ops"))
import check_slow_clients  # noqa: E402

TARGET = "jane.doe@example.com"
SECRET_ID = "service_live_AbCdEf0123456789"
# A key or secret inside a longer id (any case) is replaced too, by nginx as by the app.
SECRET_IDS = [SECRET_ID, "key:" + SECRET_ID, "x" + SECRET_ID, "id-service_test_AbCdEf0123456789-1",
              "a.whsec_AbCdEf0123456789", "ORDER.WHSEC_AbCdEf0123456789"]


def test_the_replace_me_count_nginx_conf_states_is_right():
    text = (ROOT / "ops" / "nginx.conf").read_text()
    stated = re.search(r"Replace the (\w+) REPLACE_ME values", text).group(1)
    values = [line for line in text.splitlines() if "REPLACE_ME" in line and not line.lstrip().startswith("#")]
    assert {"two": 2, "three": 3, "four": 4, "five": 5}[stated] == len(values), values


def test_no_log_format_shipped_logs_a_query_string():
    nginx = (ROOT / "ops" / "nginx.conf").read_text()
    log_format = re.search(r"log_format scan_api (.*?);", nginx, re.DOTALL).group(1)
    assert not re.search(r"\$(request|request_uri|args|query_string|arg_\w+|http_referer)\b", log_format)
    assert nginx.count("access_log /var/log/nginx/scan-api.access.log scan_api;") == 2  # both servers
    gunicorn = (ROOT / "gunicorn.conf.py").read_text()
    access_format = re.search(r"access_log_format = (.*)", gunicorn).group(1)
    assert not re.search(r"%\((q|r|f)\)s|\{query_string\}e|\{raw_uri\}e|\{referer\}i", access_format)


def test_nginx_replaces_an_id_holding_any_prefix_the_app_replaces():
    """ops/nginx.conf's map lists the app's credential prefixes, unanchored and in any case."""
    from app.request_ids import SECRET_PREFIXES
    nginx = (ROOT / "ops" / "nginx.conf").read_text()
    block = re.search(r"map \$http_x_request_id \$scan_request_id \{(.*?)\}", nginx, re.DOTALL).group(1)
    pattern = re.search(r'"~\*([^"]+)"\s+req_\$request_id;', block).group(1)
    assert not pattern.startswith("^")
    assert set(re.fullmatch(r"\((.*)\)", pattern).group(1).split("|")) == set(SECRET_PREFIXES)


@pytest.fixture
def gunicorn(app, simulator, tmp_path):
    """gunicorn as shipped (gunicorn.conf.py), with its access log on (which LOG_FORMAT=json leaves
    to the app's own lines), logs kept in files."""
    port = closed_port()
    env = service_env(app, simulator.url, tmp_path / "instance", GUNICORN_BIND=f"127.0.0.1:{port}",
                      WEB_CONCURRENCY=1, GUNICORN_THREADS=4, LOG_LEVEL="DEBUG", LOG_FORMAT="text")
    access, errors = tmp_path / "gunicorn-access.log", tmp_path / "gunicorn.log"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen([str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "--access-logfile",
                                 str(access), "wsgi:app"], cwd=ROOT, env=env, stdout=stderr, stderr=stderr)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok, 30, "gunicorn")
        yield f"127.0.0.1:{port}", access, errors
    finally:
        proc.terminate()
        proc.wait(20)


def curl(url: str, *args: str, http2: bool, body: bytes | None = None) -> tuple[int, dict, str]:
    """curl's answer: status, headers (lower-case names), body. ``body`` is sent on stdin."""
    if body is not None:
        args = (*args, "--data-binary", "@-")
    out = subprocess.run([CURL, "-sk", "--http2" if http2 else "--http1.1", "-D", "-", "--max-time", "20",
                          *args, url], input=body, capture_output=True, timeout=30).stdout.decode("latin-1")
    head, _, body = out.partition("\r\n\r\n")
    while head.startswith("HTTP/1.1 100"):  # an interim answer
        head, _, body = body.partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def raw(port: int, request: bytes, tls: bool = True) -> tuple[int, dict, str]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        sock = context.wrap_socket(sock, server_hostname="localhost")
    with sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.decode("latin-1").partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def envelope(answer: tuple[int, dict, str], status: int, error: str, what: str) -> dict:
    got, headers, text = answer
    assert got == status, (what, got, text[:300])
    assert headers.get("content-type") == "application/json", (what, headers, text[:300])
    body = json.loads(text)
    assert body["ok"] is False and body["error"] == error and body["message"], (what, body)
    assert body["request_id"] == headers["x-request-id"] and body["request_id"].startswith("req_"), (what, body)
    return body


MANY_HEADERS = [arg for i in range(101) for arg in ("-H", f"X-Header-{i}: {i}")]
# Characters HPACK's Huffman code cannot shorten much: the field nginx receives is about as long.
RANDOM_24K = base64.b64encode(random.Random(7).randbytes(18 * 1024)).decode()
# name: (URL suffix, curl arguments, body, status, error code)
REFUSALS = {
    "a 4.5 KB URI (gunicorn's limit is 4094)": ("/api/v1/" + "a" * 4500, [], None, 414, "uri_too_long"),
    "a 9 KB URI": ("/" + "a" * 9000, [], None, 414, "uri_too_long"),
    "101 headers": ("/healthz", MANY_HEADERS, None, 431, "headers_too_large"),
    "a 9 KB header": ("/healthz", ["-H", "X-Big: " + "b" * 9000], None, 431, "headers_too_large"),
    # Over HTTP/2, nginx ended the connection without an answer for these (a field over its 8k buffer).
    "a 16 KB header": ("/healthz", ["-H", "X-Big: " + "b" * 16 * 1024], None, 431, "headers_too_large"),
    "a 24 KB header of random characters": ("/api/v1/scans", ["-H", "X-Big: " + RANDOM_24K], None, 431,
                                            "headers_too_large"),
    "a body over 256 KiB": ("/api/v1/scan", ["-H", "Content-Type: application/json"], b"x" * (256 * 1024 + 1),
                            413, "payload_too_large"),
    "an unknown path": ("/no/such/path", [], None, 404, "not_found"),
    "/metrics": ("/metrics", [], None, 404, "not_found"),
    "nginx's internal error location": ("/__nginx_error", [], None, 404, "not_found"),
}


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
@pytest.mark.processes
@pytest.mark.skipif(NGINX is None or CURL is None, reason="nginx and curl are not installed")
def test_every_refusal_over_http1_and_http2_is_the_json_envelope(gunicorn, http2):
    upstream, _, _ = gunicorn
    server = check_slow_clients.Nginx(upstream, NGINX)
    base = f"https://127.0.0.1:{server.https_port}"
    try:
        for name, (path, args, body, status, error) in REFUSALS.items():
            envelope(curl(base + path, *args, http2=http2, body=body), status, error, name)
        # A request id holding a key is replaced in nginx's own answers and the app's.
        for path in ("/no/such/path", "/" + "a" * 9000):
            for secret_id in SECRET_IDS:
                answer = curl(base + path, "-H", f"X-Request-Id: {secret_id}", http2=http2)
                assert "abcdef0123456789" not in json.dumps(answer).lower(), answer
                assert answer[1]["x-request-id"].startswith("req_"), answer
        # 128 characters, the longest id kept, by the app and by nginx's own answers (its internal error location).
        longest = "order-42." + "x" * 119
        for path in ("/no/such/path", "/__nginx_error"):
            kept = curl(base + path, "-H", f"X-Request-Id: {longest}", http2=http2)
            assert json.loads(kept[2])["request_id"] == longest == kept[1]["x-request-id"]
            made = curl(base + path, "-H", f"X-Request-Id: {longest}x", http2=http2)
            assert json.loads(made[2])["request_id"] == made[1]["x-request-id"] != longest + "x"
        assert "abcdef0123456789" not in server.logs().lower()
    finally:
        server.stop()
    assert "abcdef0123456789" not in gunicorn[2].read_text().lower()


@pytest.mark.processes
@pytest.mark.skipif(NGINX is None or CURL is None, reason="nginx and curl are not installed")
def test_what_only_http1_can_send_is_refused_in_json(gunicorn):
    upstream, _, _ = gunicorn
    server = check_slow_clients.Nginx(upstream, NGINX)
    try:
        port = server.https_port
        envelope(raw(port, b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"), 505, "http_version_not_supported",
                 "HTTP/9.9")
        envelope(raw(port, b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "invalid_request", "bad method")
        envelope(raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", tls=False), 400, "invalid_request",
                 "plain HTTP to the TLS port")
        envelope(raw(server.http_port, b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", tls=False), 400, "invalid_request",
                 "a bad request on port 80")
        envelope(raw(server.http_port, b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", tls=False), 505,
                 "http_version_not_supported", "HTTP/9.9 on port 80")
        # Plain HTTP is redirected to HTTPS, with the JSON envelope as its body (it was nginx's HTML page).
        redirect = raw(server.http_port, b"POST /api/v1/scan?x=1 HTTP/1.1\r\nHost: api.example.com\r\n"
                       b"X-Request-Id: a.whsec_AbCdEf0123456789\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                       tls=False)
        body = envelope(redirect, 308, "https_required", "plain HTTP")
        assert redirect[1]["location"] == "https://api.example.com/api/v1/scan?x=1"
        assert "https" in body["message"] and "whsec" not in json.dumps(redirect).lower()
    finally:
        server.stop()


@pytest.mark.processes
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_what_gunicorn_refuses_itself_is_the_json_envelope(gunicorn):
    """gunicorn's own refusals were HTML pages: reached directly (or past nginx) they are JSON,
    and its log never quotes the query string a refused request line carried."""
    upstream, _, errors = gunicorn
    port = int(upstream.rsplit(":", 1)[1])
    cases = {
        "HTTP/9.9": (b"GET /healthz?target=" + TARGET.encode() + b" HTTP/9.9\r\nHost: x\r\n\r\n", 400,
                     "invalid_request"),
        "a malformed request line": (b"GET /healthz?target=" + TARGET.encode() + b" HTTP/1.1 x\r\nHost: x\r\n\r\n",
                                     400, "invalid_request"),
        "a 5 KB request line": (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
        "101 headers": (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
                        431, "headers_too_large"),
        "a 9 KB header": (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431,
                          "headers_too_large"),
    }
    for name, (request, status, error) in cases.items():
        envelope(raw(port, request, tls=False), status, error, name)
    wait_until(lambda: "Invalid request" in errors.read_text(), 5, "gunicorn's warning")
    assert "jane" not in errors.read_text()


class SilentUpstream:
    """A server that accepts connections and never answers: an API that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        try:
            while True:
                self.held.append(self.sock.accept()[0])
        except OSError:
            pass

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.processes
@pytest.mark.skipif(NGINX is None or CURL is None, reason="nginx and curl are not installed")
@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
def test_the_api_down_or_hanging_is_a_json_502_or_504_and_the_error_log_keeps_no_query(tmp_path, http2):
    silent = SilentUpstream()
    down = check_slow_clients.Nginx(f"127.0.0.1:{closed_port()}", NGINX)
    hanging = check_slow_clients.Nginx(silent.address, NGINX, replace={"proxy_read_timeout 75s;":
                                                                      "proxy_read_timeout 1s;"})
    try:
        query = f"/api/v1/activity?target={TARGET}"
        body = envelope(curl(f"https://127.0.0.1:{down.https_port}{query}", http2=http2), 502, "service_unavailable",
                        "API down")
        assert body["message"]
        answer = curl(f"https://127.0.0.1:{hanging.https_port}{query}", http2=http2)
        envelope(answer, 504, "service_unavailable", "API hanging")
        assert answer[1]["retry-after"] == "5"
        for server in (down, hanging):
            logs = server.logs()
            assert "/api/v1/activity" in logs and "jane" not in logs, logs
    finally:
        down.stop()
        hanging.stop()
        silent.close()


@pytest.mark.processes
@pytest.mark.skipif(NGINX is None or CURL is None, reason="nginx and curl are not installed")
def test_a_target_in_the_query_string_leaves_no_trace_in_any_log(gunicorn, make_customer):
    upstream, access, errors = gunicorn
    account = make_customer()
    server = check_slow_clients.Nginx(upstream, NGINX)
    try:
        base = f"https://127.0.0.1:{server.https_port}"
        for http2 in (False, True):
            status, _, text = curl(f"{base}/api/v1/activity?target={TARGET}", "-H",
                                   f"Authorization: Bearer {account.api_key}", http2=http2)
            assert status == 200, text
            status, _, _ = curl(f"{base}/api/v1/activity?targt={TARGET}", "-H",
                                f"Authorization: Bearer {account.api_key}", http2=http2)
            assert status == 400
            assert curl(f"{base}/nowhere?target={TARGET}", "-H", f"Referer: {base}/app/activity?target={TARGET}",
                        http2=http2)[0] == 404
        nginx_log = server.logs()
    finally:
        server.stop()
    wait_until(lambda: access.read_text().count("/api/v1/activity") >= 4, 5, "gunicorn's access lines")
    assert nginx_log.count("/api/v1/activity") == 4 and "HTTP/2.0" in nginx_log
    for name, text in {"nginx": nginx_log, "gunicorn access": access.read_text(),
                       "gunicorn and app": errors.read_text()}.items():
        assert "jane" not in text and "target=" not in text, (name, text[-2000:])
    assert "app.access" in errors.read_text()  # the app did log the calls, without the query


@pytest.mark.processes
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_a_client_that_stops_sending_gets_the_json_408_or_is_disconnected():
    """nginx drops a timed-out client without an answer (reset_timedout_connection); should it ever
    answer, the answer is the JSON envelope, not its HTML page."""
    server = check_slow_clients.Nginx(f"127.0.0.1:{closed_port()}", NGINX, replace={
        "client_body_timeout 10s;": "client_body_timeout 1s;", "client_header_timeout 10s;": "client_header_timeout 1s;"})
    try:
        for request in (b"POST /api/v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
                        b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):
            try:
                answer = raw(server.https_port, request)
            except (IndexError, ValueError):  # nothing came back: disconnected
                continue
            envelope(answer, 408, "request_timeout", request[:20].decode())
    finally:
        server.stop()
