"""D31's settings: a PostgreSQL URL with several hosts for libpq, and Redis through Sentinel."""
from __future__ import annotations

import pytest

from app.plumbing.config import (
    ConfigError,
    SentinelUrl,
    database_connect_args,
    finalize,
    load_settings,
    parse_sentinel_url,
)
from app.plumbing.db import describe_url
from app.plumbing.redis_conn import new_client, redis_url_of

MULTI = "postgresql://scan:pw-xyz@db1.internal:5432,db2.internal:5433/scans?target_session_attrs=read-write"


def test_several_database_hosts_reach_libpq_intact():
    args = database_connect_args(MULTI)
    assert args["host"] == "db1.internal,db2.internal" and args["port"] == "5432,5433"
    assert args["target_session_attrs"] == "read-write" and args["dbname"] == "scans"
    finalize(load_settings({"APP_ENV": "development", "DATABASE_URL": MULTI, "DATABASE_DIRECT_URL": MULTI}))


def test_a_multi_host_url_is_described_without_its_password():
    assert describe_url(MULTI) == "postgresql://db1.internal:5432,db2.internal:5433/scans"
    assert describe_url("postgresql://u@h1,h2:6432/d") == "postgresql://h1,h2:6432/d"  # h1: the default port
    assert describe_url("postgresql://u@/d?host=h1,h2&port=6432") == "postgresql://h1:6432,h2:6432/d"


@pytest.mark.parametrize("url,expected", [
    ("postgresql://u:pw-xyz@h1:5432,h2:54x2/db", "port that is not a number"),
    ("postgresql://u:pw-xyz@h1:5432,h2:5432/db?target_session_attrs=rw", "target_session_attrs must be one of"),
    ("postgresql://u:pw-xyz@h1,h2,h3/db?port=5432,5433", "3 hosts and 2 ports"),
    ("postgresql://u:pw-xyz@h1/db?no_such_parameter=1", "libpq can read: invalid URI query parameter"),
    ("postgresql://u:pw-xyz@[::1:5432/db", "libpq can read"),
])
def test_a_malformed_database_url_is_one_line_without_the_password(url, expected):
    for name in ("DATABASE_URL", "DATABASE_DIRECT_URL"):
        with pytest.raises(ConfigError) as exc:
            finalize(load_settings({"DATABASE_URL": "postgresql://u@h/db", name: url}))
        message = str(exc.value)
        assert message.startswith(name) and expected in message, message
        assert "pw-xyz" not in message and "\n" not in message


def test_peewee_scheme_spellings_still_read():
    assert database_connect_args("postgresql+pool://u@h:5432/db")["host"] == "h"


def test_a_sentinel_url_names_sentinels_master_and_database():
    assert parse_sentinel_url("redis+sentinel://s1:26379,s2:26380,[::1]:26381/mymaster/2") == SentinelUrl(
        (("s1", 26379), ("s2", 26380), ("::1", 26381)), "mymaster", 2)
    assert parse_sentinel_url("redis+sentinel://:pw@s1/cache") == SentinelUrl((("s1", 26379),), "cache", 0,
                                                                             None, "pw")
    assert parse_sentinel_url("redis+sentinel://app:pw@s1:1/m").username == "app"
    assert load_settings({"REDIS_URL": "redis+sentinel://s1:26379/m"})["REDIS_URL"] == "redis+sentinel://s1:26379/m"


@pytest.mark.parametrize("url,expected", [
    ("redis+sentinel://s1:26379", "name (as the Sentinels know it) is missing"),
    ("redis+sentinel://s1:26379/", "name (as the Sentinels know it) is missing"),
    ("redis+sentinel://s1:2x/m", "'s1:2x' is not a host:port"),
    ("redis+sentinel://s1:26379,,s2/m", "'' is not a host:port"),
    ("redis+sentinel://:pw-xyz@s1:99999/m", "'s1:99999' is not a host:port"),
    ("redis+sentinel://s1/m/db0", "the database 'db0' is not a number"),
    ("sentinel://s1/m", "REDIS_URL must be a redis://"),
])
def test_a_malformed_sentinel_url_is_one_line(url, expected):
    with pytest.raises(ConfigError) as exc:
        load_settings({"REDIS_URL": url})
    assert expected in str(exc.value) and "pw-xyz" not in str(exc.value) and "\n" not in str(exc.value)


def test_the_factory_makes_a_sentinel_client_for_a_sentinel_url():
    from redis.sentinel import SentinelConnectionPool
    url = "redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/mymaster/3"
    client = new_client(url)  # connects on first use only
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["password"] == "pw"
    assert [(c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
            for c in pool.sentinel_manager.sentinels] == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    assert redis_url_of(client) == url  # what other processes are handed
