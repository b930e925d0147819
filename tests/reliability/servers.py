"""Real server processes for reliability and security tests.

- ``Gunicorn``: the API as production runs it (``gunicorn --config gunicorn.conf.py wsgi:app``,
  several workers x threads) on 127.0.0.1, against the test session's database and Redis.
- ``RedisServer``: a dedicated ``redis-server`` (no persistence) that a test may stop, kill and
  restart without touching the session's Redis.
- ``TcpProxy``: a TCP forwarder a test can cut (every connection dropped, new ones refused)
  and restore, to make a network dependency unreachable mid-run.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import requests

from simulator.procutil import free_port, wait_until
from tests.processes import real_clock_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class Gunicorn:
    """``gunicorn --config gunicorn.conf.py wsgi:app`` as a subprocess; ``.url``, ``.log_text()``."""

    def __init__(self, env: dict, log_path: Path, workers: int = 3, threads: int = 8, held: bool = False):
        """``held``: the held-connection server (``gunicorn.held.conf.py``: gevent, ``workers`` processes)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.workers, self.threads = workers, threads
        env = dict(env, BIND=f"127.0.0.1:{self.port}", WEB_CONCURRENCY=str(workers),
                   GUNICORN_THREADS=str(threads), HELD_BIND=f"127.0.0.1:{self.port}", HELD_WORKERS=str(workers))
        self._log = open(log_path, "wb")
        config = "gunicorn.held.conf.py" if held else "gunicorn.conf.py"
        self.proc = subprocess.Popen([str(BIN / "gunicorn"), "--config", config, "wsgi:app"],
                                     cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_until(lambda: requests.get(f"{self.url}/readyz", timeout=2).status_code == 200, 60,
                       f"gunicorn on {self.url}\n")
        except AssertionError:
            self.stop()
            raise AssertionError(f"gunicorn did not become ready:\n{self.log_text()[-3000:]}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """``sig``: SIGTERM, gunicorn's graceful stop (held streams get ``graceful_timeout``), or
        SIGQUIT, its quick one (every connection cut at once)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class RedisServer:
    """A dedicated ``redis-server`` on a free port, without persistence: a restart loses everything."""

    def __init__(self, workdir: Path, port: int | None = None):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not on PATH")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> RedisServer:
        self._log = open(self.workdir / f"redis-{self.starts}.log", "wb")
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=real_clock_env())
        self.starts += 1

        def answers():
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        wait_until(answers, 10, f"redis-server on port {self.port}", interval=0.05)
        return self

    def kill(self, sig=signal.SIGKILL) -> None:
        """Stop it the hard way: no shutdown handshake, every connection dropped."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` (host and port, or a unix socket's path);
    ``cut()`` drops every connection and refuses new ones (the dependency is unreachable),
    ``restore()`` accepts again."""

    def __init__(self, upstream: tuple[str, int] | str):
        self.upstream = upstream
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.connections = 0
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.settimeout(5)
            server.connect(self.upstream)
            return server
        return socket.create_connection(self.upstream, timeout=5)

    def _accept(self, listener) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = self._connect()
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._conns += [client, server]
                self.connections += 1
            link: dict = {}  # what the two directions of one connection know of each other
            for a, b, to_server in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, to_server, link), daemon=True).start()

    def forward(self, data: bytes, to_server: bool, link: dict) -> bytes | None:
        """What to send on of ``data``; None cuts this connection (both ways). Subclasses inject faults."""
        return data

    def _pipe(self, src, dst, to_server: bool, link: dict) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                data = self.forward(data, to_server, link)
                if data is None:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        if self._listener is not None:
            _close_listener(self._listener)
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.cut()


class CommitCutter(TcpProxy):
    """A proxy to PostgreSQL that cuts the connection at the next COMMIT once ``arm(when)`` is
    called: ``"before"`` the COMMIT reaches the server (it rolls back), or ``"after"`` the server
    answered it (it committed; the answer is lost on the way back)."""

    COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # the simple-query message psycopg2 sends

    def __init__(self, upstream):
        self.armed: str | None = None
        self.cuts = 0
        super().__init__(upstream)

    def arm(self, when: str) -> None:
        assert when in ("before", "after")
        self.armed = when

    def forward(self, data, to_server, link):
        with self._lock:
            if to_server and self.armed and self.COMMIT in data:
                when, self.armed = self.armed, None
                self.cuts += 1
                if when == "before":
                    return None
                link["lose_answer"] = True
                return data
            if not to_server and link.pop("lose_answer", False):
                return None  # the COMMIT's answer: the server has committed
        return data


class RawServer:
    """A TCP server on 127.0.0.1 whose ``behaviour(conn)`` does anything with each connection:
    hang, trickle, reset, answer nonsense. ``.url``, ``.accepted`` (connections seen)."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn) -> None:
        try:
            self.behaviour(conn, self.stopped)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def stop(self) -> None:
        self.stopped.set()
        _close_listener(self.listener)


def _close_listener(listener) -> None:
    """Stop listening now: a bare close() leaves a thread blocked in accept() still accepting."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    listener.close()


def read_request_head(conn, limit: int = 65536) -> bytes:
    """Read up to the end of an HTTP request's headers (the body, if any, is left unread)."""
    data = b""
    conn.settimeout(10)
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data
