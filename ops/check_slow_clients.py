"""Show that slow clients no longer stall the API behind nginx (ops/nginx.conf).

    python ops/check_slow_clients.py --upstream 127.0.0.1:8000 [--attackers 10] [--seconds 20]
                                     [--http-port 9080 --https-port 9443]

Runs nginx (from PATH or --nginx) with ops/nginx.conf in a temporary directory on free
loopback ports (or those of --http-port and --https-port: a firewall, a container's forwarded
ports), with a throw-away self-signed certificate, in front of the API at
--upstream. Then, twice (straight at gunicorn, then through nginx), it opens
``--attackers`` sockets that each send a request to /healthz with a chunked body that
never ends, and meanwhile times a normal ``GET /healthz`` every 0.25 s. It prints one
JSON object with the figures; exit status 1 when the API stalled behind nginx
(a probe over --max-ms or failing).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether nothing listens on loopback ``port`` (nginx would otherwise fail to start, or, with
    another server there, the attack would measure that one)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def site_config(upstream: str, http_port: int, https_port: int, cert: Path, key: Path, log_dir: Path,
                replace: dict[str, str] | None = None, held: str | None = None) -> str:
    """ops/nginx.conf with this run's upstream (and held-connection server: ``held``, else the
    same upstream), loopback ports, certificate and log directory (HTTP/2 kept), and any other
    ``replace`` of one text by another (e.g. a shorter timeout)."""
    text = (HERE / "nginx.conf").read_text()
    for old, new in (replace or {}).items():
        if old not in text:
            raise ValueError(f"not in ops/nginx.conf: {old!r}")
        text = text.replace(old, new)
    text = text.replace("/var/log/nginx/", f"{log_dir}/")
    text = text.replace("server 127.0.0.1:8000;", f"server {upstream};")
    text = text.replace("server 127.0.0.1:8001;", f"server {held or upstream};")
    text = re.sub(r"listen \[::\]:\d+[^;]*;\n", "", text)
    text = text.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    text = re.sub(r"listen 443 ssl( http2)?;", f"listen 127.0.0.1:{https_port} ssl\\1;", text)
    text = text.replace("/etc/ssl/REPLACE_ME/fullchain.pem", str(cert))
    return text.replace("/etc/ssl/REPLACE_ME/privkey.pem", str(key))


class Nginx:
    def __init__(self, upstream: str, binary: str = "nginx", replace: dict[str, str] | None = None,
                 held: str | None = None, http_port: int | None = None, https_port: int | None = None):
        self.http_port, self.https_port = http_port or free_port(), https_port or free_port()
        for port in (self.http_port, self.https_port):
            if not port_free(port):
                raise RuntimeError(f"port {port} is in use: choose another (--http-port, --https-port)")
        self.dir = Path(tempfile.mkdtemp(prefix="scan-api-nginx-"))
        cert, key = self_signed(self.dir)
        (self.dir / "site.conf").write_text(site_config(upstream, self.http_port, self.https_port, cert, key,
                                                        self.dir, replace, held))
        temp = self.dir / "tmp"
        temp.mkdir()
        (self.dir / "nginx.conf").write_text(f"""
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {self.dir}/site.conf;
}}
""")
        self.proc = subprocess.Popen([binary, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"),
                                      "-g", "daemon off;"], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx did not start: {self.proc.stderr.read().strip()}")
            try:
                socket.create_connection(("127.0.0.1", self.https_port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("nginx did not start listening within 10 s")

    def logs(self) -> str:
        """The site's access and error logs, read after a graceful shutdown: nginx writes a request's
        access line when its connection ends, which under HTTP/2 can be after the client has its answer."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return "".join((self.dir / name).read_text() for name in ("scan-api.access.log", "scan-api.error.log")
                       if (self.dir / name).exists())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _connect(host: str, port: int, tls: bool, timeout: float):
    sock = socket.create_connection((host, port), timeout=timeout)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        sock = context.wrap_socket(sock, server_hostname="localhost")
    return sock


def attacker(host, port, tls, stop: threading.Event, seconds: float):
    """A request whose chunked body starts and never ends; the socket stays open."""
    try:
        sock = _connect(host, port, tls, seconds + 5)
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/json\r\n\r\n5\r\n{\"a\":")
        stop.wait(seconds)
        sock.close()
    except OSError:
        pass


def probe(host, port, tls, timeout: float) -> float | None:
    """Milliseconds for a normal GET /healthz, or None when it failed or timed out."""
    started = time.monotonic()
    try:
        with _connect(host, port, tls, timeout) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        if not data.startswith(b"HTTP/1.1 200"):
            return None
    except OSError:
        return None
    return (time.monotonic() - started) * 1000


def attack(host, port, tls, attackers: int, seconds: float, probe_timeout: float = 5.0) -> dict:
    stop = threading.Event()
    threads = [threading.Thread(target=attacker, args=(host, port, tls, stop, seconds), daemon=True)
               for _ in range(attackers)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # the attackers' requests are in
    samples, ends = [], time.monotonic() + seconds - 1
    while time.monotonic() < ends:
        samples.append(probe(host, port, tls, probe_timeout))
        time.sleep(0.25)
    stop.set()
    for thread in threads:
        thread.join(5)
    answered = [s for s in samples if s is not None]
    return {"probes": len(samples), "failed_or_timed_out": len(samples) - len(answered),
            "max_ms": round(max(answered), 1) if answered else None,
            "median_ms": round(sorted(answered)[len(answered) // 2], 1) if answered else None}


def run(upstream: str, attackers: int = 10, seconds: float = 20, nginx_binary: str = "nginx",
        http_port: int | None = None, https_port: int | None = None) -> dict:
    """The attack straight at ``upstream``, then through nginx listening on ``http_port`` and
    ``https_port`` (default: free ports)."""
    host, port = upstream.rsplit(":", 1)
    direct = attack(host, int(port), False, attackers, seconds)
    time.sleep(2)
    server = Nginx(upstream, nginx_binary, http_port=http_port, https_port=https_port)
    try:
        proxied = attack("127.0.0.1", server.https_port, True, attackers, seconds)
    finally:
        server.stop()
    return {"attackers": attackers, "seconds": seconds, "direct_to_gunicorn": direct, "behind_nginx": proxied,
            "nginx_ports": {"http": server.http_port, "https": server.https_port}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", default=os.environ.get("GUNICORN_BIND", "127.0.0.1:8000"))
    parser.add_argument("--attackers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--max-ms", type=float, default=1000, help="slowest acceptable probe behind nginx")
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    parser.add_argument("--http-port", type=_port, default=None, metavar="PORT",
                        help="nginx's plain HTTP port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--https-port", type=_port, default=None, metavar="PORT",
                        help="nginx's HTTPS port on 127.0.0.1, the one attacked (default: a free one)")
    args = parser.parse_args(argv)
    if not os.path.exists(args.nginx):
        print("error: nginx is not installed (apt-get install -y nginx)", file=sys.stderr)
        return 2
    if args.http_port is not None and args.http_port == args.https_port:
        parser.error("--http-port and --https-port must differ")
    try:
        report = run(args.upstream, args.attackers, args.seconds, args.nginx, args.http_port, args.https_port)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    behind = report["behind_nginx"]
    return 0 if behind["failed_or_timed_out"] == 0 and (behind["max_ms"] or 0) <= args.max_ms else 1


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)")
    return port


if __name__ == "__main__":
    raise SystemExit(main())
