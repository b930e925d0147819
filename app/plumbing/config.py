"""Settings, read from the environment in this one module (D10a).

Every knob the service has is a flat environment variable, the way operators of
redash-style Flask + RQ deployments expect. ``load_settings`` turns them into the
Flask config mapping; ``create_app(config=...)`` may override any of them (tests do).
Nothing else in the code base reads ``os.environ`` for settings.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from urllib.parse import unquote, urlparse

ENVIRONMENTS = ("development", "test", "production")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("json", "text")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_DEFAULT_PORT = 26379
DAY = 86_400

# Settings production refuses to start without (D10a): a default for any of these
# would silently point a production API at a developer's embedded database or engine.
REQUIRED_IN_PRODUCTION = ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ENGINE_URL")
# A SECRET_KEY signs portal sessions and encrypts webhook secrets: production wants one
# long enough not to be guessed, and never a key published in this repository.
MIN_SECRET_KEY_LENGTH = 32
DATABASE_SCHEMES = ("postgres", "postgresql")  # PostgreSQL is the only database

DEV_SECRET_KEY = "dev-only-secret-key-do-not-use-in-production"
DEV_ENGINE_URL = "http://127.0.0.1:8700"
# Keys that appear in this repository (development default, tests, bench): public, so
# production refuses them whatever their length.
PUBLISHED_SECRET_KEYS = frozenset({DEV_SECRET_KEY, "test-secret-key", "bench-secret-key-not-for-production"})


class ConfigError(RuntimeError):
    """A setting is missing or malformed; the message is one line for the operator."""


def _number(env, name, default, low, high, cast=int, *, above_low=False):
    """The setting ``name`` as a finite number from ``low`` to ``high`` (strictly above ``low``
    with ``above_low``), or ``default`` when unset; anything else is one line naming the range."""
    raw = env.get(name)
    if raw in (None, ""):
        return default
    kind = "a whole number" if cast is int else "a number"
    bounds = f"{'more than ' if above_low else 'from '}{low:g} {'and at most' if above_low else 'to'} {high:g}"
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind} {bounds}, got {raw!r}") from None
    if not math.isfinite(value) or value < low or (above_low and value == low) or value > high:
        raise ConfigError(f"{name} must be {kind} {bounds}, got {raw!r}")
    return value


def _seconds(env, name, default, high):
    return _number(env, name, default, 0, high, float, above_low=True)


def _redis_url(url: str | None) -> str | None:
    scheme = url.split("://", 1)[0].lower() if url and "://" in url else None
    if url is not None and scheme not in REDIS_SCHEMES:
        shown = scheme or url[:20]
        raise ConfigError("REDIS_URL must be a redis://, rediss://, unix:// or "
                          f"redis+sentinel://host:port[,host:port...]/name[/db] URL, got {shown!r}")
    if url is not None and scheme == SENTINEL_SCHEME:
        parse_sentinel_url(url)
    return url


@dataclass(frozen=True)
class SentinelUrl:
    """``redis+sentinel://[[user]:password@]host:port[,host:port...]/name[/db]`` (D31): the Sentinels
    to ask, the name of the master they watch, the database number; the credentials are the Redis
    servers' (master and replicas), the Sentinels are asked without."""
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The parts of a ``redis+sentinel://`` URL, or ConfigError naming what is wrong (never the password)."""
    usage = "REDIS_URL must be redis+sentinel://host:port[,host:port...]/name[/db]"
    rest = url.split("://", 1)[1]
    netloc, _, path = rest.partition("/")
    credentials, _, hosts = netloc.rpartition("@")
    username = password = None
    if credentials:
        user, colon, secret = credentials.partition(":")
        username, password = (unquote(user) or None), (unquote(secret) if colon else None)
        if not colon:  # redis://secret@host: one word before the @ is the password, as redis-py reads it
            username, password = None, unquote(user)
    sentinels = []
    for part in hosts.split(","):
        host, port = _host_and_port(part.strip(), SENTINEL_DEFAULT_PORT)
        if not host or port is None:
            raise ConfigError(f"{usage}: {part.strip()[:60]!r} is not a host:port")
        sentinels.append((host, port))
    path = path.split("?", 1)[0].strip("/")
    service, _, db = path.partition("/")
    if not service:
        raise ConfigError(f"{usage}: the master's name (as the Sentinels know it) is missing")
    if db and not (db.isdigit() and int(db) < 10_000):
        raise ConfigError(f"{usage}: the database {db[:20]!r} is not a number")
    return SentinelUrl(tuple(sentinels), unquote(service), int(db or 0), username, password)


def _host_and_port(part: str, default_port: int) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port`` or ``host`` (the default port); the port None when it is no port."""
    if part.startswith("["):
        host, _, port = part[1:].partition("]")
        port = port[1:] if port.startswith(":") else ("" if not port else "x")
    else:
        host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
    if not port:
        return host, default_port
    return host, int(port) if port.isdigit() and 0 < int(port) < 65536 else None


def _choice(env, name, default, choices, *, upper=False):
    raw = env.get(name) or default
    value = raw.upper() if upper else raw.lower()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def parse_retry_schedule(raw: str) -> tuple[float, ...]:
    """``"0,30,300"`` -> ``(0.0, 30.0, 300.0)``: the delays before retries 1..n."""
    try:
        delays = tuple(float(part) for part in raw.split(",") if part.strip() != "")
    except ValueError:
        raise ConfigError(f"WEBHOOK_RETRY_SCHEDULE must be comma-separated seconds, got {raw!r}") from None
    # float() also reads "nan", "inf" and "-inf": a delay that is no number of seconds would
    # fail the first retry (or wait for ever), so it stops the start like any bad value.
    bad = next((d for d in delays if not math.isfinite(d) or d < 0), None)
    if bad is not None:
        raise ConfigError(f"WEBHOOK_RETRY_SCHEDULE must be comma-separated seconds, each 0 or more "
                          f"(not {bad:g}), got {raw[:100]!r}")
    return delays


def _duration_words(seconds: float) -> str:
    if seconds == 0:
        return "at once"
    n: float
    if seconds % 3600 == 0:
        n, unit = int(seconds // 3600), "hour"
    elif seconds % 60 == 0:
        n, unit = int(seconds // 60), "minute"
    else:
        n, unit = seconds, "second"  # a fraction of a second stays one
    return f"after {n:g} {unit}{'' if n == 1 else 's'}"


def retry_schedule_words(delays: tuple[float, ...]) -> str:
    """``(0, 30, 300)`` -> ``"3 times: at once, after 30 seconds, after 5 minutes"``: how customers read
    the retry schedule (OpenAPI, the key's page). Rendered from the setting, never restated."""
    if not delays:
        return "never retried"
    times = "once" if len(delays) == 1 else f"{len(delays)} times"
    return f"retried {times}: " + ", ".join(_duration_words(d) for d in delays)


def default_instance_path() -> Path:
    return Path(os.environ.get("INSTANCE_PATH") or Path(__file__).resolve().parent.parent / "instance")


def load_settings(env=None) -> dict:
    """Read every setting from ``env`` (default ``os.environ``) into a config mapping."""
    env = os.environ if env is None else env
    # Unset APP_ENV with a DATABASE_URL means production: an operator command run on the
    # production host without APP_ENV must not skip the SSRF guard or encrypt webhook secrets
    # with the development key. Development and tests with a DATABASE_URL set APP_ENV
    # themselves; without one (the embedded database) it is development.
    app_env = env.get("APP_ENV") or ("production" if env.get("DATABASE_URL") else "development")
    if app_env not in ENVIRONMENTS:
        raise ConfigError(f"APP_ENV must be one of {', '.join(ENVIRONMENTS)}, got {app_env!r}")
    instance = default_instance_path()
    return {
        "APP_ENV": app_env,
        "INSTANCE_PATH": str(instance),
        "SECRET_KEY": env.get("SECRET_KEY") or None,
        "DATABASE_URL": env.get("DATABASE_URL") or None,
        # D19: what needs a server session of its own (LISTEN, a lock held across transactions)
        # connects here, when DATABASE_URL names a pooler in transaction mode; unset: DATABASE_URL.
        "DATABASE_DIRECT_URL": env.get("DATABASE_DIRECT_URL") or None,
        "REDIS_URL": _redis_url(env.get("REDIS_URL") or None),
        "ENGINE_URL": (env.get("ENGINE_URL") or "").rstrip("/") or None,
        "ENGINE_TOKEN": env.get("ENGINE_TOKEN") or "",
        # E7: the service's callback endpoint as the engine reaches it (``.../engine/v1/callbacks``),
        # sent with every submission when set, and the ``whsec_`` secret callbacks are signed with.
        "ENGINE_CALLBACK_URL": (env.get("ENGINE_CALLBACK_URL") or "").strip() or None,
        "ENGINE_CALLBACK_SECRET": (env.get("ENGINE_CALLBACK_SECRET") or "").strip() or None,
        "PUBLIC_BASE_URL": (env.get("PUBLIC_BASE_URL") or "").rstrip("/") or None,
        "WEBHOOK_RETRY_SCHEDULE": parse_retry_schedule(env.get("WEBHOOK_RETRY_SCHEDULE") or "0,30,300"),
        "WEBHOOK_TIMEOUT_SECONDS": _seconds(env, "WEBHOOK_TIMEOUT_SECONDS", 10.0, 300),
        # D18: how many deliveries one worker process has in flight at once, how many of them
        # may go to one endpoint (a key's webhook URL), and, as politeness toward a receiver that
        # many customers share, to one host (host name and port): larger than an endpoint's share.
        "WEBHOOK_CONCURRENCY": _number(env, "WEBHOOK_CONCURRENCY", 100, 1, 10_000),
        "WEBHOOK_ENDPOINT_CONCURRENCY": _number(env, "WEBHOOK_ENDPOINT_CONCURRENCY", 10, 0, 10_000),
        "WEBHOOK_HOST_CONCURRENCY": _number(env, "WEBHOOK_HOST_CONCURRENCY", 50, 0, 10_000),
        # Test events a key may send from the portal per minute.
        "WEBHOOK_TEST_EVENTS_PER_MINUTE": _number(env, "WEBHOOK_TEST_EVENTS_PER_MINUTE", 5, 0, 10_000),
        "SCAN_TIMEOUT_SECONDS": _number(env, "SCAN_TIMEOUT_SECONDS", 900, 1, 7 * DAY),
        # How long a test-mode scan takes in the sandbox engine (D15); its timeout is 3 times that.
        "SANDBOX_SCAN_SECONDS": _seconds(env, "SANDBOX_SCAN_SECONDS", 5.0, 3600),
        # Longest pause between two looks at one scan's engine state; shorter when the
        # engine's eta says the scan is nearly done.
        "ENGINE_POLL_SECONDS": _seconds(env, "ENGINE_POLL_SECONDS", 10.0, 3600),
        "ENGINE_SUBMIT_TIMEOUT_SECONDS": _seconds(env, "ENGINE_SUBMIT_TIMEOUT_SECONDS", 5.0, 300),
        "ENGINE_STATUS_TIMEOUT_SECONDS": _seconds(env, "ENGINE_STATUS_TIMEOUT_SECONDS", 5.0, 300),
        # D24: scans in flight are tracked by due times in the database, looked at in batches (one
        # engine request for up to ENGINE_BATCH_SIZE scans when the engine offers it, single looks
        # otherwise) by ENGINE_LOOK_THREADS threads per worker.
        "ENGINE_BATCH_SIZE": _number(env, "ENGINE_BATCH_SIZE", 100, 1, 100),
        "ENGINE_LOOK_THREADS": _number(env, "ENGINE_LOOK_THREADS", 2, 1, 64),
        # How often a worker runs the recovery sweep (D13), and how long a scan may go
        # unlooked-at before the sweep suspects its tracking job was lost.
        "RECOVERY_INTERVAL_SECONDS": _number(env, "RECOVERY_INTERVAL_SECONDS", 60, 1, DAY),
        "RECOVERY_STALE_SECONDS": _number(env, "RECOVERY_STALE_SECONDS", 120, 1, DAY),
        # How often a worker erases the scans past their customer's retention (D20).
        "RETENTION_INTERVAL_SECONDS": _number(env, "RETENTION_INTERVAL_SECONDS", 3600, 1, DAY),
        # How often the scheduler makes the watches' due scans (D28).
        "WATCH_INTERVAL_SECONDS": _number(env, "WATCH_INTERVAL_SECONDS", 60, 1, DAY),
        # How often each engine source is probed (D30): a round of two submissions per source.
        "SOURCE_PROBE_MINUTES": _number(env, "SOURCE_PROBE_MINUTES", 15, 1, 24 * 60),
        # Request bodies above this many bytes answer 413 (a bulk of 100 fits easily).
        "MAX_CONTENT_LENGTH": _number(env, "MAX_CONTENT_LENGTH", 256 * 1024, 1024, 100 * 1024 * 1024),
        "LOG_LEVEL": _choice(env, "LOG_LEVEL", "INFO", LOG_LEVELS, upper=True),
        # json for log shippers (production default), text for people at a terminal.
        "LOG_FORMAT": _choice(env, "LOG_FORMAT", "json" if app_env == "production" else "text", LOG_FORMATS),
        "METRICS_TOKEN": env.get("METRICS_TOKEN") or None,
        # How many reverse proxies in front of the app append to X-Forwarded-For (and set
        # X-Forwarded-Proto); 0 = the header is never believed (app/__init__.py, ProxyFix).
        "TRUSTED_PROXIES": _number(env, "TRUSTED_PROXIES", 0, 0, 10),
        # How long the activity log keeps an entry (D20), in days; a day's entries go together.
        "ACTIVITY_RETENTION_DAYS": _number(env, "ACTIVITY_RETENTION_DAYS", 400, 1, 36_500),
        # Webhook endpoints (D22): an endpoint whose every delivery failed this long (and at least
        # 10 of them) is disabled; deliveries are removed after DELIVERY_RETENTION_DAYS.
        "WEBHOOK_DISABLE_AFTER_HOURS": _number(env, "WEBHOOK_DISABLE_AFTER_HOURS", 120, 1, 24 * 365),
        "DELIVERY_RETENTION_DAYS": _number(env, "DELIVERY_RETENTION_DAYS", 30, 1, 36_500),
    }


# Settings that no longer do anything: a value still set is ignored, with one warning line from
# each worker at start (``retired_setting_lines``), so that an upgrade never fails on one.
RETIRED_SETTINGS = {
    "ENGINE_BATCH_LOOK": "scans in flight are always tracked by due times in the database, looked at in "
                         "batches where the engine offers it and one by one where it does not",
}


def retired_setting_lines(env=None) -> list[str]:
    """One warning line per retired setting that ``env`` (the process's environment) still sets."""
    env = os.environ if env is None else env
    return [f"{name} is retired and ignored: {why}" for name, why in RETIRED_SETTINGS.items() if env.get(name)]


def finalize(config: dict) -> dict:
    """Fill development defaults and refuse an incomplete production config."""
    _check_database_url(config.get("DATABASE_URL"))
    _check_database_url(config.get("DATABASE_DIRECT_URL"), "DATABASE_DIRECT_URL")
    _check_delivery_shares(config)
    _check_engine_callbacks(config)
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
        # It stays unset: the app binds the embedded PostgreSQL of the instance folder
        # (app.plumbing.db.database_url), started only by a process that opens the database.
        instance.mkdir(parents=True, exist_ok=True)
    return config


def _check_delivery_shares(config: dict) -> None:
    # A host ceiling below one endpoint's share would let a hanging endpoint hold its whole
    # host, and so every other customer's endpoint there (D18 amended).
    endpoint, host = config.get("WEBHOOK_ENDPOINT_CONCURRENCY", 0), config.get("WEBHOOK_HOST_CONCURRENCY", 0)
    if endpoint and host and host <= endpoint:
        raise ConfigError(f"WEBHOOK_HOST_CONCURRENCY ({host}) must be larger than WEBHOOK_ENDPOINT_CONCURRENCY "
                          f"({endpoint}), or 0 for no ceiling per host")


def _check_engine_callbacks(config: dict) -> None:
    """E7's settings: an absolute http(s) URL, a ``whsec_`` + base64 secret (as webhook secrets);
    production refuses the URL without the secret (every callback would be refused)."""
    from app.plumbing.signatures import decode_secret

    url, secret = config.get("ENGINE_CALLBACK_URL"), config.get("ENGINE_CALLBACK_SECRET")
    if url:
        parsed = urlparse(url)
        if parsed.scheme not in ("https", "http") or not parsed.netloc:
            raise ConfigError("ENGINE_CALLBACK_URL must be an absolute http(s) URL such as "
                              "https://api.internal/engine/v1/callbacks")
    if secret and decode_secret(secret) is None:
        raise ConfigError("ENGINE_CALLBACK_SECRET must be whsec_ followed by base64 (as webhook secrets), e.g. "
                          "whsec_$(head -c 32 /dev/urandom | base64)")
    if url and not secret and config.get("APP_ENV") == "production":
        raise ConfigError("ENGINE_CALLBACK_URL is set without ENGINE_CALLBACK_SECRET: set the secret the engine signs "
                          "callbacks with, or unset the URL")


def _check_database_url(url: str | None, name: str = "DATABASE_URL") -> None:
    if not url:
        return
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme.split("+", 1)[0] not in DATABASE_SCHEMES:
        shown = scheme or url.split(":", 1)[0][:20]
        if shown.lower().startswith("sqlite"):
            raise ConfigError(f"{name}: SQLite is no longer supported, PostgreSQL is the only database: "
                              "use postgresql://... or leave it unset for the embedded PostgreSQL")
        raise ConfigError(f"{name} has an unknown scheme {shown!r}: use postgresql://...")
    database_connect_args(url, name)


# libpq's values of target_session_attrs (PostgreSQL 14 and newer clients).
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")


def database_connect_args(url: str, name: str = "DATABASE_URL") -> dict:
    """psycopg2's keyword arguments for a ``postgresql://`` URL, read by libpq itself (D31): several
    hosts (``h1:5432,h2:5432``, tried in order) and ``target_session_attrs=read-write`` (only a primary
    will do) pass through to libpq intact, as do ``sslmode`` and the other libpq parameters. ConfigError
    names what is wrong in one line, never the password."""
    import psycopg2
    from psycopg2.extensions import parse_dsn

    scheme, _, rest = url.partition("://")
    if "+" in scheme:  # peewee's spellings (postgresql+pool://): the pool is always on
        url = f"postgresql://{rest}"
    try:
        args = parse_dsn(url)
    except psycopg2.ProgrammingError as exc:
        # libpq's message may quote the whole URL, password included: only its reason is shown.
        reason = str(exc).strip().splitlines()[0].removeprefix("invalid dsn: ").split(': "', 1)[0]
        raise ConfigError(f"{name} is not a PostgreSQL URL libpq can read: {reason}") from None
    hosts = args.get("host", "").split(",")
    ports = args.get("port", "").split(",") if "port" in args else []
    if any(p and not (p.isdigit() and 0 < int(p) < 65536) for p in ports):
        raise ConfigError(f"{name} has a port that is not a number from 1 to 65535")
    if len(ports) > 1 and len(ports) != len(hosts):
        raise ConfigError(f"{name} names {len(hosts)} hosts and {len(ports)} ports: give one port, or one per host")
    attrs = args.get("target_session_attrs")
    if attrs is not None and attrs not in TARGET_SESSION_ATTRS:
        raise ConfigError(f"{name}: target_session_attrs must be one of {', '.join(TARGET_SESSION_ATTRS)}, "
                          f"got {attrs[:30]!r}")
    return args


def check_production(config: dict) -> None:
    """What a production process refuses at start (app.plumbing.startup), beyond ``finalize``: a
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
        from datetime import datetime
        return json.dumps({"ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                           "level": "CRITICAL", "logger": "startup", "message": f"error: {message}"})
    return f"error: {message}"
