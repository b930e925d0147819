"""Faults: Redis stopped and restarted, the database unreachable, the engine hanging, flaky or
answering garbage, hostile webhook receivers. After each, every scan reaches a final state,
every webhook delivery is logged with its attempts, and the books balance (D3, D13).

Already covered elsewhere, and referenced by docs/reliability.md rather than repeated here:
a worker SIGKILLed mid-job (tests/workers/test_worker_process.py), Redis flushed
(tests/workers/test_recovery.py), an engine down / flaky / answering nonsense while tracking
(tests/workers/test_engine_jobs.py), receivers slow, closed, redirecting or failing
(tests/workers/test_webhooks.py).
"""
from __future__ import annotations

import re
import signal
import socket
import struct
import threading
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit, urlunsplit

import freezegun.api as freezegun_api  # its real_monotonic: freezegun rewrites aliases elsewhere
import pytest
import requests
from freezegun import freeze_time
from peewee import OperationalError

from app import create_app
from app.accounts.models import CreditLedger
from app.billing import charges
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.jobs import WEBHOOK_QUEUE
from app.plumbing.models import utcnow
from app.recovery import sweep
from app.scans.models import BulkBatch, Scan
from app.webhooks.models import DeliveryAttempt, WebhookDelivery
from bench.load import Call, LoadDriver
from tests.api.helpers import assert_counters_match
from tests.conftest import ServerThread
from tests.jobrunner import JobRunner
from tests.reliability.servers import CommitCutter, RawServer, TcpProxy, free_port, read_request_head

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
SECRET = "whsec_ZmF1bHQgcmVjZWl2ZXIgc2VjcmV0IDAxMjM="
STALE = 30
START = "2026-11-21 12:00:00"
FINAL = ("completed", "failed")


# --- helpers -----------------------------------------------------------------------------------

class Receiver:
    """A named webhook receiver of the simulator (E4)."""

    def __init__(self, simulator, name: str, responses=(200,), delay_ms=0):
        self.base, self.name = simulator.url, name
        self.url = f"{simulator.url}/_sim/hooks/{name}"
        requests.post(f"{self.base}/_sim/receivers/{name}", timeout=5,
                      json={"secret": SECRET, "responses": list(responses), "delay_ms": delay_ms}).raise_for_status()

    def deliveries(self) -> list[dict]:
        return requests.get(f"{self.base}/_sim/receivers/{self.name}/deliveries", timeout=5).json()["deliveries"]


def scans_of(customer_id) -> dict:
    with db.connection_context():
        return {s.id: s for s in Scan.select().where(Scan.customer == customer_id)}


def settled(customer_id) -> bool:
    """Every scan final and every delivery of its scans out of ``pending``."""
    with db.connection_context():
        if Scan.select().where((Scan.customer == customer_id) & Scan.status.not_in(FINAL)).exists():
            return False
        return not WebhookDelivery.select().where((WebhookDelivery.customer == customer_id)
                                                  & (WebhookDelivery.status == "pending")).exists()


def assert_settled(account, *, deliveries_expected=True) -> dict:
    """The end state every fault test requires; returns figures."""
    with db.connection_context():
        scans = list(Scan.select().where(Scan.customer == account.id))
        assert all(s.status in FINAL for s in scans), [(s.id, s.status) for s in scans if s.status not in FINAL]
        deliveries = list(WebhookDelivery.select().where(WebhookDelivery.customer == account.id))
        attempts = list(DeliveryAttempt.select().join(WebhookDelivery)
                        .where(WebhookDelivery.customer == account.id))
        # Every delivery logged: one row per attempt made, none left in progress, none pending.
        assert all(d.status in ("succeeded", "failed") for d in deliveries)
        for delivery in deliveries:
            mine = sorted(a.number for a in attempts if a.delivery_id == delivery.id)
            assert mine == list(range(1, delivery.attempts + 1)) and mine, delivery.id
        assert not [a for a in attempts if a.outcome == "in_progress"]
        if deliveries_expected:
            assert sorted(d.scan_id for d in deliveries) == sorted(s.id for s in scans)
        # The books: the ledger sums to the balance, every single scan has its one charge.
        assert charges.ledger_sum(account.id) == charges.balance_of(account.id) >= 0
        assert_counters_match(account.id)  # in flight and the windows, after every reversal
        ledger = list(CreditLedger.select().where(CreditLedger.customer == account.id))
        charged = [r.scan_id for r in ledger if r.reason == "scan"]
        refunded = [r.scan_id for r in ledger if r.reason == "refund" and r.scan_id]
        singles = sorted(s.id for s in scans if s.bulk_id is None)
        assert sorted(set(charged) - set(refunded)) == singles
    return {"scans": len(scans), "completed": sum(s.status == "completed" for s in scans),
            "failed": sum(s.status == "failed" for s in scans), "deliveries": len(deliveries),
            "attempts": len(attempts)}


def assert_503(response_status, body, headers) -> None:
    assert response_status == 503, (response_status, body)
    assert body["ok"] is False and body["error"] == "service_unavailable" and body["request_id"]
    assert int(headers["Retry-After"]) >= 1


# --- Redis: a dedicated redis-server this test may kill ------------------------------------------

# Scans in flight are tracked by due looks in the database (D24): Redis's loss leaves the sweep
# no scan to re-dispatch.


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
@pytest.mark.processes  # a dedicated redis-server
def test_redis_killed_during_creations_loses_no_scan_and_the_sweep_dispatches_them(
        redis_app, dedicated_redis, make_customer, simulator, figures):
    hook = Receiver(simulator, "redis-killed")
    acct = make_customer(tier="enterprise", credits=10_000, inflight=1000, hour=1000, day=1000,
                         webhook_url=hook.url, webhook_secret=SECRET)
    server = ServerThread(redis_app)
    driver = LoadDriver(server.url, concurrency=8, timeout=30)
    killed, lock = {}, threading.Lock()

    def creations(n, phase):
        return [Call("POST", SCAN, acct.headers, {"target": f"redis.{phase}.{i}@example.com"}, phase) for i in range(n)]

    def kill_after_ten(answer):
        with lock:
            killed["seen"] = killed.get("seen", 0) + 1
            if killed["seen"] == 10:
                dedicated_redis.kill()  # SIGKILL, with the rest of the batch in flight
                killed["at"] = time.monotonic()

    try:
        answers = driver.run(creations(20, "before"))
        answers += driver.run(creations(40, "during"), on_answer=kill_after_ten)
        assert not dedicated_redis.running()
        started = time.monotonic()
        answers += driver.run(creations(20, "after"))
        down_seconds = time.monotonic() - started
        ids = [a.body["scan_id"] for a in answers if a.status == 202]
        # Reads need only the database (D13); readiness names Redis; liveness is unaffected.
        reads = driver.run([Call("GET", f"{SCAN}/{i}", acct.headers) for i in ids])
        ready = requests.get(f"{server.url}/readyz", timeout=10)
        alive = requests.get(f"{server.url}/healthz", timeout=10)
    finally:
        driver.close()
        server.stop()

    statuses = sorted({a.status for a in answers})
    assert set(statuses) <= {202, 503}, statuses
    for answer in answers:
        if answer.status == 503:
            assert_503(answer.status, answer.body, answer.headers)
    assert {r.status for r in reads} == {200} and all(r.body["status"] == "queued" for r in reads)
    assert ready.status_code == 503 and "redis" in ready.json()["message"] and alive.status_code == 200
    assert down_seconds < 20  # 20 creations with Redis gone: no call waits on it
    # Never a lost scan: exactly the scans answered 202 exist, each charged once.
    assert sorted(scans_of(acct.id)) == sorted(ids)

    dedicated_redis.start()  # back, empty: the jobs dispatched before the kill are gone too
    with freeze_time(utcnow() + timedelta(seconds=STALE + 5)) as frozen:
        report = sweep()
        assert report["scans_redispatched"] == 0
        jobs = JobRunner(runtime.redis())
        assert jobs.run(frozen, until=lambda: settled(acct.id))
    end = assert_settled(acct)
    assert end["completed"] == len(ids) and end["attempts"] == len(ids)
    received = hook.deliveries()
    assert len(received) == len(ids) and all(d["signature_valid"] for d in received)
    figures.update(requests=len(answers) + len(reads) + 2, concurrency=8,
                   faults="redis-server SIGKILLed after 10 of 40 concurrent creations; 20 more while down; "
                          "restarted empty",
                   inputs={"creations": len(answers), "reads_while_down": len(reads)},
                   failures=sum(a.status != 202 for a in answers), answered={
                       str(s): sum(a.status == s for a in answers) for s in statuses},
                   recovered=report["scans_redispatched"], end=end)


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1, SCAN_TIMEOUT_SECONDS=60,
                    WEBHOOK_RETRY_SCHEDULE=(0, 30, 300))
@pytest.mark.processes  # a dedicated redis-server
def test_redis_restarted_mid_run_loses_its_data_and_the_sweep_recovers_everything(
        redis_app, dedicated_redis, make_customer, simulator, figures):
    hook = Receiver(simulator, "redis-restarted", responses=[500])  # failing until the end
    acct = make_customer(tier="enterprise", credits=10_000, inflight=1000, hour=1000, day=1000,
                         webhook_url=hook.url, webhook_secret=SECRET)
    client = redis_app.test_client()
    targets = ["ann@example.com", "+4915123456788", "torvalds", "slow.sue@example.com", "slow.sam@example.com",
               "fail.fred@example.com", "hang.harry@example.com", "bob@example.com", "+447700900123", "octocat"]
    with freeze_time(START) as frozen:
        ids = []
        for target in targets:
            response = client.post(SCAN, json={"target": target}, headers=acct.headers)
            assert response.status_code == 202, response.json
            ids.append(response.json["scan_id"])
        response = client.post(BULK, headers=acct.headers, json={"targets": [
            {"target": f"bulk{i}@example.com"} for i in range(5)] + [{"target": "slow.bulk@example.com"}]})
        assert response.status_code == 202
        ids += [s["scan_id"] for s in response.json["scans"]]
        jobs = JobRunner(runtime.redis())

        def mid_run():
            scans = scans_of(acct.id).values()
            with db.connection_context():
                waiting_retry = WebhookDelivery.select().where((WebhookDelivery.status == "pending")
                                                               & (WebhookDelivery.attempts >= 2)).count()
            return waiting_retry >= 3 and sum(s.status in ("queued", "running") for s in scans) >= 2

        assert jobs.run(frozen, until=mid_run)
        in_flight = [s.id for s in scans_of(acct.id).values() if s.status not in FINAL]
        with db.connection_context():
            pending = WebhookDelivery.select().where(WebhookDelivery.status == "pending").count()
        dedicated_redis.kill()
        dedicated_redis.start()  # a restart without persistence: every job and schedule is gone
        jobs = JobRunner(runtime.redis(), queue_names=(WEBHOOK_QUEUE,))
        assert jobs.run(frozen) and jobs.next_scheduled() is None  # no delivery left to run
        assert not settled(acct.id)

        frozen.tick(STALE + 1)
        report = sweep()
        assert report["scans_redispatched"] == 0
        jobs = JobRunner(runtime.redis())
        assert report["deliveries_redispatched"] == pending
        hook = Receiver(simulator, "redis-restarted", responses=[200])  # the receiver is back too
        assert jobs.run(frozen, until=lambda: settled(acct.id))
    end = assert_settled(acct)
    by_id = scans_of(acct.id)
    assert by_id[ids[5]].failure_code == "engine_failed" and by_id[ids[6]].failure_code == "engine_timeout"
    assert end["completed"] == len(ids) - 2
    with db.connection_context():
        assert {d.status for d in WebhookDelivery.select()} == {"succeeded"}
        attempts = sorted(d.attempts for d in WebhookDelivery.select())
    assert attempts[0] >= 1 and attempts[-1] >= 3  # the retries before the loss, then the sweep's
    figures.update(requests=len(targets) + 1, concurrency=1,
                   faults=f"redis-server SIGKILLed and restarted empty with {len(in_flight)} scans in flight "
                          f"and {pending} deliveries waiting for a retry",
                   inputs={"scans": len(ids)}, failures=0, recovered=report, end=end, attempts=attempts)


# --- the database --------------------------------------------------------------------------------

def unreachable_database_url() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/unreachable"


CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


def portal_login(client, email, password):
    page = client.get("/app/login").get_data(as_text=True)
    token = CSRF_RE.search(page).group(1)
    return client.post("/app/login", data={"email": email, "password": password, "csrf_token": token}), token


def test_database_unreachable_is_503_on_every_route_that_needs_it_and_nothing_is_written(
        app, base_config, make_customer, figures):
    from app.accounts import admin
    acct = make_customer(tier="business", credits=100)
    with db.connection_context():
        admin.create_user(acct.id, "ops@fault.example", "correct horse battery")
    good = app.test_client()
    assert portal_login(good, "ops@fault.example", "correct horse battery")[0].status_code == 302
    login_token = CSRF_RE.search(good.get("/app/login").get_data(as_text=True)).group(1)
    session_cookie = good.get_cookie("session").value  # logged in, holding that form's CSRF secret

    broken = create_app(dict(base_config, DATABASE_URL=unreachable_database_url()))
    client = broken.test_client()
    client.set_cookie("session", session_cookie)
    needs_db = [
        ("POST", SCAN, {"json": {"target": "jane@example.com"}}),
        ("GET", f"{SCAN}/scn_x", {}),
        ("POST", BULK, {"json": {"targets": [{"target": "jane@example.com"}]}}),
        ("GET", f"{BULK}/blk_x", {}),
        ("GET", "/app/api-keys", {}),
        ("GET", "/app/usage", {}),
    ]
    answers = {}
    try:
        for method, path, kwargs in needs_db:
            started = time.monotonic()
            response = client.open(path, method=method, headers=acct.headers, **kwargs)
            answers[f"{method} {path}"] = response.status_code
            assert response.mimetype == "application/json", (path, response.get_data(as_text=True)[:200])
            assert_503(response.status_code, response.get_json(), response.headers)
            assert time.monotonic() - started < 10  # bounded by the connect timeout, not hanging
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.get_json()["checks"]["database"].startswith("failed")
        assert "database" in ready.get_json()["message"] and ready.headers["Retry-After"]
        # What needs no database still answers.
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/v1/openapi.json").status_code == 200
        assert client.get("/nope").status_code == 404
        # /metrics reads no table: it still answers, and says the database is down.
        scrape = client.get("/metrics").get_data(as_text=True)
        assert "scan_api_database_up 0.0" in scrape
        assert client.post(SCAN, json={"target": "jane@example.com"}).status_code == 401  # no key: no look-up
        login = client.post("/app/login", data={"email": "ops@fault.example", "password": "x" * 12,
                                                "csrf_token": login_token})
        assert_503(login.status_code, login.get_json(), login.headers)
    finally:
        create_app(base_config)  # rebind the good database
    with db.connection_context():  # nothing was written: the customer's grant only
        assert Scan.select().count() == 0 and BulkBatch.select().count() == 0
        assert [r.delta for r in CreditLedger.select().where(CreditLedger.customer == acct.id)] == [100]
        assert charges.balance_of(acct.id) == 100
    figures.update(requests=len(needs_db) + 6, concurrency=1, faults="database unreachable (closed port)",
                   inputs={"routes_needing_db": len(needs_db) + 1, "routes_without_db": 4}, failures=0,
                   answers=answers)


class StatementFaults:
    """Makes the ``fail_at``-th SQL statement from now raise OperationalError, as a lost database does."""

    def __init__(self, monkeypatch):
        self.database = db.obj
        self.count, self.fail_at, self.injected = 0, None, 0
        real = self.database.execute_sql

        def execute_sql(sql, params=None, *args, **kwargs):
            self.count += 1
            if self.fail_at is not None and self.count == self.fail_at:
                self.injected += 1
                raise OperationalError("injected fault: the database went away")
            return real(sql, params, *args, **kwargs)
        monkeypatch.setattr(self.database, "execute_sql", execute_sql)

    def arm(self, fail_at):
        self.count, self.fail_at = 0, fail_at

    def disarm(self):
        self.fail_at = None


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_the_database_failing_at_any_statement_leaves_nothing_half_written(app, make_customer, monkeypatch,
                                                                             figures):
    acct = make_customer(tier="enterprise", credits=1000, inflight=1000, hour=1000, day=1000)
    client = app.test_client()
    # Something to read: a scan and a batch made before the faults.
    own_scan = client.post(SCAN, json={"target": "jane@example.com"}, headers=acct.headers).json["scan_id"]
    own_bulk = client.post(BULK, json={"targets": [{"target": "ann@example.com"}]}, headers=acct.headers).json
    operations = {
        "create": ("POST", SCAN, {"json": {"target": "jane@example.com"}}),
        "bulk": ("POST", BULK, {"json": {"targets": [{"target": "a@example.com"}, {"target": "b@example.com"},
                                                     {"target": "x"}]}}),
        "read": ("GET", f"{SCAN}/{own_scan}", {}),
        "bulk_read": ("GET", f"{BULK}/{own_bulk['bulk_id']}", {}),
        "invalid": ("POST", SCAN, {"json": {"target": "ab"}}),
    }
    faults = StatementFaults(monkeypatch)
    outcomes, answers = {}, []
    created = {own_scan} | {s["scan_id"] for s in own_bulk["scans"]}
    for name, (method, path, kwargs) in operations.items():
        seen = []
        for fail_at in range(1, 40):
            faults.arm(fail_at)
            before = faults.injected
            response = client.open(path, method=method, headers=acct.headers, **kwargs)
            faults.disarm()
            hit = faults.injected > before
            body = response.get_json()
            answers.append((name, response.status_code, body))
            seen.append(response.status_code)
            if response.status_code == 503:
                assert_503(503, body, response.headers)
            else:
                assert response.status_code in (200, 202, 400), (name, fail_at, body)
            if response.status_code == 202:
                created.update([body["scan_id"]] if "scan_id" in body else [s["scan_id"] for s in body["scans"]])
            # After every single fault: the books balance and every scan has its charge.
            with db.connection_context():
                assert charges.ledger_sum(acct.id) == charges.balance_of(acct.id)
                scans = list(Scan.select().where(Scan.customer == acct.id))
                charged = {r.scan_id for r in CreditLedger.select().where(
                    (CreditLedger.customer == acct.id) & (CreditLedger.reason == "scan"))}
                assert {s.id for s in scans if s.bulk_id is None} <= charged
            if not hit:
                break  # the call needed fewer statements than fail_at: every position was tried
        outcomes[name] = {"statements": len(seen) - 1, "answers": seen}
        assert seen[-1] in (200, 202, 400) and seen[:-1] and set(seen[:-1]) <= {503, 200, 202, 400}

    # A reservation whose creation died between its commit and the engine's answer being recorded
    # was charged and never answered 202: the sweep reverses it (D13 "lost reservations").
    with freeze_time(utcnow() + timedelta(seconds=STALE + 5)):
        report = sweep()
    with db.connection_context():
        scans = {s.id for s in Scan.select().where(Scan.customer == acct.id)}
        batches_with_scans = {s.bulk_id for s in Scan.select().where(Scan.customer == acct.id) if s.bulk_id}
    assert scans == created  # exactly the scans answered 202: nothing half-created survives
    expected = 1000 - 1 - 1  # the scan and the batch made first
    for _name, status, body in answers:
        if status in (200, 400):
            expected -= 1
        elif status == 202:
            expected -= max(body.get("queued", 1), 1)
    with db.connection_context():
        assert charges.balance_of(acct.id) == expected == charges.ledger_sum(acct.id)
    answered_batches = {b["bulk_id"] for n, s, b in answers if s == 202 and n == "bulk"}
    assert batches_with_scans <= {own_bulk["bulk_id"]} | answered_batches
    figures.update(requests=len(answers) + 2, concurrency=1,
                   faults=f"{faults.injected} injected OperationalErrors, one at each SQL statement position",
                   inputs={name: o["statements"] for name, o in outcomes.items()},
                   failures=0, reversed_by_sweep=report["reservations_reversed"],
                   answers={name: o["answers"] for name, o in outcomes.items()})


def test_postgresql_lost_mid_run_answers_503_then_the_pool_recovers(app, base_config, make_customer, figures):
    acct = make_customer(tier="enterprise", credits=1000, inflight=1000, hour=1000, day=1000)
    proxy = TcpProxy(_upstream(base_config["DATABASE_URL"]))
    proxied = create_app(dict(base_config, DATABASE_URL=_through(proxy, base_config["DATABASE_URL"])))
    served = ServerThread(proxied)
    driver = LoadDriver(served.url, concurrency=8, timeout=30)
    try:
        def calls(n):
            return [Call("POST", SCAN, acct.headers, {"target": f"pg{i}@example.com"}) if i % 4 == 0 else
                                   Call("GET", f"{SCAN}/scn_unknown{i}", acct.headers) for i in range(n)]
        before = driver.run(calls(40))
        proxy.cut()
        started = time.monotonic()
        during = driver.run(calls(40))
        down_seconds = time.monotonic() - started
        ready = requests.get(f"{served.url}/readyz", timeout=10)
        proxy.restore()
        after = driver.run(calls(80))
    finally:
        driver.close()
        served.stop()
        proxy.close()
        create_app(base_config)
    assert {a.status for a in before} == {202, 404}
    assert {a.status for a in during} == {503}
    for answer in during:
        assert_503(answer.status, answer.body, answer.headers)
    assert ready.status_code == 503 and "database" in ready.json()["message"]
    assert down_seconds < 20
    # Back: each pooled connection the cut left stale fails once at most, then every call is served.
    stale = [a for a in after if a.status == 503]
    assert len(stale) <= 8 and {a.status for a in after[-40:]} == {202, 404}
    with db.connection_context():
        assert charges.ledger_sum(acct.id) == charges.balance_of(acct.id)
        created = {a.body["scan_id"] for a in before + during + after if a.status == 202}
        assert {s.id for s in Scan.select().where(Scan.customer == acct.id)} == created
    figures.update(requests=len(before) + len(during) + len(after) + 1, concurrency=8,
                   faults="TCP link to PostgreSQL cut mid-run (every connection dropped), then restored",
                   inputs={"before": len(before), "during": len(during), "after": len(after)},
                   failures=0, stale_pool_503s_after_restore=len(stale))


def _upstream(database_url: str) -> tuple[str, int] | str:
    """Where a proxy reaches the test database: its host and port, or the unix socket of the
    session's embedded server (which listens on ``?host=<its folder>`` only)."""
    url = urlsplit(database_url)
    if url.hostname:
        return url.hostname, url.port or 5432
    return f"{parse_qs(url.query)['host'][0]}/.s.PGSQL.{url.port or 5432}"


def _through(proxy, database_url: str) -> str:
    """``database_url`` with the proxy's loopback port in place of the server's address."""
    url = urlsplit(database_url)
    netloc = f"{url.username}@127.0.0.1:{proxy.port}" if url.username else f"127.0.0.1:{proxy.port}"
    return urlunsplit(url._replace(netloc=netloc, query=""))


@pytest.mark.parametrize("path, body", [
    (SCAN, {"target": "lost.commit@example.com"}),
    (BULK, {"targets": [{"target": "lost.one@example.com"}, {"target": "lost.two@example.com"}]}),
], ids=["single", "bulk"])
@pytest.mark.parametrize("cut", ["after", "before"])
def test_a_creation_whose_commit_answer_is_lost_answers_what_happened(app, base_config, make_customer, jobs,
                                                                     cut, path, body):
    """The connection to PostgreSQL breaks at the creation's COMMIT. "after": the server committed
    and its answer was lost: the creation is served (202), charged once, and its scans run.
    "before": the COMMIT never arrived and the server rolled back: 503, nothing written or charged."""
    acct = make_customer(tier="enterprise", credits=100)
    proxy = CommitCutter(_upstream(base_config["DATABASE_URL"]))
    proxied = create_app(dict(base_config, DATABASE_URL=_through(proxy, base_config["DATABASE_URL"])))
    try:
        proxy.arm(cut)
        answer = proxied.test_client().post(path, json=body, headers=acct.headers)
    finally:
        proxy.close()
        create_app(base_config)
    assert proxy.cuts == 1  # the fault really happened, at a COMMIT
    with db.connection_context():
        scans = list(Scan.select().where(Scan.customer == acct.id))
        assert charges.ledger_sum(acct.id) == charges.balance_of(acct.id)
        balance = charges.balance_of(acct.id)
    if cut == "after":
        assert answer.status_code == 202, answer.get_json()
        created = [answer.get_json()["scan_id"]] if path == SCAN else [s["scan_id"] for s in answer.get_json()["scans"]]
        assert sorted(s.id for s in scans) == sorted(created)
        assert all(s.engine_id for s in scans)  # submitted to the engine, so they run
        assert balance == 100 - len(created)
    else:
        assert answer.status_code == 503, answer.get_json()
        assert answer.get_json()["error"] == "service_unavailable"
        assert scans == []
        assert balance == 100


# --- the engine ------------------------------------------------------------------------------------

class SlowEngine:
    """Forwards to the simulator after ``delay`` seconds (on the calls ``which`` selects: ``LOOK`` for
    a look at a scan, single or batch, else the HTTP method, e.g. ``POST`` for submissions)."""

    def __init__(self, upstream, delay, which=("POST",), first=None):
        self.upstream, self.delay, self.which, self.first = upstream, delay, which, first
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else None
        look = method == "GET" or path == "/v1/investigations/status"
        if ("LOOK" if look else method) in self.which:
            with self._lock:
                self.calls += 1
                slow = self.first is None or self.calls <= self.first
            if slow:
                time.sleep(self.delay)
        forwarded = requests.request(method, f"{self.upstream}{path}", data=body, timeout=10, headers={
            "Authorization": environ.get("HTTP_AUTHORIZATION", ""), "Content-Type": "application/json"})
        start_response(f"{forwarded.status_code} X", [("Content-Type", "application/json")])
        return [forwarded.content]


def use_engine(monkeypatch, url):
    monkeypatch.setitem(runtime.config, "ENGINE_URL", url)


def assert_nothing_created(acct, credits):
    with db.connection_context():
        assert Scan.select().where(Scan.customer == acct.id).count() == 0
        assert BulkBatch.select().where(BulkBatch.customer == acct.id).count() == 0
        assert charges.balance_of(acct.id) == credits == charges.ledger_sum(acct.id)
        return [r.reason for r in CreditLedger.select().where(CreditLedger.customer == acct.id)
                .order_by(CreditLedger.id)]


@pytest.mark.config(ENGINE_SUBMIT_TIMEOUT_SECONDS=0.5)
def test_an_engine_hanging_past_the_submit_timeout_is_502_with_no_scan_and_no_net_charge(
        client, make_customer, simulator, monkeypatch, figures):
    hanging = ServerThread(SlowEngine(simulator.url, delay=3.0))
    use_engine(monkeypatch, hanging.url)
    acct = make_customer(tier="business", credits=50)
    timings = []
    try:
        for path, body in ((SCAN, {"target": "jane@example.com"}),
                           (BULK, {"targets": [{"target": "a@example.com"}, {"target": "+447700900123"}]})):
            started = time.monotonic()
            response = client.post(path, json=body, headers=acct.headers)
            timings.append(round(time.monotonic() - started, 2))
            assert response.status_code == 502 and response.json["error"] == "engine_submit_failed"
            assert response.headers["Retry-After"] == "30" and response.headers["X-Credits-Remaining"] == "50"
            assert timings[-1] < 2.0  # the 0.5 s submit timeout, not the engine's 3 s
    finally:
        hanging.stop()
    reasons = assert_nothing_created(acct, 50)
    assert reasons == ["grant", "scan", "refund", "bulk", "refund"]  # reserved, then reversed
    figures.update(requests=2, concurrency=1, faults="engine answers after 3 s; submit timeout 0.5 s",
                   inputs={"single": 1, "bulk": 1}, failures=0, answer_seconds=timings)


@pytest.mark.config(ENGINE_SUBMIT_TIMEOUT_SECONDS=3, ENGINE_POLL_SECONDS=1)
def test_the_inflight_limit_holds_while_engine_calls_are_pending(app, served_app, make_customer, simulator,
                                                                monkeypatch, figures):
    slow = ServerThread(SlowEngine(simulator.url, delay=1.0))
    use_engine(monkeypatch, slow.url)
    acct = make_customer(tier="pro", credits=100)  # in flight 3
    driver = LoadDriver(served_app.url, concurrency=12, timeout=30)
    try:
        answers = driver.run([Call("POST", SCAN, acct.headers, {"target": f"p{i}@example.com"}) for i in range(12)])
    finally:
        driver.close()
        slow.stop()
    statuses = sorted(a.status for a in answers)
    assert statuses == [202] * 3 + [429] * 9, statuses
    assert {a.body["error"] for a in answers if a.status == 429} == {"rate_limit_inflight"}
    assert slow.server.app.calls == 3  # the engine never saw the refused ones
    use_engine(monkeypatch, simulator.url)
    with freeze_time(utcnow()) as frozen:
        assert JobRunner(runtime.redis()).run(frozen, until=lambda: settled(acct.id))
    end = assert_settled(acct, deliveries_expected=False)
    figures.update(requests=12, concurrency=12, faults="every engine submission held 1 s",
                   inputs={"creations": 12}, failures=0, accepted=3, end=end)


@pytest.mark.config(ENGINE_POLL_SECONDS=1)
def test_a_flaky_engine_during_creation_never_leaves_a_half_created_scan(app, served_app, make_customer, simulator,
                                                                        figures):
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "flaky", "every": 3}, timeout=5)
    acct = make_customer(tier="enterprise", credits=1000, inflight=1000, hour=1000, day=1000)
    calls = [Call("POST", SCAN, acct.headers, {"target": f"flaky{i}@example.com"}) for i in range(30)]
    calls += [Call("POST", BULK, acct.headers, {"targets": [{"target": f"b{j}.{i}@example.com"} for j in range(5)]})
              for i in range(6)]
    driver = LoadDriver(served_app.url, concurrency=8, timeout=30)
    try:
        answers = driver.run(calls)
    finally:
        driver.close()
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "up"}, timeout=5)
    assert {a.status for a in answers} <= {202, 502} and {202, 502} <= {a.status for a in answers}
    failed = [a for a in answers if a.status == 502]
    assert all(a.body["error"] == "engine_submit_failed" and a.headers["Retry-After"] == "30" for a in failed)
    created = set()
    for a in answers:
        if a.status == 202:
            created.update([a.body["scan_id"]] if "scan_id" in a.body else [s["scan_id"] for s in a.body["scans"]])
    assert set(scans_of(acct.id)) == created
    with db.connection_context():
        refunds = CreditLedger.select().where((CreditLedger.customer == acct.id)
                                              & (CreditLedger.reason == "refund")).count()
    assert refunds == len(failed)
    with freeze_time(utcnow()) as frozen:
        assert JobRunner(runtime.redis()).run(frozen, until=lambda: settled(acct.id))
    end = assert_settled(acct, deliveries_expected=False)
    assert end["completed"] == len(created)
    figures.update(requests=len(calls), concurrency=8, faults="every 3rd engine call answers 500",
                   inputs={"creations": 30, "bulk_calls": 6}, failures=0,
                   answered={"202": len(answers) - len(failed), "502": len(failed)}, end=end)


def _canned(status_line: bytes, headers: list[bytes], body: bytes):
    def behaviour(conn, stopped):
        read_request_head(conn)
        conn.sendall(status_line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)
    return behaviour


def _reset(conn, stopped):
    read_request_head(conn)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST


def _half_answer(conn, stopped):
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"id\":")


def _json(status: bytes, body: str):
    data = body.encode()
    return _canned(b"HTTP/1.1 " + status, [b"Content-Type: application/json",
                                            b"Content-Length: " + str(len(data)).encode()], data)


GARBAGE_ENGINES = {
    "not json": _json(b"201 Created", "{not json"),
    "json array": _json(b"201 Created", "[1, 2, 3]"),
    "no id": _json(b"201 Created", '{"recipes": 3, "eta_seconds": 60}'),
    "id not a string": _json(b"201 Created", '{"id": 12, "recipes": 3}'),
    "empty id": _json(b"201 Created", '{"id": "", "recipes": 3}'),
    "no items, or too few": _json(b"201 Created", '{"items": []}'),
    "html page": _canned(b"HTTP/1.1 200 OK", [b"Content-Type: text/html", b"Content-Length: 13"], b"<html></html>"),
    "redirect": _canned(b"HTTP/1.1 302 Found", [b"Location: http://169.254.169.254/", b"Content-Length: 0"], b""),
    "404": _json(b"404 Not Found", '{"error": "not_found"}'),
    "connection reset": _reset,
    "answer cut short": _half_answer,
    "not http": _canned(b"SSH-2.0-OpenSSH_9.6", [], b""),
}


@pytest.mark.parametrize("behaviour", list(GARBAGE_ENGINES), ids=list(GARBAGE_ENGINES))
def test_garbage_from_the_engine_on_submission_is_502_with_no_scan(client, make_customer, monkeypatch, behaviour,
                                                                   figures):
    engine = RawServer(GARBAGE_ENGINES[behaviour])
    use_engine(monkeypatch, engine.url)
    acct = make_customer(tier="business", credits=20)
    try:
        answers = [client.post(SCAN, json={"target": "jane@example.com"}, headers=acct.headers),
                   client.post(BULK, json={"targets": [{"target": "a@example.com"}]}, headers=acct.headers)]
    finally:
        engine.stop()
    for response in answers:
        assert response.status_code == 502 and response.json["error"] == "engine_submit_failed", response.json
        assert response.headers["Retry-After"] == "30"
    assert engine.accepted == 2  # each call reached the engine once: no retry on a submission
    assert_nothing_created(acct, 20)
    figures.update(requests=2, concurrency=1, faults=f"engine: {behaviour}", inputs={"single": 1, "bulk": 1},
                   failures=0)


@pytest.mark.config(ENGINE_POLL_SECONDS=1, ENGINE_STATUS_TIMEOUT_SECONDS=0.3)
def test_an_engine_hanging_while_tracking_is_retried_until_it_answers(client, make_customer, simulator, monkeypatch,
                                                                      jobs, figures):
    hanging = ServerThread(SlowEngine(simulator.url, delay=1.0, which=("LOOK",), first=3))
    use_engine(monkeypatch, hanging.url)
    hook = Receiver(simulator, "tracking-hang")
    acct = make_customer(tier="business", credits=20, webhook_url=hook.url, webhook_secret=SECRET)
    try:
        with freeze_time(START) as frozen:
            response = client.post(SCAN, json={"target": "jane@example.com"}, headers=acct.headers)
            assert response.status_code == 202
            scan_id = response.json["scan_id"]
            errors = []
            assert jobs.run(frozen, until=lambda: errors.append(scans_of(acct.id)[scan_id].check_errors)
                            or settled(acct.id))
    finally:
        hanging.stop()
    assert max(errors) == 3 and scans_of(acct.id)[scan_id].status == "completed"
    end = assert_settled(acct)
    assert len(hook.deliveries()) == 1
    figures.update(requests=1, concurrency=1, faults="first 3 engine status calls hang past the 0.3 s timeout",
                   inputs={"scans": 1}, failures=0, engine_errors_retried=max(errors), end=end)


# --- hostile webhook receivers -------------------------------------------------------------------

def _trickle(conn, stopped):
    """Answers one byte every 0.2 s: each read is quick, the whole answer never ends in time."""
    read_request_head(conn)
    for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 200:
        if stopped.is_set():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


def _huge_body(conn, stopped):
    read_request_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000000\r\n\r\n")
    chunk = b"x" * 65536
    deadline = freezegun_api.real_monotonic() + 10
    while freezegun_api.real_monotonic() < deadline and not stopped.is_set():
        conn.sendall(chunk)


def _silent(conn, stopped):
    read_request_head(conn)
    stopped.wait(10)


HOSTILE_RECEIVERS = {
    # behaviour: (what it does, expected outcome, expected error)
    "trickles its answer": (_trickle, "failed", "timeout"),
    "never answers": (_silent, "failed", "timeout"),
    "streams a 1 GB body": (_huge_body, "succeeded", None),
    "resets the connection": (_reset, "failed", "connection_error"),
    "answers cut short": (_half_answer, "succeeded", None),
    "is not HTTP": (_canned(b"220 smtp.example ESMTP ready", [], b""), "failed", "connection_error"),
    "redirects to the metadata address": (
        _canned(b"HTTP/1.1 307 Temporary Redirect", [b"Location: http://169.254.169.254/latest/meta-data/",
                                                      b"Content-Length: 0"], b""), "failed", "redirect_not_followed"),
}


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=(), WEBHOOK_TIMEOUT_SECONDS=1.0, ENGINE_POLL_SECONDS=1)
@pytest.mark.parametrize("behaviour", list(HOSTILE_RECEIVERS), ids=list(HOSTILE_RECEIVERS))
def test_a_hostile_receiver_costs_one_bounded_logged_attempt(client, make_customer, jobs, behaviour, figures):
    handler, outcome, error = HOSTILE_RECEIVERS[behaviour]
    receiver = RawServer(handler)
    acct = make_customer(tier="business", credits=20, webhook_url=f"{receiver.url}/hook", webhook_secret=SECRET)
    try:
        with freeze_time(START) as frozen:
            response = client.post(SCAN, json={"target": "jane@example.com"}, headers=acct.headers)
            assert response.status_code == 202
            started = freezegun_api.real_monotonic()  # the wall clock: freezegun's stands still
            assert jobs.run(frozen, until=lambda: settled(acct.id))
            seconds = freezegun_api.real_monotonic() - started
    finally:
        receiver.stop()
    end = assert_settled(acct)
    with db.connection_context():
        [attempt] = list(DeliveryAttempt.select())
    assert (attempt.outcome, attempt.error) == (outcome, error), (attempt.outcome, attempt.error, attempt.status_code)
    assert seconds < 5  # WEBHOOK_TIMEOUT_SECONDS is 1: the worker is not held (the trickle alone lasts 43 s)
    assert len(attempt.response_excerpt or "") <= 1024
    assert receiver.accepted == 1  # one connection: no redirect followed, no hidden retry
    figures.update(requests=1, concurrency=1, faults=f"receiver {behaviour}", inputs={"deliveries": 1},
                   failures=0, attempt={"outcome": attempt.outcome, "error": attempt.error},
                   worker_held_seconds=round(seconds, 2), end=end)


@pytest.mark.processes
@pytest.mark.config(ENGINE_POLL_SECONDS=0.5)
def test_a_database_outage_costs_the_worker_one_line_per_reconnection_not_a_traceback_per_job(
        app, base_config, client, make_customer, simulator, tmp_path):
    """PostgreSQL cut under a working ``python -m workers`` for a few seconds, while it tracks scans
    that never finish (each looked at every 0.5 s): the worker logs the outage, one line per
    reconnection attempt with back-off, no traceback; then it resumes, and a new scan completes."""
    from tests.processes import WorkerProcess, service_env, wait_for
    acct = make_customer(tier="enterprise", credits=100, inflight=100, hour=100, day=100)
    proxy = TcpProxy(_upstream(base_config["DATABASE_URL"]))
    env = service_env(app, simulator.url, tmp_path / "instance", ENGINE_POLL_SECONDS=0.5, LOG_FORMAT="text",
                      DATABASE_URL=_through(proxy, base_config["DATABASE_URL"]))
    ids = []
    for i in range(10):
        response = client.post(SCAN, json={"target": f"hang{i}@example.com"}, headers=acct.headers)
        assert response.status_code == 202
        ids.append(response.json["scan_id"])
    worker = WorkerProcess(env, tmp_path / "worker.log")

    def looked_at_twice() -> bool:  # each scan, by two batch looks
        with db.connection_context():
            return Scan.select().where(Scan.id.in_(ids) & (Scan.look_generation >= 2)).count() == len(ids)

    def status_of(scan_id):
        with db.connection_context():
            return Scan.get_by_id(scan_id).status

    try:
        wait_for(looked_at_twice, 30, "the worker tracking the scans", [worker])
        proxy.cut()
        wait_for(lambda: worker.output().count("retrying in") >= 3, 30, "three reconnection attempts", [worker])
        proxy.restore()
        wait_for(lambda: "database is back" in worker.output(), 30, "the database back", [worker])
        after = client.post(SCAN, json={"target": "after.outage@example.com"}, headers=acct.headers).json["scan_id"]
        wait_for(lambda: status_of(after) == "completed", 60, "a scan created after the outage completed", [worker])
    finally:
        worker.kill(signal.SIGTERM)
        proxy.close()
    log = worker.output()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("database unavailable") == 1, log[-3000:]
    attempts = log.count("retrying in")
    assert 3 <= attempts <= 10, log[-3000:]  # back-off: 1, 2, 4, 8 ... s, one line each
    assert "database is back" in log
