"""A ``DATABASE_URL`` with several hosts (D31), as libpq reads it: the hosts are tried in order,
and ``target_session_attrs=read-write`` keeps the first that takes writes. The real server of the
test session is the last host; before it, a port nothing listens on, or a second PostgreSQL that
is read-only (``default_transaction_read_only``, which libpq's check reads, as on a standby); and
the primary moving from one address to the other while the API serves."""
from __future__ import annotations

import shutil
import time
from urllib.parse import quote

import psycopg2
import pytest

from app import create_app
from app.events.statements import signals
from app.events.statements.stored import CHANNEL
from app.extensions import db
from app.plumbing import embedded
from app.plumbing.db import check_reachable, connect_args, execute
from bench.load import Call, LoadDriver
from simulator.procutil import free_port
from tests.conftest import ServerThread, embedded_folder
from tests.reliability import netns
from tests.reliability.servers import TcpProxy
from tests.reliability.test_faults import SCAN, _through, _upstream, assert_503

closed_port = free_port  # a port nothing listens on


def with_hosts(database_url: str, hosts: list[tuple[str, int]], attrs: str | None = "read-write") -> str:
    """``database_url`` with ``hosts`` (a host may be a socket's folder) in its place, in libpq's URL form."""
    args = connect_args(database_url)
    user = quote(args.get("user", ""), safe="") + (f":{quote(args['password'], safe='')}" if args.get("password")
                                                   else "")
    where = ",".join(f"{quote(host, safe='')}:{port}" for host, port in hosts)
    query = f"?target_session_attrs={attrs}" if attrs else ""
    return f"postgresql://{user}@{where}/{quote(args.get('dbname', ''), safe='')}{query}"


def server_of(database_url: str) -> tuple[str, int]:
    args = connect_args(database_url)
    return args.get("host", "localhost"), int(args.get("port") or 5432)


def read_only_setting(url: str) -> str:
    conn = psycopg2.connect(**connect_args(url))
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW transaction_read_only")
            return cursor.fetchone()[0]
    finally:
        conn.close()


def assert_the_app_works_through(url: str, base_config, make_customer) -> None:
    """The start-up check, the pool (a read and a write through the API) and the LISTEN session."""
    check_reachable(url)
    acct = make_customer(tier="enterprise", credits=100)
    multi = create_app(dict(base_config, DATABASE_URL=url, DATABASE_DIRECT_URL=url))
    client = multi.test_client()
    assert client.get("/readyz").status_code == 200
    assert client.get(f"{SCAN}/scn_unknown", headers=acct.headers).status_code == 404
    created = client.post(SCAN, json={"target": "hosts@example.com"}, headers=acct.headers)
    assert created.status_code == 202, created.get_json()
    with db.connection_context():
        assert execute("SHOW transaction_read_only").fetchone()[0] == "off"
    session = signals.Listening(url)
    try:
        got = []
        with db.connection_context():
            execute(f"NOTIFY \"{CHANNEL}\", 'hello'")
        session.receive(5, got.append)
        assert got == ["hello"]
    finally:
        session.close()


def test_the_first_host_not_answering_the_app_connects_to_the_next(app, base_config, make_customer):
    url = with_hosts(base_config["DATABASE_URL"], [("127.0.0.1", closed_port()), server_of(base_config["DATABASE_URL"])])
    try:
        assert_the_app_works_through(url, base_config, make_customer)
    finally:
        create_app(base_config)


@pytest.fixture
def read_only_server(base_config):
    """A second PostgreSQL (the embedded wheel's) with the test database's user and database, read-only."""
    folder = embedded_folder("read-only")
    url = embedded.postgres_url(folder, durable=False)
    args = connect_args(base_config["DATABASE_URL"])
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cursor:
        user, name = args.get("user", "postgres"), args.get("dbname", "postgres")
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE ROLE "{user}" LOGIN')
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{name}" OWNER "{user}"')
        cursor.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        cursor.execute("SELECT pg_reload_conf()")
    conn.close()
    yield server_of(url)
    embedded.stop(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_read_only_first_host_is_passed_over_for_the_primary(app, base_config, make_customer, read_only_server):
    hosts = [read_only_server, server_of(base_config["DATABASE_URL"])]
    # Without target_session_attrs libpq keeps the first host: the read-only one answers there.
    assert read_only_setting(with_hosts(base_config["DATABASE_URL"], hosts, attrs=None)) == "on"
    url = with_hosts(base_config["DATABASE_URL"], hosts)
    try:
        assert_the_app_works_through(url, base_config, make_customer)
    finally:
        create_app(base_config)


def test_the_primary_moving_to_the_next_host_costs_503s_then_the_pool_recovers(app, base_config, make_customer,
                                                                               figures):
    """Two addresses for one server, each a TCP link the test can cut: the first cut (every
    connection dropped, new ones refused) is the primary gone from there; libpq finds it at the
    second. The API answers normally or 503 with Retry-After meanwhile, and recovers without a restart."""
    acct = make_customer(tier="enterprise", credits=1000, inflight=1000, hour=1000, day=1000)
    upstream = _upstream(base_config["DATABASE_URL"])
    first, second = TcpProxy(upstream), TcpProxy(upstream)
    url = with_hosts(_through(first, base_config["DATABASE_URL"]), [("127.0.0.1", first.port),
                                                                     ("127.0.0.1", second.port)])
    served = ServerThread(create_app(dict(base_config, DATABASE_URL=url, DATABASE_DIRECT_URL=url)))
    driver = LoadDriver(served.url, concurrency=8, timeout=30)

    def calls(n):
        return [Call("POST", SCAN, acct.headers, {"target": f"moved{i}@example.com"}) if i % 4 == 0 else
                Call("GET", f"{SCAN}/scn_unknown{i}", acct.headers) for i in range(n)]
    try:
        before = driver.run(calls(40))
        assert first.connections > 0 and second.connections == 0
        first.cut()
        moved_at = time.monotonic()
        after, recovered_after = [], None
        for _ in range(20):  # rounds until one is answered in full, for at most 20 rounds
            answers = driver.run(calls(16))
            after += answers
            if {a.status for a in answers} <= {202, 404}:
                recovered_after = time.monotonic() - moved_at
                break
    finally:
        driver.close()
        served.stop()
        first.close()
        second.close()
        create_app(base_config)
    assert {a.status for a in before} == {202, 404}
    assert {a.status for a in after} <= {202, 404, 503}, sorted({a.status for a in after})
    for answer in after:
        if answer.status == 503:
            assert_503(answer.status, answer.body, answer.headers)
    assert recovered_after is not None and recovered_after < 30 and second.connections > 0
    figures.update(requests=len(before) + len(after), concurrency=8,
                   faults="the primary's first address cut (connections dropped, new ones refused); "
                          "libpq found it at the second host of DATABASE_URL",
                   inputs={"before": len(before), "after": len(after)}, failures=0,
                   answered={"503": sum(a.status == 503 for a in after)},
                   recovered_seconds=round(recovered_after, 2))


_no_netns = netns.available()


@pytest.mark.skipif(_no_netns is not None, reason=_no_netns or "")
def test_a_primary_cut_off_the_network_is_left_within_30_seconds(app, base_config, make_customer, figures):
    """The first host drops off the network without a word (a network namespace whose link goes down):
    no reset, no refusal. Every call still gets its answer, normal or 503 with Retry-After, within 30 s;
    the pool and the LISTEN session leave the dead connections and the API is served from the second
    host; no restart."""
    acct = make_customer(tier="enterprise", credits=1000, inflight=1000, hour=1000, day=1000)
    base = base_config["DATABASE_URL"]
    host = netns.IsolatedHost(_upstream(base))
    url = with_hosts(base, [(host.address, host.PORT), server_of(base)]) + "&connect_timeout=2"
    served = ServerThread(create_app(dict(base_config, DATABASE_URL=url, DATABASE_DIRECT_URL=url)))
    driver = LoadDriver(served.url, concurrency=8, timeout=90)
    session = signals.Listening(url)

    def calls(n):
        return [Call("POST", SCAN, acct.headers, {"target": f"cut{i}@example.com"}) if i % 4 == 0 else
                Call("GET", f"{SCAN}/scn_unknown{i}", acct.headers) for i in range(n)]
    try:
        before = driver.run(calls(40))
        assert session._conn.info.host == host.address  # the first host serves until the cut
        host.cut()
        cut_at = time.monotonic()
        after, recovered_after, session_lost_after = [], None, None
        while time.monotonic() - cut_at < 60:  # rounds until one is answered in full
            answers = driver.run(calls(16))
            after += answers
            if {a.status for a in answers} <= {202, 404}:
                recovered_after = time.monotonic() - cut_at
                break
        while session_lost_after is None and time.monotonic() - cut_at < 60:
            try:
                session.receive(1, lambda payload: None)
            except psycopg2.Error:
                session_lost_after = time.monotonic() - cut_at
    finally:
        driver.close()
        served.stop()
        session.close()
        host.close()
        create_app(base_config)
    assert {a.status for a in before} == {202, 404}
    assert {a.status for a in after} <= {202, 404, 503}, sorted({(a.status, a.error) for a in after})
    for answer in after:
        assert answer.seconds < 30, (answer.status, answer.seconds)
        if answer.status == 503:
            assert_503(answer.status, answer.body, answer.headers)
    assert recovered_after is not None and recovered_after < 30, recovered_after
    assert session_lost_after is not None and session_lost_after < 30, session_lost_after
    figures.update(requests=len(before) + len(after), concurrency=8,
                   faults="the first host of DATABASE_URL cut off the network (link down in its namespace: "
                          "no reset, no refusal)",
                   inputs={"before": len(before), "after": len(after)}, failures=0,
                   answered={"503": sum(a.status == 503 for a in after)},
                   slowest_answer_seconds=round(max(a.seconds for a in after), 1),
                   recovered_seconds=round(recovered_after, 1), listen_session_lost_seconds=round(session_lost_after, 1))
