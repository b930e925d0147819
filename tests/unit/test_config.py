"""Settings from the environment (D10a)."""
import pytest

from app.plumbing.config import (
    DEV_SECRET_KEY,
    ConfigError,
    check_production,
    finalize,
    load_settings,
    parse_retry_schedule,
    retired_setting_lines,
    startup_error_line,
)


def test_defaults_match_the_decisions():
    settings = load_settings({})
    assert settings["APP_ENV"] == "development"
    assert settings["WEBHOOK_RETRY_SCHEDULE"] == (0.0, 30.0, 300.0)
    assert settings["WEBHOOK_TIMEOUT_SECONDS"] == 10.0
    assert settings["SCAN_TIMEOUT_SECONDS"] == 900
    assert settings["PUBLIC_BASE_URL"] is None
    assert settings["ACTIVITY_RETENTION_DAYS"] == 400


def test_development_leaves_the_database_to_the_embedded_server_and_fills_a_dev_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path))
    settings = finalize(load_settings({}))
    assert settings["DATABASE_URL"] is None  # app.plumbing.db.database_url: the embedded PostgreSQL
    assert settings["SECRET_KEY"]


@pytest.mark.parametrize("app_env", [None, "development", "test", "production"])
@pytest.mark.parametrize("url", ["sqlite:////tmp/x.sqlite3", "sqlite:///scan.db", "SQLite:///x"])
def test_a_sqlite_database_is_refused_in_one_line_that_names_postgresql(url, app_env):
    env = {"DATABASE_URL": url, **({"APP_ENV": app_env} if app_env else {})}
    with pytest.raises(ConfigError) as exc:
        finalize(load_settings(env))
    message = str(exc.value)
    assert "\n" not in message
    assert "PostgreSQL" in message and "SQLite" in message


def test_production_refuses_to_start_naming_every_missing_setting():
    with pytest.raises(ConfigError) as exc:
        finalize(load_settings({"APP_ENV": "production", "REDIS_URL": "redis://x"}))
    message = str(exc.value)
    assert "\n" not in message
    for name in ("SECRET_KEY", "DATABASE_URL", "ENGINE_URL"):
        assert name in message
    assert "REDIS_URL" not in message


PRODUCTION = {"APP_ENV": "production", "SECRET_KEY": "k" * 32, "DATABASE_URL": "postgresql://x/y",
              "REDIS_URL": "redis://x", "ENGINE_URL": "https://engine", "PUBLIC_BASE_URL": "https://api.example.com"}


def test_production_starts_with_its_settings():
    settings = finalize(load_settings(PRODUCTION))
    check_production(settings)
    assert settings["ENGINE_URL"] == "https://engine"


def test_production_needs_a_public_base_url_so_poll_urls_never_come_from_the_host_header():
    with pytest.raises(ConfigError, match="PUBLIC_BASE_URL"):
        check_production(finalize(load_settings({**PRODUCTION, "PUBLIC_BASE_URL": ""})))
    with pytest.raises(ConfigError, match="PUBLIC_BASE_URL must be an absolute URL"):
        check_production(finalize(load_settings({**PRODUCTION, "PUBLIC_BASE_URL": "api.example.com"})))


@pytest.mark.parametrize("secret,reason", [("k" * 31, "at least 32 characters"),
                                           (DEV_SECRET_KEY, "published"), ("test-secret-key", "published")])
def test_production_refuses_a_weak_or_published_secret_key(secret, reason):
    with pytest.raises(ConfigError, match=reason) as exc:
        check_production(finalize(load_settings({**PRODUCTION, "SECRET_KEY": secret})))
    assert secret not in str(exc.value) and "\n" not in str(exc.value)


def test_development_keeps_its_published_key():
    assert finalize(load_settings({}))["SECRET_KEY"] == DEV_SECRET_KEY


@pytest.mark.parametrize("url", ["mysql://u@h/db", "redis://h/0", "just-a-path"])
def test_an_unknown_database_scheme_is_refused_in_every_environment(url):
    with pytest.raises(ConfigError, match="unknown scheme"):
        finalize(load_settings({"DATABASE_URL": url}))
    with pytest.raises(ConfigError, match="DATABASE_DIRECT_URL has an unknown scheme"):
        finalize(load_settings({"DATABASE_URL": "postgresql://u@h/db", "DATABASE_DIRECT_URL": url}))


def test_the_direct_database_url_is_the_database_url_unless_set(base_config):
    """D19: what needs a session of its own connects to DATABASE_DIRECT_URL (a pooler in
    transaction mode may be at DATABASE_URL); unset, it is DATABASE_URL."""
    from app import create_app
    assert create_app(base_config).config["DATABASE_DIRECT_URL"] == base_config["DATABASE_URL"]
    direct = "postgresql://scan@db.internal:5432/scan"
    assert create_app(dict(base_config, DATABASE_DIRECT_URL=direct)).config["DATABASE_DIRECT_URL"] == direct
    create_app(base_config)


def test_the_startup_line_is_json_where_logs_are_json():
    import json
    line = startup_error_line("SECRET_KEY is missing", {"APP_ENV": "production"})
    assert json.loads(line)["message"] == "error: SECRET_KEY is missing"
    assert startup_error_line("x", {"APP_ENV": "development"}) == "error: x"


@pytest.mark.parametrize("raw,expected", [("0,30,300", (0, 30, 300)), ("1, 2", (1, 2)), ("", ())])
def test_retry_schedule_parses(raw, expected):
    assert parse_retry_schedule(raw) == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "0,30,inf", "-inf", "0,NaN", "-1", "0,-0.5"])
def test_a_retry_schedule_of_no_number_of_seconds_stops_the_start_in_one_line(raw):
    # float() reads "nan" and "inf": they used to pass, and fail the first retry at run time.
    with pytest.raises(ConfigError, match=r"^WEBHOOK_RETRY_SCHEDULE must be comma-separated seconds, each 0 or "
                                          r"more") as caught:
        load_settings({"WEBHOOK_RETRY_SCHEDULE": raw})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("env", [{"APP_ENV": "staging"}, {"SCAN_TIMEOUT_SECONDS": "soon"},
                                 {"WEBHOOK_RETRY_SCHEDULE": "0,x"}, {"WEBHOOK_RETRY_SCHEDULE": "-1"},
                                 {"ACTIVITY_RETENTION_DAYS": "0"}, {"ACTIVITY_RETENTION_DAYS": "a year"},
                                 {"ACTIVITY_RETENTION_DAYS": "1.5"}])
def test_malformed_settings_are_refused(env):
    with pytest.raises(ConfigError):
        load_settings(env)


@pytest.mark.parametrize("env, expected", [
    ({"DATABASE_URL": "postgresql://scan@db/scan"}, "production"),
    ({"DATABASE_URL": "postgres://scan@db/scan"}, "production"),
    ({"DATABASE_URL": "postgresql://scan@db/scan", "APP_ENV": "development"}, "development"),
    ({"DATABASE_URL": "postgresql://scan@db/scan", "APP_ENV": "test"}, "test"),
    ({}, "development"),
])
def test_an_unset_app_env_with_a_database_url_means_production(env, expected):
    # An operator command run on the production host without APP_ENV keeps the SSRF guard
    # and refuses to run with the development SECRET_KEY.
    assert load_settings(env)["APP_ENV"] == expected


def test_an_operator_shell_without_app_env_on_postgresql_must_name_the_production_settings():
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        finalize(load_settings({"DATABASE_URL": "postgresql://scan@db/scan"}))


def test_a_bad_activity_retention_is_one_line_naming_the_setting():
    with pytest.raises(ConfigError) as refused:
        load_settings({"ACTIVITY_RETENTION_DAYS": "-5"})
    assert str(refused.value) == "ACTIVITY_RETENTION_DAYS must be a whole number from 1 to 36500, got '-5'"
    assert load_settings({"ACTIVITY_RETENTION_DAYS": "30"})["ACTIVITY_RETENTION_DAYS"] == 30


def test_a_retired_setting_is_ignored_with_one_warning_line():
    """ENGINE_BATCH_LOOK no longer chooses anything (due looks are the one way): a value still set
    starts the process all the same, and the worker says once that it is ignored."""
    env = {"ENGINE_BATCH_LOOK": "off"}
    assert "ENGINE_BATCH_LOOK" not in load_settings(env)
    [line] = retired_setting_lines(env)
    assert line.startswith("ENGINE_BATCH_LOOK is retired and ignored: ")
    assert retired_setting_lines({}) == []
