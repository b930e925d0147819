"""Settings from the environment (decisions D10a)."""
import pytest

from app.config import ConfigError, finalize, load_settings, parse_retry_schedule


def test_defaults_match_the_decisions():
    settings = load_settings({})
    assert settings["APP_ENV"] == "development"
    assert settings["WEBHOOK_RETRY_SCHEDULE"] == (0.0, 30.0, 300.0)
    assert settings["WEBHOOK_TIMEOUT_SECONDS"] == 10.0
    assert settings["SCAN_TIMEOUT_SECONDS"] == 900
    assert settings["PUBLIC_BASE_URL"] is None


def test_development_fills_a_sqlite_database_and_a_dev_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path))
    settings = finalize(load_settings({}))
    assert settings["DATABASE_URL"] == f"sqlite:///{tmp_path / 'scan-api.sqlite3'}"
    assert settings["SECRET_KEY"]


def test_production_refuses_to_start_naming_every_missing_setting():
    with pytest.raises(ConfigError) as exc:
        finalize(load_settings({"APP_ENV": "production", "REDIS_URL": "redis://x"}))
    message = str(exc.value)
    assert "\n" not in message
    for name in ("SECRET_KEY", "DATABASE_URL", "ENGINE_URL"):
        assert name in message
    assert "REDIS_URL" not in message


def test_production_starts_with_its_settings():
    env = {"APP_ENV": "production", "SECRET_KEY": "s", "DATABASE_URL": "postgresql://x/y",
           "REDIS_URL": "redis://x", "ENGINE_URL": "https://engine"}
    assert finalize(load_settings(env))["ENGINE_URL"] == "https://engine"


@pytest.mark.parametrize("raw,expected", [("0,30,300", (0, 30, 300)), ("1, 2", (1, 2)), ("", ())])
def test_retry_schedule_parses(raw, expected):
    assert parse_retry_schedule(raw) == expected


@pytest.mark.parametrize("env", [{"APP_ENV": "staging"}, {"SCAN_TIMEOUT_SECONDS": "soon"},
                                 {"WEBHOOK_RETRY_SCHEDULE": "0,x"}, {"WEBHOOK_RETRY_SCHEDULE": "-1"}])
def test_malformed_settings_are_refused(env):
    with pytest.raises(ConfigError):
        load_settings(env)


@pytest.mark.parametrize("env, expected", [
    ({"DATABASE_URL": "postgresql://scan@db/scan"}, "production"),
    ({"DATABASE_URL": "postgres://scan@db/scan"}, "production"),
    ({"DATABASE_URL": "postgresql://scan@db/scan", "APP_ENV": "development"}, "development"),
    ({"DATABASE_URL": "postgresql://scan@db/scan", "APP_ENV": "test"}, "test"),
    ({"DATABASE_URL": "sqlite:////tmp/x.sqlite3"}, "development"),
    ({}, "development"),
])
def test_an_unset_app_env_on_postgresql_means_production(env, expected):
    # An operator command run on the production host without APP_ENV keeps the SSRF guard
    # and refuses to run with the development SECRET_KEY.
    assert load_settings(env)["APP_ENV"] == expected


def test_an_operator_shell_without_app_env_on_postgresql_must_name_the_production_settings():
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        finalize(load_settings({"DATABASE_URL": "postgresql://scan@db/scan"}))
