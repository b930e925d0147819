"""The whole stack as separate processes, for the QA scenarios: ``make scenarios``.

    python -m simulator.scenarios.stack NAME|all [options]   # the same as python -m simulator scenario
    python -m simulator.scenarios.stack --serve          # start it, print the URLs, wait for Ctrl-C

Starts, each in its own process group, on free local ports (or those chosen: ``--api-port`` and
``--sim-port`` of the command line, ``SCENARIO_API_PORT`` and ``SCENARIO_SIM_PORT`` in the environment):

- the API: ``gunicorn wsgi:app`` with 2 workers x 4 threads,
- a worker: ``python -m workers``,
- the engine simulator: ``python -m simulator --port P --time-scale 0.02``,

on a temporary instance folder with an embedded PostgreSQL and an embedded Redis
(``app.plumbing.embedded``) that this script starts itself and hands over as ``DATABASE_URL`` and
``REDIS_URL=unix://...`` (they stop with it, however it ends). When
``TEST_DATABASE_URL`` / ``TEST_REDIS_URL`` are set (CI) those are used instead: the
schema of that database is dropped and recreated, and Redis gets a dedicated database
number (``SCENARIO_REDIS_DB``, default 13), flushed first. The schema comes from
``flask --app wsgi db upgrade``. Webhook retries run on a compressed schedule
(``WEBHOOK_RETRY_SCHEDULE=0,1,2``), the worker looks at scans every second and sweeps every 5 s.

Everything is torn down at the end (SIGTERM, then SIGKILL). When something failed, the
processes' logs are copied to ``artifacts/scenarios/<time>/`` and their paths printed.

The pytest plugin (``plugin.py``) starts one per session; tests use its ``scenario_stack``
fixture, or ``running_stack()`` directly::

    with running_stack() as stack:
        result = stack.run_scenario("simulator/scenarios/email_poll.yaml")
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests

from simulator.procutil import free_port
from simulator.scenarios import runner
from simulator.scenarios.operator import PROJECT_ROOT, Operator

ARTIFACTS_DIR = PROJECT_ROOT / "artifacts" / "scenarios"
DEFAULT_TIME_SCALE = 0.02
DEFAULT_REDIS_DB = 13
STACK_SETTINGS = {
    "WEBHOOK_RETRY_SCHEDULE": "0,1,2",
    "ENGINE_POLL_SECONDS": "1",
    "RECOVERY_INTERVAL_SECONDS": "5",
    "WEBHOOK_TIMEOUT_SECONDS": "5",
    # Test-mode scans (the sandbox engine) finish in 0.5 s; hang… ones time out after 1.5 s.
    "SANDBOX_SCAN_SECONDS": "0.5",
    "LOG_LEVEL": "INFO",
    "PYTHONUNBUFFERED": "1",
}


class StackError(RuntimeError):
    """The stack could not be started; the message says which part and why."""


# Where the stack listens, when it should not be on free ports chosen by the OS (a firewall, a
# port forwarded into a container): ``make scenarios SCENARIO_API_PORT=9100 SCENARIO_SIM_PORT=9700``.
PORT_SETTINGS = {"api": "SCENARIO_API_PORT", "simulator": "SCENARIO_SIM_PORT"}


def chosen_port(value, name: str) -> int | None:
    """The port given (an option's value, else the environment's ``name``), or None: a free one.
    ``StackError`` for one that is not a port number."""
    value = value if value not in (None, "") else os.environ.get(name) or None
    if value is None:
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 1 <= port <= 65535:
        raise StackError(f"{name}: {value!r} is not a port number (1 to 65535)")
    return port


def _claim_port(port: int | None, what: str) -> int:
    """``port`` when it is free now (else ``StackError`` naming it), or a free one when None."""
    if port is None:
        return free_port()
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise StackError(f"the {what}'s port {port} is not free: {exc.strerror or exc}") from None
    return port


def dedicated_redis_url(url: str, db: int | None = None) -> str:
    """``url`` with its database number replaced by the scenarios' own (not the tests')."""
    parts = urlsplit(url)
    current = parts.path.strip("/") or "0"
    wanted = db if db is not None else int(os.environ.get("SCENARIO_REDIS_DB", DEFAULT_REDIS_DB))
    if str(wanted) == current:
        wanted = wanted - 1 if wanted > 0 else wanted + 1
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
        return urlunsplit(parts._replace(query=(query + "&" if query else "") + f"db={wanted}"))
    return urlunsplit(parts._replace(path=f"/{wanted}"))


@dataclass
class Stack:
    """A running stack: its URLs, the environment its operator commands need, its processes and logs."""

    base_url: str
    sim_url: str
    env: dict
    workdir: Path
    log_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    failed: bool = False

    def operator(self) -> Operator:
        return Operator(env=self.env, cwd=PROJECT_ROOT)

    def run_config(self, **overrides) -> runner.RunConfig:
        return runner.RunConfig(base_url=self.base_url, sim_url=self.sim_url, operator=self.operator(), **overrides)

    def run_scenario(self, item, **overrides) -> runner.ScenarioResult:
        result = runner.run_scenario(item, self.run_config(**overrides))
        if not result.ok:
            self.failed = True
        return result

    def mark_failed(self) -> None:
        self.failed = True

    def dead(self) -> list[str]:
        """Processes that have exited (none should, while the stack runs)."""
        return [f"{name} (exit {p.returncode})" for name, p in self.processes.items() if p.poll() is not None]

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _base_env(overrides: dict | None) -> dict:
    # The tests' own settings must not leak into the stack's processes.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TEST_", "PYTEST", "FLASK_", "COV_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.update(STACK_SETTINGS)
    env.update(overrides or {})
    return env


def _spawn(stack: Stack, name: str, argv: list[str]) -> subprocess.Popen:
    log_path = stack.log_dir / f"{name}.log"
    log_file = open(log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
    try:
        process = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=stack.env, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log_file.close()
    stack.processes[name] = process
    stack.logs[name] = log_path
    return process


def _run_once(stack: Stack, name: str, argv: list[str], timeout: float = 120) -> None:
    log_path = stack.log_dir / f"{name}.log"
    stack.logs[name] = log_path
    with open(log_path, "ab") as log_file:
        try:
            done = subprocess.run(argv, cwd=PROJECT_ROOT, env=stack.env, stdout=log_file, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise StackError(f"{' '.join(argv[1:])} did not finish in {timeout:g}s (a database lock?):\n"
                             f"{stack.log_tail(name)}") from None
    if done.returncode != 0:
        raise StackError(f"{' '.join(argv[1:])} failed (exit {done.returncode}):\n{stack.log_tail(name)}")


def _stop(process: subprocess.Popen, grace: float = 10) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)  # the group: gunicorn's workers, RQ's scheduler
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # children that outlived their leader
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_ready(stack: Stack, timeout: float, redis_url: str) -> None:
    import redis as redis_lib
    deadline = time.monotonic() + timeout
    checks = {
        "api": lambda: requests.get(stack.base_url + "/readyz", timeout=2).status_code == 200,
        "simulator": lambda: requests.get(stack.sim_url + "/_sim/engine/mode", timeout=2).status_code == 200,
        # An RQ worker registers itself in Redis once it listens on its queues.
        "worker": lambda: redis_lib.Redis.from_url(redis_url, socket_timeout=2).scard("rq:workers") > 0,
    }
    pending = dict(checks)
    while pending:
        dead = stack.dead()
        if dead:
            name = dead[0].split()[0]
            raise StackError(f"{', '.join(dead)} exited while starting:\n{stack.log_tail(name)}")
        for name, check in list(pending.items()):
            try:
                if check():
                    del pending[name]
            except Exception:
                pass
        if not pending:
            return
        if time.monotonic() > deadline:
            raise StackError(f"not ready after {timeout:g}s: {', '.join(pending)}")
        time.sleep(0.2)


def _keep_logs(stack: Stack, artifacts_dir: Path) -> Path | None:
    target = artifacts_dir / datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path in stack.log_dir.glob("*.log"):
            shutil.copy2(path, target / path.name)
    except OSError as exc:
        print(f"stack: could not copy the logs to {target}: {exc}", file=sys.stderr)
        return None
    # Printed even when quiet: the logs of a failure are always worth pointing at.
    print(f"stack: something failed; process logs kept in {target}:", file=sys.stderr)
    for path in sorted(target.glob("*.log")):
        print(f"  {path}", file=sys.stderr)
    return target


@contextmanager
def running_stack(*, time_scale: float = DEFAULT_TIME_SCALE, startup_timeout: float = 60,
                  artifacts_dir: Path = ARTIFACTS_DIR, quiet: bool = False, env: dict | None = None,
                  use_test_services: bool = True, api_port: int | None = None, sim_port: int | None = None):
    """Start the stack, yield a ``Stack``, tear it down; keep the logs if anything failed
    (an exception, or ``stack.failed`` set by a failed scenario or ``mark_failed()``).
    ``use_test_services=False`` ignores ``TEST_DATABASE_URL``/``TEST_REDIS_URL`` (one stack
    per pytest-xdist worker: they would share, and reset, one database). ``api_port`` and
    ``sim_port``: where the API and the simulator listen (default: free ports); a port in use
    is a ``StackError`` before anything starts."""
    api_port, sim_port = _claim_port(api_port, "API"), _claim_port(sim_port, "simulator")
    if api_port == sim_port:
        raise StackError(f"the API and the simulator cannot share port {api_port}")
    workdir = Path(tempfile.mkdtemp(prefix="scan-scenarios-"))
    log_dir = workdir / "logs"
    log_dir.mkdir()
    instance = workdir / "instance"
    instance.mkdir()
    base_url, sim_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{sim_port}"
    embedded_servers = shared_redis = None
    stack = None
    say = (lambda text: None) if quiet else (lambda text: print(f"stack: {text}", file=sys.stderr, flush=True))
    try:
        database_url = os.environ.get("TEST_DATABASE_URL") if use_test_services else None
        reset_schema = bool(database_url)
        if not database_url or not (use_test_services and os.environ.get("TEST_REDIS_URL")):
            from app.plumbing import embedded
            embedded_servers = embedded
        if not database_url:
            database_url = embedded_servers.postgres_url(instance, durable=False)
        if use_test_services and os.environ.get("TEST_REDIS_URL"):
            redis_url = dedicated_redis_url(os.environ["TEST_REDIS_URL"])
            import redis as redis_lib
            shared_redis = redis_lib.Redis.from_url(redis_url, socket_timeout=5)
            shared_redis.flushdb()
        else:
            redis_url = f"unix://{embedded_servers.redis_client(instance).socket_file}"
        engine_token = secrets.token_urlsafe(16)
        stack = Stack(base_url=base_url, sim_url=sim_url, workdir=workdir, log_dir=log_dir, env=_base_env({
            "APP_ENV": "development",
            "INSTANCE_PATH": str(instance),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "ENGINE_URL": sim_url,
            "ENGINE_TOKEN": engine_token,
            "SECRET_KEY": secrets.token_urlsafe(32),
            "PUBLIC_BASE_URL": base_url,
            "SIM_TIME_SCALE": str(time_scale),
            **(env or {}),
        }))
        python = sys.executable
        say(f"starting in {workdir} (database {database_url.split('@')[-1]}, redis {redis_url})")
        if reset_schema:
            _run_once(stack, "schema-reset", [python, "-m", "simulator.scenarios.stack", "--drop-schema"])
        _run_once(stack, "db-upgrade", [python, "-m", "flask", "--app", "wsgi", "db", "upgrade"])
        _spawn(stack, "simulator", [python, "-m", "simulator", "--host", "127.0.0.1", "--port", str(sim_port),
                                    "--time-scale", str(time_scale)])
        _spawn(stack, "api", [python, "-m", "gunicorn", "--bind", f"127.0.0.1:{api_port}", "--workers", "2",
                              "--threads", "4", "--graceful-timeout", "5", "--access-logfile", "-",
                              "--error-logfile", "-", "wsgi:app"])
        _spawn(stack, "worker", [python, "-m", "workers"])
        started = time.monotonic()
        _wait_ready(stack, startup_timeout, redis_url)
        say(f"ready in {time.monotonic() - started:.1f}s: api {base_url}, simulator {sim_url}")
        yield stack
        dead = stack.dead()
        if dead:
            stack.failed = True
            print(f"stack: process(es) died while the scenarios ran: {', '.join(dead)}", file=sys.stderr)
    except Exception:
        # A failure keeps the logs; Ctrl-C or SIGTERM (KeyboardInterrupt, SystemExit) only tears down.
        if stack is not None:
            stack.failed = True
        raise
    finally:
        if stack is not None:
            for name in ("worker", "api", "simulator"):
                if name in stack.processes:
                    _stop(stack.processes[name])
        if embedded_servers is not None:
            embedded_servers.stop(instance)  # before its folder goes
        if shared_redis is not None:
            try:
                shared_redis.flushdb()  # the dedicated db: leave nothing behind
            except Exception:
                pass
        if stack is not None and stack.failed:
            _keep_logs(stack, Path(artifacts_dir))
        shutil.rmtree(workdir, ignore_errors=True)


def drop_schema() -> int:
    """Drop every table of the service in ``DATABASE_URL`` (the stack's dedicated test database only)."""
    from app import create_app
    from app.extensions import db
    from app.tables import ALL_MODELS
    create_app()
    with db.connection_context():
        db.drop_tables(list(reversed(ALL_MODELS)), safe=True, cascade=True)
    return 0


def _exit_on_sigterm() -> None:
    """Turn SIGTERM (CI cancelling, ``timeout``) into SystemExit, so the stack is torn down."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _exit_on_sigterm()
    if argv == ["--drop-schema"]:
        return drop_schema()
    if argv[:1] == ["--serve"]:
        return serve()
    # Running scenarios is pytest's job (the plugin starts the stack): the same as ``python -m simulator scenario``.
    return runner.main(argv, prog="python -m simulator.scenarios.stack")


def serve() -> int:
    """Start the stack and keep it up, for running ``python -m simulator scenario`` against it by hand."""
    try:
        with running_stack(api_port=chosen_port(None, PORT_SETTINGS["api"]),
                           sim_port=chosen_port(None, PORT_SETTINGS["simulator"])) as stack:
            # The engine's settings too: an operator command may submit scans (watches run-due).
            operator_env = " ".join(f"{k}={shlex.quote(stack.env[k])}"
                                    for k in ("APP_ENV", "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "INSTANCE_PATH",
                                              "ENGINE_URL", "ENGINE_TOKEN"))
            print(f"""
API        {stack.base_url}
simulator  {stack.sim_url}
logs       {stack.log_dir}
Run scenarios against it (the operator hook needs the stack's database, secret key and engine):

  env {operator_env} \\
      {sys.executable} -m simulator scenario all --base-url {stack.base_url} --sim-url {stack.sim_url}

Ctrl-C stops everything.""", flush=True)
            while not stack.dead():
                time.sleep(1)
            print(f"stack: {', '.join(stack.dead())} exited", file=sys.stderr)
            stack.mark_failed()
            return 1
    except KeyboardInterrupt:
        return 0
    except StackError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
