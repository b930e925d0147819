"""Debian's PgBouncer in transaction mode in front of a test database (D19: ``DATABASE_URL`` may
name a pooler in transaction mode, so no statement or session state may outlive a transaction).

``PgBouncer(database_url)`` starts ``pgbouncer`` on a free loopback port with ``pool_mode =
transaction``, a small server pool (so that the clients' transactions land on server connections
other transactions used before), and password authentication from a generated userlist; ``url``
is the URL to give the service, ``admin_url`` that of its console. Used by the ``pgbouncer_url``
fixture (``tests/ops/test_pgbouncer.py``), and as a command that runs another one with
``TEST_DATABASE_URL`` pointing at a PgBouncer in front of ``TEST_DATABASE_URL`` (or of an embedded
PostgreSQL it starts when that is unset)::

    python -m tests.ops.pgbouncer -- python -m pytest -q tests/api tests/scans
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
SERVER_POOL_SIZE = 4  # server connections per database and user: fewer than the service's clients


def available() -> bool:
    return Path(PGBOUNCER).exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgBouncer:
    """A ``pgbouncer`` process in front of ``database_url``, in transaction mode, until ``stop``."""

    def __init__(self, database_url: str, *, pool_size: int = SERVER_POOL_SIZE):
        upstream = urlsplit(database_url)
        self.database = unquote(upstream.path.lstrip("/")) or "postgres"
        self.user = unquote(upstream.username or "postgres")
        socket_dir = parse_qs(upstream.query).get("host", [None])[0]
        host = upstream.hostname or socket_dir or "127.0.0.1"
        # Any database name reaches the server's database of that name (``*``: the test workers'
        # own databases, tests/parallel.py), as the same user.
        server = f"host={host} port={upstream.port or 5432} user={self.user}"
        if upstream.password:
            server += f" password={unquote(upstream.password)}"
        self.password = secrets.token_urlsafe(18)
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="scan-api-pgbouncer-"))
        (self.folder / "userlist.txt").write_text(f'"{self.user}" "{self.password}"\n')
        (self.folder / "pgbouncer.ini").write_text(f"""[databases]
{self.database} = {server} dbname={self.database}
* = {server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {self.folder}/userlist.txt
admin_users = {self.user}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = {self.folder}/pgbouncer.log
""")
        command = [PGBOUNCER, str(self.folder / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root: run it as who can reach the server
            owner = pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name if socket_dir else "nobody"
            shutil.chown(self.folder, owner)
            for path in self.folder.iterdir():
                shutil.chown(path, owner)
            command[1:1] = ["-u", owner]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_listening()

    @property
    def url(self) -> str:
        return (f"postgresql://{quote(self.user)}:{quote(self.password)}@127.0.0.1:{self.port}/"
                f"{quote(self.database)}")

    @property
    def admin_url(self) -> str:
        return f"postgresql://{quote(self.user)}:{quote(self.password)}@127.0.0.1:{self.port}/pgbouncer"

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("pgbouncer did not listen within 10 s")

    def log_text(self) -> str:
        log = self.folder / "pgbouncer.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    """Run ``argv`` (after ``--``) with ``TEST_DATABASE_URL`` naming a PgBouncer in transaction
    mode in front of the test database; its exit status."""
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    if not command:
        print("usage: python -m tests.ops.pgbouncer -- <command>", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a supervisor's stop: clean up as on Ctrl-C
    upstream, folder = os.environ.get("TEST_DATABASE_URL"), None
    if not upstream:
        from app.plumbing import embedded
        folder = Path(tempfile.mkdtemp(prefix="scan-api-test-postgres-"))
        upstream = embedded.postgres_url(folder, durable=False)
    try:
        with PgBouncer(upstream, pool_size=8) as bouncer:
            print(f"PgBouncer (pool_mode=transaction) on 127.0.0.1:{bouncer.port} in front of the test database",
                  file=sys.stderr)
            # What needs a session of its own (the events listener's LISTEN) goes to the server itself.
            return subprocess.call(command, env=dict(os.environ, TEST_DATABASE_URL=bouncer.url,
                                                     TEST_DATABASE_DIRECT_URL=upstream))
    finally:
        if folder is not None:
            from app.plumbing import embedded
            embedded.stop(folder)
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
