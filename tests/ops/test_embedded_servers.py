"""The embedded PostgreSQL and Redis of the development default stop with what started them.

``make run`` (``python -m app.dev``) is started for real on a temporary instance folder and
stopped each way it can be: Ctrl-C at the terminal (SIGINT to its process group), a SIGTERM
to it alone or to ``make`` alone (as a supervisor or ``timeout --foreground`` sends), a SIGKILL
of it or of ``make``. Afterwards none of its processes is left: not the embedded PostgreSQL
nor the embedded Redis, nor honcho, gunicorn, the worker or the simulator.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import requests

from simulator.procutil import free_port, wait_until
from tests.conftest import embedded_folder

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 30

pytestmark = pytest.mark.processes


def _dev_env(instance: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TEST_", "PYTEST")) and k not in ("DATABASE_URL", "REDIS_URL", "APP_ENV")}
    env.update(INSTANCE_PATH=str(instance), API_PORT=str(free_port()), HELD_PORT=str(free_port()),
               SIM_PORT=str(free_port()), PYTHONUNBUFFERED="1")
    return env


def _alive(pids) -> list[str]:
    """The processes of ``pids`` still running (a zombie waiting for its parent to reap it is gone)."""
    left = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(process.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return left


def _server_pids(instance: Path) -> dict[str, int]:
    """The embedded servers of ``instance``: PostgreSQL's postmaster and redis-server."""
    postgres = int((instance / "postgres" / "postmaster.pid").read_text().split()[0])
    registry = json.loads((instance / "redis.db.settings").read_text())
    return {"postgres": postgres, "redis-server": int(Path(registry["pidfile"]).read_text())}


def _wait_all_gone(pids, what: str) -> None:
    try:
        wait_until(lambda: not _alive(pids), STOP_SECONDS, what)
    except TimeoutError:
        raise AssertionError(f"{what}: still running: {_alive(pids)}") from None


STOPS = {
    # (what is started, whom the signal goes to, the signal)
    "ctrl-c": ("dev", "group", signal.SIGINT),
    "sigterm-to-app.dev-alone": ("dev", "process", signal.SIGTERM),
    "sigkill-of-app.dev": ("dev", "process", signal.SIGKILL),
    "sigterm-to-make-alone": ("make", "process", signal.SIGTERM),
    "sigkill-of-make": ("make", "process", signal.SIGKILL),  # app.dev's parent dies
}


@pytest.fixture
def instance_tmp():
    """A temporary folder for make run's instance (``conftest.embedded_folder``: not under pytest's own)."""
    folder = embedded_folder("make-run")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("how", list(STOPS))
def test_make_run_leaves_nothing_running_however_it_is_stopped(instance_tmp, how):
    started, target, sig = STOPS[how]
    if started == "make" and shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Not a skip: `make test` installs honcho (requirements-test.txt includes requirements-dev.txt).
    assert (Path(sys.executable).parent / "honcho").exists(), "honcho is missing: make install-test installs it"
    tmp_path = instance_tmp
    instance = tmp_path / "instance"
    env = _dev_env(instance)
    # make's own prerequisite (pip install) is taken as done: the test runs in the installed venv.
    argv = (["make", "--no-print-directory", "-o", "install", "run", f"PY={sys.executable}"] if started == "make"
            else [sys.executable, "-m", "app.dev"])
    log = open(tmp_path / "run.log", "wb")
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    everything: list[int] = []
    try:
        health = f"http://127.0.0.1:{env['API_PORT']}/healthz"
        wait_until(lambda: _answers(health), 90, "make run's API to answer /healthz")
        held = f"http://127.0.0.1:{env['HELD_PORT']}/healthz"  # the held-connection server runs too
        wait_until(lambda: _answers(held), 30, "make run's held-connection server to answer /healthz")
        servers = _server_pids(instance)
        everything += [p.pid for p in psutil.Process(process.pid).children(recursive=True)] + list(servers.values())
        assert len(_alive(servers.values())) == 2
        if target == "group":
            os.killpg(process.pid, sig)
        else:
            os.kill(process.pid, sig)
        process.wait(STOP_SECONDS)
        _wait_all_gone(everything, f"after {how}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        for left in _alive(everything):  # a failed run leaves nothing behind either
            os.kill(int(left.split()[0]), signal.SIGKILL)
        log.close()
    output = (tmp_path / "run.log").read_text(errors="replace")
    assert "Traceback" not in output, output[-3000:]
    assert "Demo customer: cus_" in output and "password: " in output, output[-3000:]  # a fresh instance
    assert f"127.0.0.1:{env['HELD_PORT']}/api/v1/scan?wait=60" in output


def _requirements(name: str) -> set[str]:
    """The packages a requirements file pins, those of the files it includes (``-r``) too."""
    names: set[str] = set()
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            names |= _requirements(line[3:].strip())
        elif line:
            names.add(line.split("==")[0].strip().lower())
    return names


def test_make_test_installs_what_the_make_run_tests_need():
    """A fresh clone's `make test` skipped the tests above ("honcho is missing: make run installs it"):
    its requirements now hold make run's, and its install stamp is redone when they change."""
    assert _requirements("requirements-dev.txt") <= _requirements("requirements-test.txt")
    assert "honcho" in _requirements("requirements-test.txt")
    stamp = next(line for line in (ROOT / "Makefile").read_text().splitlines()
                 if line.startswith("$(VENV)/.installed-test:"))
    assert "requirements-dev.txt" in stamp


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


OWNER = textwrap.dedent("""
    import sys, time
    from app.plumbing import embedded
    print(embedded.postgres_url(sys.argv[1]), embedded.redis_client(sys.argv[1]).socket_file, flush=True)
    time.sleep(600)
""")
USER = textwrap.dedent("""
    import sys
    from app.plumbing import embedded
    url = embedded.postgres_url(sys.argv[1])
    embedded.redis_client(sys.argv[1]).set("seen", "1")
    import psycopg2
    psycopg2.connect(url).close()
""")


def test_a_process_that_finds_the_servers_running_uses_them_and_leaves_them_to_their_owner(instance_tmp):
    tmp_path = instance_tmp
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                             start_new_session=True)
    try:
        owner.stdout.readline()
        servers = _server_pids(tmp_path)
        # The operator CLI while make run runs: it finds both servers, uses them and exits.
        # (Had it taken them for its own, its exit would have waited for them to stop.)
        subprocess.run([sys.executable, "-c", USER, str(tmp_path)], cwd=ROOT, check=True, timeout=60)
        assert len(_alive(servers.values())) == 2, "a process that only found the servers stopped them"
        owner.kill()
        owner.wait(10)
        _wait_all_gone(servers.values(), "after the owner's SIGKILL")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
