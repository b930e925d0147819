"""The environment of a service process (API or worker) that a test starts for real.

One place, so that every subprocess a test runs is bound the same way to the test
session's database, Redis, engine and secrets, and never inherits pytest's own settings.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from simulator.procutil import wait_until


def service_env(app, engine_url: str, instance: Path, **extra) -> dict:
    """The environment of an API or worker process bound to this test's database, Redis and engine;
    ``extra`` settings override (values are turned into strings)."""
    from app.plumbing import runtime
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEST_", "PYTEST"))}
    env.update({
        "APP_ENV": "test",
        "DATABASE_URL": app.config["DATABASE_URL"],
        "DATABASE_DIRECT_URL": app.config.get("DATABASE_DIRECT_URL") or app.config["DATABASE_URL"],  # LISTEN
        "REDIS_URL": runtime.config["REDIS_URL"],
        "ENGINE_URL": engine_url,
        "ENGINE_TOKEN": app.config["ENGINE_TOKEN"],
        "SECRET_KEY": app.config["SECRET_KEY"],
        "INSTANCE_PATH": str(instance),
        "PYTHONUNBUFFERED": "1",
    })
    # The processes of one test add up their metrics in one directory (prometheus-client's
    # multiprocess mode), as the API and workers of one production host do.
    metrics_dir = instance / "prometheus"
    metrics_dir.mkdir(parents=True, exist_ok=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def real_clock_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) without libfaketime in ``LD_PRELOAD``: for the servers a
    test starts that stand for other machines (redis-server, Chromium), whose clocks are not the
    service's. Under ``make test-future`` they hang or fail on a faked clock; elsewhere a no-op."""
    env = dict(os.environ if env is None else env)
    if "LD_PRELOAD" in env:
        env["LD_PRELOAD"] = " ".join(lib for lib in env["LD_PRELOAD"].split() if "faketime" not in lib)
    return env


class WorkerProcess:
    """``python -m workers`` in its own process group, so that a kill takes its scheduler child too."""

    def __init__(self, env: dict, log_path: Path, stop_seconds: float = 10):
        self.log_path, self.stop_seconds = log_path, stop_seconds
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "workers", "--name", f"test-{log_path.stem}"],
                                     cwd=Path(__file__).resolve().parents[1], env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(self.stop_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        try:  # the group may outlive its leader (RQ's forked scheduler): end it too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for(predicate, timeout: float, what: str, workers=(), interval: float = 0.2) -> None:
    """``wait_until``, showing the workers' logs (``WorkerProcess``) when it times out."""
    try:
        wait_until(predicate, timeout, what, interval=interval)
    except TimeoutError as exc:
        logs = "\n".join(f"--- {w.log_path.name}\n{w.output()[-4000:]}" for w in workers)
        raise AssertionError(f"{exc}\n{logs}") from None
