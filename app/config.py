"""Settings, read from the environment in this one module (D10a).

Every knob the service has is a flat environment variable, the way operators of
redash-style Flask + RQ deployments expect. ``load_settings`` turns them into the
Flask config mapping; ``create_app(config=...)`` may override any of them (tests do).
Nothing else in the code base reads ``os.environ`` for settings.
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

ENVIRONMENTS = ("development", "test", "production")

# Settings production refuses to start without (D10a): a default for any of these
# would silently point a production API at a developer's SQLite file or engine.
REQUIRED_IN_PRODUCTION = ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ENGINE_URL")
# A SECRET_KEY signs portal sessions and encrypts webhook secrets: production wants one
# long enough not to be guessed, and never a key published in this repository.
MIN_SECRET_KEY_LENGTH = 32
DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql")

DEV_SECRET_KEY = "dev-only-secret-key-do-not-use-in-production"
DEV_ENGINE_URL = "http://127.0.0.1:8700"
# Keys that appear in this repository (development default, tests, bench): public, so
# production refuses them whatever their length.
PUBLISHED_SECRET_KEYS = frozenset({DEV_SECRET_KEY, "test-secret-key", "bench-secret-key-not-for-production"})


class ConfigError(RuntimeError):
    """A setting is missing or malformed; the message is one line for the operator."""


def _number(env, name, default, cast):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return cast(raw)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None


def _int(env, name, default):
    return _number(env, name, default, int)


def _float(env, name, default):
    return _number(env, name, default, float)


def _count(env, name, default):
    value = _int(env, name, default)
    if value < 0:
        raise ConfigError(f"{name} must not be negative, got {value}")
    return value


def _positive(env, name, default):
    value = _float(env, name, default)
    if not (value > 0 and value != float("inf")):
        raise ConfigError(f"{name} must be a positive number of seconds, got {env.get(name)!r}")
    return value


def parse_retry_schedule(raw: str) -> tuple[float, ...]:
    """``"0,30,300"`` -> ``(0.0, 30.0, 300.0)``: the delays before retries 1..n."""
    try:
        delays = tuple(float(part) for part in raw.split(",") if part.strip() != "")
    except ValueError:
        raise ConfigError(f"WEBHOOK_RETRY_SCHEDULE must be comma-separated seconds, got {raw!r}") from None
    if any(d < 0 for d in delays):
        raise ConfigError("WEBHOOK_RETRY_SCHEDULE must not contain negative delays")
    return delays


def default_instance_path() -> Path:
    return Path(os.environ.get("INSTANCE_PATH") or Path(__file__).resolve().parent.parent / "instance")


def load_settings(env=None) -> dict:
    """Read every setting from ``env`` (default ``os.environ``) into a config mapping."""
    env = os.environ if env is None else env
    # Unset APP_ENV on a PostgreSQL database means production: an operator command run on the
    # production host without APP_ENV must not skip the SSRF guard or encrypt webhook secrets
    # with the development key. Development and tests on PostgreSQL set APP_ENV themselves.
    on_postgres = "postgres" in (env.get("DATABASE_URL") or "").split(":", 1)[0].lower()
    app_env = env.get("APP_ENV") or ("production" if on_postgres else "development")
    if app_env not in ENVIRONMENTS:
        raise ConfigError(f"APP_ENV must be one of {', '.join(ENVIRONMENTS)}, got {app_env!r}")
    instance = default_instance_path()
    return {
        "APP_ENV": app_env,
        "INSTANCE_PATH": str(instance),
        "SECRET_KEY": env.get("SECRET_KEY") or None,
        "DATABASE_URL": env.get("DATABASE_URL") or None,
        "REDIS_URL": env.get("REDIS_URL") or None,
        "ENGINE_URL": (env.get("ENGINE_URL") or "").rstrip("/") or None,
        "ENGINE_TOKEN": env.get("ENGINE_TOKEN") or "",
        "PUBLIC_BASE_URL": (env.get("PUBLIC_BASE_URL") or "").rstrip("/") or None,
        "WEBHOOK_RETRY_SCHEDULE": parse_retry_schedule(env.get("WEBHOOK_RETRY_SCHEDULE") or "0,30,300"),
        "WEBHOOK_TIMEOUT_SECONDS": _float(env, "WEBHOOK_TIMEOUT_SECONDS", 10.0),
        # D18: how many deliveries one worker process has in flight at once, and how many of
        # them may go to one receiver host (host name and port of the webhook URL).
        "WEBHOOK_CONCURRENCY": _count(env, "WEBHOOK_CONCURRENCY", 100),
        "WEBHOOK_HOST_CONCURRENCY": _count(env, "WEBHOOK_HOST_CONCURRENCY", 10),
        # Test events a key may send from the portal per minute.
        "WEBHOOK_TEST_EVENTS_PER_MINUTE": _count(env, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 5),
        "SCAN_TIMEOUT_SECONDS": _int(env, "SCAN_TIMEOUT_SECONDS", 900),
        # How long a test-mode scan takes in the sandbox engine (D15); its timeout is 3 times that.
        "SANDBOX_SCAN_SECONDS": _positive(env, "SANDBOX_SCAN_SECONDS", 5.0),
        # Longest pause between two looks at one scan's engine state; shorter when the
        # engine's eta says the scan is nearly done.
        "ENGINE_POLL_SECONDS": _float(env, "ENGINE_POLL_SECONDS", 10.0),
        "ENGINE_SUBMIT_TIMEOUT_SECONDS": _float(env, "ENGINE_SUBMIT_TIMEOUT_SECONDS", 5.0),
        "ENGINE_STATUS_TIMEOUT_SECONDS": _float(env, "ENGINE_STATUS_TIMEOUT_SECONDS", 5.0),
        # How often a worker runs the recovery sweep (D13), and how long a scan may go
        # unlooked-at before the sweep suspects its tracking job was lost.
        "RECOVERY_INTERVAL_SECONDS": _int(env, "RECOVERY_INTERVAL_SECONDS", 60),
        "RECOVERY_STALE_SECONDS": _int(env, "RECOVERY_STALE_SECONDS", 120),
        # Request bodies above this many bytes answer 413 (a bulk of 100 fits easily).
        "MAX_CONTENT_LENGTH": _int(env, "MAX_CONTENT_LENGTH", 256 * 1024),
        "LOG_LEVEL": (env.get("LOG_LEVEL") or "INFO").upper(),
        # json for log shippers (production default), text for people at a terminal.
        "LOG_FORMAT": (env.get("LOG_FORMAT") or ("json" if app_env == "production" else "text")).lower(),
        "METRICS_TOKEN": env.get("METRICS_TOKEN") or None,
        # How many reverse proxies in front of the app append to X-Forwarded-For (and set
        # X-Forwarded-Proto); 0 = the header is never believed (app/__init__.py, ProxyFix).
        "TRUSTED_PROXIES": _count(env, "TRUSTED_PROXIES", 0),
    }


def finalize(config: dict) -> dict:
    """Fill development defaults and refuse an incomplete production config."""
    _check_database_url(config.get("DATABASE_URL"))
    if config["APP_ENV"] == "production":
        missing = [name for name in REQUIRED_IN_PRODUCTION if not config.get(name)]
        if missing:
            raise ConfigError(f"APP_ENV=production needs these settings: {', '.join(missing)}")
    instance = Path(config["INSTANCE_PATH"])
    if not config.get("ENGINE_URL"):
        config["ENGINE_URL"] = DEV_ENGINE_URL  # the simulator's default address
    if not config.get("SECRET_KEY"):
        config["SECRET_KEY"] = DEV_SECRET_KEY
    if not config.get("DATABASE_URL"):
        instance.mkdir(parents=True, exist_ok=True)
        config["DATABASE_URL"] = f"sqlite:///{instance / 'scan-api.sqlite3'}"
    return config


def _check_database_url(url: str | None) -> None:
    if not url:
        return
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme.split("+", 1)[0] not in DATABASE_SCHEMES:
        shown = scheme or url.split(":", 1)[0][:20]
        raise ConfigError(f"DATABASE_URL has an unknown scheme {shown!r}: use postgresql://... or sqlite:///...")


def check_production(config: dict) -> None:
    """What a production process refuses at start (app.startup), beyond ``finalize``: a
    guessable secret, poll URLs built from the Host header. ``create_app(config=...)`` (tests)
    does not run it."""
    if config["APP_ENV"] != "production":
        return
    if not config.get("PUBLIC_BASE_URL"):
        raise ConfigError("APP_ENV=production needs these settings: PUBLIC_BASE_URL")
    secret = config["SECRET_KEY"]
    if secret in PUBLISHED_SECRET_KEYS:
        raise ConfigError("SECRET_KEY is a development key published in the repository; "
                          "set a long random one (python -c 'import secrets; print(secrets.token_urlsafe(48))')")
    if len(secret) < MIN_SECRET_KEY_LENGTH:
        raise ConfigError(f"SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters in production, "
                          f"got {len(secret)}")
    base = config["PUBLIC_BASE_URL"]
    parsed = urlparse(base)
    if parsed.scheme not in ("https", "http") or not parsed.netloc:
        raise ConfigError(f"PUBLIC_BASE_URL must be an absolute URL such as https://api.example.com, got {base!r}")


def startup_error_line(message: str, env=None) -> str:
    """The one line a process prints before exiting on a bad setting: JSON where logs are
    JSON (production's default), plain text otherwise."""
    env = os.environ if env is None else env
    app_env = env.get("APP_ENV") or "development"
    fmt = (env.get("LOG_FORMAT") or ("json" if app_env == "production" else "text")).lower()
    if fmt == "json":
        import json
        from datetime import datetime, timezone
        return json.dumps({"ts": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                           "level": "CRITICAL", "logger": "startup", "message": f"error: {message}"})
    return f"error: {message}"
