"""A bad setting stops every process once: one line on stderr, a non-zero status, no traceback.

gunicorn used to respawn workers that each failed the same way (131 error lines in 20 s);
its master now checks the settings before forking. Each process is started for real,
with a deadline: a process still running at the deadline is the respawn loop.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.procutil import free_port
from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEADLINE = 30
STRONG_SECRET = "ops-test-" + "s" * 40

COMMANDS = {
    "gunicorn": [str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"],
    "worker": [str(BIN / "python"), "-m", "workers"],
    "cli": [str(BIN / "flask"), "--app", "wsgi", "db", "upgrade"],
}


closed_port = free_port  # a port nothing listens on


@pytest.fixture
def production_env(app, simulator, tmp_path):
    return service_env(app, simulator.url, tmp_path / "instance", APP_ENV="production", SECRET_KEY=STRONG_SECRET,
                       PUBLIC_BASE_URL="https://api.example.com", GUNICORN_BIND=f"127.0.0.1:{closed_port()}",
                       WEB_CONCURRENCY=2, GUNICORN_THREADS=2)


def run(command: str, env: dict) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(COMMANDS[command], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=DEADLINE)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{command} still running after {DEADLINE} s:\n{(exc.stderr or b'')[-2000:]}") from None


def the_one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


CASES = [
    ("short secret", {"SECRET_KEY": "s" * 31}, "at least 32 characters"),
    ("published secret", {"SECRET_KEY": "dev-only-secret-key-do-not-use-in-production"}, "published"),
    ("no public base url", {"PUBLIC_BASE_URL": ""}, "PUBLIC_BASE_URL"),
    ("unknown database scheme", {"DATABASE_URL": "mysql://u:pw@db.example/scans"}, "unknown scheme 'mysql'"),
    ("unreachable database", {"DATABASE_URL": "postgresql://scan:pw-xyz@127.0.0.1:{port}/scans"},
     "postgresql://127.0.0.1:{port}/scans is unreachable"),
    # Each of these used to be accepted, or to crash one process with a traceback.
    ("redis url of another scheme", {"REDIS_URL": "foo://bar"}, "REDIS_URL must be a redis://"),
    # D31: several database hosts, Redis through Sentinel.
    ("sentinel url without a master name", {"REDIS_URL": "redis+sentinel://s1:26379,s2:26379"},
     "the master's name (as the Sentinels know it) is missing"),
    ("unreachable database hosts",
     {"DATABASE_URL": "postgresql://scan:pw-xyz@127.0.0.1:{port},127.0.0.1:{port}/scans?target_session_attrs=read-write"},
     "postgresql://127.0.0.1:{port},127.0.0.1:{port}/scans is unreachable"),
    ("negative webhook timeout", {"WEBHOOK_TIMEOUT_SECONDS": "-1"}, "WEBHOOK_TIMEOUT_SECONDS must be a number more than 0"),
    ("poll interval not a number", {"ENGINE_POLL_SECONDS": "nan"}, "ENGINE_POLL_SECONDS must be a number"),
    ("retry schedule of no number", {"WEBHOOK_RETRY_SCHEDULE": "0,30,inf"}, "WEBHOOK_RETRY_SCHEDULE must be"),
    ("no delivery threads", {"WEBHOOK_CONCURRENCY": "0"}, "WEBHOOK_CONCURRENCY must be a whole number from 1"),
    ("absurd delivery threads", {"WEBHOOK_CONCURRENCY": str(10**20)}, "WEBHOOK_CONCURRENCY must be a whole number"),
    ("unknown log level", {"LOG_LEVEL": "LOUD"}, "LOG_LEVEL must be one of DEBUG, INFO"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case,override,expected", CASES, ids=[c[0] for c in CASES])
def test_production_refuses_to_start_with_one_json_line(production_env, command, case, override, expected):
    port = closed_port()
    env = dict(production_env, **{k: v.format(port=port) for k, v in override.items()})
    line = the_one_line(run(command, env))
    entry = json.loads(line)  # production logs are JSON, this line too
    assert entry["level"] == "CRITICAL" and expected.format(port=port) in entry["message"]
    assert "pw-xyz" not in line  # the database password is never shown


def test_a_sqlite_database_stops_every_process_with_one_line_naming_postgresql(production_env):
    env = dict(production_env, APP_ENV="development", DATABASE_URL="sqlite:////tmp/scan-api.sqlite3")
    for command in COMMANDS:
        line = the_one_line(run(command, env))
        assert line.startswith("error: DATABASE_URL: SQLite is no longer supported"), (command, line)
        assert "PostgreSQL is the only database" in line, (command, line)


def test_development_names_a_bad_setting_in_plain_text(production_env):
    env = dict(production_env, APP_ENV="development", DATABASE_URL="oracle://x/y")
    for command in COMMANDS:
        line = the_one_line(run(command, env))
        assert line.startswith("error: DATABASE_URL has an unknown scheme 'oracle'"), (command, line)
