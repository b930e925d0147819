"""The real stack as subprocesses on 127.0.0.1: gunicorn (API and baseline), workers and
the simulator, on the machine's PostgreSQL (database ``bench``) and Redis (db 11).

Every process is started in its own session (process group), so stopping it also
stops what it forked (gunicorn's workers, RQ's scheduler); ``Stack.close`` stops all
of them, and runs at exit and on SIGINT/SIGTERM. Nothing here ever talks to a host
other than 127.0.0.1.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import redis
import requests

from simulator.procutil import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
# BENCH_PG_PORT: a PostgreSQL server of the bench's own (say one with pg_stat_statements loaded, whose
# whole CPU is then the bench's), instead of the machine's on 5432.
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_ADMIN_DSN = f"host={HOST} port={PG_PORT} user=postgres dbname=postgres"
# Another bench on the same machine (a helper's, a colleague's) keeps out of this one's way with
# its own database and Redis db: every phase drops the schema and flushes the db.
DATABASE = os.environ.get("BENCH_DATABASE", "bench")
if not DATABASE.replace("_", "").isalnum():
    raise SystemExit(f"BENCH_DATABASE must be a plain name, not {DATABASE!r}")
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "11"))
REDIS_PORT = int(os.environ.get("BENCH_REDIS_PORT", "6379"))  # a Redis server of the run's own
PG_DSN = f"host={HOST} port={PG_PORT} user=postgres dbname={DATABASE}"
DATABASE_URL = f"postgresql://postgres@{HOST}:{PG_PORT}/{DATABASE}"
REDIS_URL = f"redis://{HOST}:{REDIS_PORT}/{REDIS_DB}"
ENGINE_TOKEN = "bench-engine-token"
# Fresh per run: production refuses keys published in the repository.
SECRET_KEY = "bench-" + __import__("secrets").token_urlsafe(32)


def local_only(url: str) -> str:
    """Refuse any URL that is not on 127.0.0.1: the harness loads nothing else."""
    host = urlsplit(url).hostname
    if host != HOST:
        raise ValueError(f"the benchmark only targets {HOST}, not {url!r}")
    return url


class Proc:
    """One subprocess in its own process group, its output in a log file."""

    def __init__(self, name: str, cmd: list[str], env: dict, log_path: Path):
        self.name, self.cmd, self.env, self.log_path = name, cmd, env, log_path
        self.log = open(log_path, "ab")
        self.popen = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group (a warm shutdown for RQ and gunicorn), SIGKILL when it lingers."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait(5)
        # Whatever the leader forked and left behind in its group goes too.
        self._signal(signal.SIGKILL)
        self.log.close()

    def _signal(self, sig) -> None:
        try:
            os.killpg(self.pid, sig)  # the group this harness created for the process, by its id
        except (ProcessLookupError, PermissionError):
            pass

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Stack:
    def __init__(self, logdir: Path, web_workers: int, web_threads: int, log_level: str = "INFO"):
        self.logdir = logdir
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.web_workers, self.web_threads, self.log_level = web_workers, web_threads, log_level
        self.procs: list[Proc] = []
        self._closed = False
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    # --- environment ---------------------------------------------------------------

    def env(self, app_env: str = "production", **extra) -> dict:
        env = dict(os.environ)
        for name in ("DATABASE_URL", "REDIS_URL", "ENGINE_URL", "PUBLIC_BASE_URL", "PROMETHEUS_MULTIPROC_DIR",
                     "SIM_TIME_SCALE", "WEB_CONCURRENCY", "GUNICORN_THREADS", "BIND"):
            env.pop(name, None)
        env.update(APP_ENV=app_env, SECRET_KEY=SECRET_KEY, DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL,
                   ENGINE_TOKEN=ENGINE_TOKEN, LOG_FORMAT="json", LOG_LEVEL=self.log_level, PYTHONUNBUFFERED="1",
                   PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start(self, name: str, cmd: list[str], env: dict) -> Proc:
        proc = Proc(name, cmd, env, self.logdir / f"{name}.log")
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop_all()

    # --- PostgreSQL and Redis --------------------------------------------------------

    def _admin(self, *statements: str) -> None:
        """Create database ``bench`` (``BENCH_DATABASE``) if missing, then run ``statements`` as the administrator."""
        admin = psycopg2.connect(PG_ADMIN_DSN)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {DATABASE}")
            for statement in statements:
                cur.execute(statement)
        admin.close()

    def reset_database(self) -> None:
        """Create database ``bench`` if missing, empty its schema, then ``flask db upgrade``."""
        self._admin()
        conn = psycopg2.connect(PG_DSN)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("DROP SCHEMA IF EXISTS floor CASCADE")  # the floor app's, if an HTTP phase left it
            cur.execute("DROP SCHEMA IF EXISTS public CASCADE")
            cur.execute("CREATE SCHEMA public")
        conn.close()
        self.cli("db", "upgrade")

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(REDIS_URL)

    def flush_redis(self) -> None:
        """Empty db 11 and leave a canary, whose absence later shows another process flushed it."""
        conn = self.redis()
        conn.flushdb()
        conn.set("bench:canary", "1")

    def set_async_commit(self, on: bool) -> None:
        """An experiment's knob: ``synchronous_commit`` of database ``bench`` (new connections)."""
        self._admin(f"ALTER DATABASE {DATABASE} SET synchronous_commit = off" if on
                    else f"ALTER DATABASE {DATABASE} RESET synchronous_commit")

    def sql(self, query: str, args=None, dsn: str = PG_DSN):
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    # --- the operator CLI -------------------------------------------------------------

    def cli(self, *args: str) -> dict:
        """``flask --app wsgi ARGS --json`` (development mode: it lets a key's webhook go to 127.0.0.1)."""
        out = subprocess.run([str(BIN / "flask"), "--app", "wsgi", *args, "--json"], cwd=ROOT,
                             env=self.env("development", ENGINE_URL=f"http://{HOST}:9"),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"flask {' '.join(args)} failed: {out.stderr[-2000:]}{out.stdout[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def customers(self, count: int, prefix: str, webhook_url: str | None = None,
                  webhook_secret: str | None = None, tier: str = "enterprise") -> list[tuple[str, str]]:
        """``count`` customers (enterprise unless ``tier``) with huge credits and limit overrides (no
        402/429 can distort a figure), a key each: ``[(customer_id, api_key)]`` (``bench.accounts``)."""
        cmd = [str(BIN / "python"), "-m", "bench.accounts", str(count), prefix, "--tier", tier]
        if webhook_url:
            cmd += ["--webhook-url", local_only(webhook_url), "--webhook-secret", webhook_secret]
        out = subprocess.run(cmd, cwd=ROOT, env=self.env("development", ENGINE_URL=f"http://{HOST}:9"),
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"bench.accounts failed: {out.stderr[-2000:]}")
        return [(a["customer_id"], a["api_key"]) for a in json.loads(out.stdout.strip().splitlines()[-1])]

    def customer(self, name: str, webhook_url: str | None = None, webhook_secret: str | None = None):
        return self.customers(1, name, webhook_url, webhook_secret)[0]

    # --- processes ----------------------------------------------------------------------

    def start_simulator(self, time_scale: float, name: str = "simulator", **extra) -> str:
        port = free_port()
        proc = self.start(name, [str(BIN / "python"), "-m", "simulator", "--host", HOST, "--port", str(port),
                                 "--time-scale", repr(time_scale)], self.env(**extra))
        url = f"http://{HOST}:{port}"
        self._ready(proc, lambda: requests.get(f"{url}/_sim/engine/mode", timeout=1).ok, 30)
        return url

    def _gunicorn(self, name: str, app: str, env: dict, port: int | None = None) -> tuple[int, Proc]:
        port = port or free_port()
        env = dict(env, BIND=f"{HOST}:{port}", WEB_CONCURRENCY=self.web_workers, GUNICORN_THREADS=self.web_threads,
                   PUBLIC_BASE_URL=f"http://{HOST}:{port}")  # production requires it
        proc = self.start(name, [str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", app],
                          {k: str(v) for k, v in env.items()})
        return port, proc

    def start_api(self, engine_url: str, name: str = "api", callback_secret: str | None = None,
                  **extra) -> tuple[str, Proc]:
        """The API; with ``callback_secret``, it takes the engine's callbacks (E7) on its own
        address (``ENGINE_CALLBACK_URL``, ``ENGINE_CALLBACK_SECRET``)."""
        port = free_port()
        url = f"http://{HOST}:{port}"
        if callback_secret:
            extra.update(ENGINE_CALLBACK_URL=self.callback_url(url), ENGINE_CALLBACK_SECRET=callback_secret)
        port_env = self.env("production", ENGINE_URL=local_only(engine_url), **extra)
        port, proc = self._gunicorn(name, "wsgi:app", port_env, port)
        self._ready(proc, lambda: requests.get(f"{url}/readyz", timeout=2).status_code == 200, 60)
        return url, proc

    def start_held(self, engine_url: str, workers: int, name: str = "held") -> tuple[str, Proc]:
        """The held-connection server (``gunicorn.held.conf.py``: gevent) of the same application."""
        port = free_port()
        env = self.env("production", ENGINE_URL=local_only(engine_url), HELD_BIND=f"{HOST}:{port}",
                       HELD_WORKERS=workers, PUBLIC_BASE_URL=f"http://{HOST}:{port}")
        proc = self.start(name, [str(BIN / "gunicorn"), "--config", "gunicorn.held.conf.py", "wsgi:app"], env)
        url = f"http://{HOST}:{port}"
        self._ready(proc, lambda: requests.get(f"{url}/readyz", timeout=2).status_code == 200, 60)
        return url, proc

    @staticmethod
    def callback_url(api_url: str) -> str:
        return f"{local_only(api_url)}/engine/v1/callbacks"

    def start_engine(self, time_scale: float, name: str = "engine") -> str:
        """The bench's engine stand-in (``bench.engine_app``): E1 submissions only, several processes."""
        port = free_port()
        env = self.env("production", BIND=f"{HOST}:{port}", BENCH_ENGINE_TIME_SCALE=repr(time_scale))
        proc = self.start(name, [str(BIN / "gunicorn"), "--config", "bench/engine_gunicorn.py", "bench.engine_app:app"],
                          env)
        url = f"http://{HOST}:{port}"
        self._ready(proc, lambda: requests.get(f"{url}/health", timeout=1).ok, 30)
        return url

    def start_floor(self, engine_url: str, name: str = "floor", app: str = "bench.floor_app:app") -> tuple[str, Proc]:
        """The floor app (``bench.floor_app``, or ``app``: ``bench.floor_observed``) under the API's
        gunicorn settings, on schema ``floor``."""
        env = self.env("production", ENGINE_URL=local_only(engine_url), FLOOR_DSN=PG_DSN)
        port, proc = self._gunicorn(name, app, env)
        url = f"http://{HOST}:{port}"
        self._ready(proc, lambda: requests.get(f"{url}/floor/ready", timeout=2).ok, 60)
        return url, proc

    def start_baseline(self) -> tuple[str, Proc]:
        # Production settings need an engine URL, which the baseline never calls.
        port, proc = self._gunicorn("baseline", "bench.baseline:app", self.env("production", ENGINE_URL=f"http://{HOST}:9"))
        url = f"http://{HOST}:{port}"
        self._ready(proc, lambda: requests.get(f"{url}/json", timeout=2).ok, 60)
        return url, proc

    def start_worker(self, engine_url: str, name: str, queues: str = "engine,webhooks", burst: bool = False,
                     jobs_log: Path | None = None, looks_log: Path | None = None, **extra) -> Proc:
        """``python -m workers`` through ``bench.worker``, which only adds a per-job timing log.

        Development mode: the SSRF guard of production refuses plain-http webhooks to
        127.0.0.1, where the simulator's receiver listens. Nothing else differs.
        """
        cmd = [str(BIN / "python"), "-m", "bench.worker", "--queues", queues, "--name", name]
        if burst:
            cmd.append("--burst")
        if jobs_log is not None:
            cmd += ["--jobs-log", str(jobs_log)]
        if looks_log is not None:
            cmd += ["--looks-log", str(looks_log)]
        return self.start(name, cmd, self.env("development", ENGINE_URL=local_only(engine_url), **extra))

    def _ready(self, proc: Proc, check, timeout: float) -> None:
        def ready():
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            return check()
        wait_until(ready, timeout, f"{proc.name} to be ready")


def jobs_from_log(path: Path) -> list[dict]:
    """The rows of a worker's job log (``bench.worker --jobs-log``): kind, start, and its times in ms."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        kind, started, exec_ms, func_ms, wait_ms = line.split(",")
        rows.append({"kind": kind, "started": float(started), "exec_ms": float(exec_ms),
                     "func_ms": float(func_ms), "wait_ms": float(wait_ms)})
    return rows
