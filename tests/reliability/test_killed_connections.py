"""Backend connections killed again and again (``pg_terminate_backend``) under concurrent
creations, reads and lists: a call answers what it did or at most a 503 with Retry-After, never a
500 (before: ``prepared statement "hot_..." already exists`` once a killed connection was
replaced); every 202 and 200 has its activity entry, no charge lacks its entry, and the ledger
sums to the balance (D25, D13)."""
from __future__ import annotations

import threading

import psycopg2

from app.activity.models import ActivityEntry
from app.billing import charges
from app.extensions import db
from bench.load import Call, LoadDriver
from tests.conftest import ServerThread

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
CREDITS = 5000
KILL_EVERY_SECONDS = 0.15

# Every backend of the test database but the killer's own: the service's pooled connections.
KILL_OTHERS = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
               "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'")


class Killer:
    """A thread that terminates every other backend of the database every KILL_EVERY_SECONDS."""

    def __init__(self, database_url: str):
        self.conn = psycopg2.connect(database_url)
        self.conn.autocommit = True
        self.stopped = threading.Event()
        self.killed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.conn.cursor() as cursor:
            while not self.stopped.wait(KILL_EVERY_SECONDS):
                cursor.execute(KILL_OTHERS)
                self.killed += cursor.fetchone()[0]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.conn.close()


def calls(account, scan_ids: list[str], n: int) -> list[Call]:
    mix = []
    for i in range(n):
        if i % 4 == 0:
            mix.append(Call("POST", SCAN, account.headers, {"target": f"killed{i}@example.com"}))
        elif i % 8 == 1:
            mix.append(Call("GET", "/api/v1/scans?limit=5", account.headers))
        elif i % 16 == 3:
            mix.append(Call("POST", BULK, account.headers, {"targets": [{"target": f"bulk{i}@example.com"},
                                                                         {"target": f"bulk{i}b@example.com"}]}))
        else:
            mix.append(Call("GET", f"{SCAN}/{scan_ids[i % len(scan_ids)]}", account.headers))
    return mix


def test_killed_connections_answer_at_most_503_and_every_charge_has_its_entry(app, base_config, make_customer,
                                                                             figures):
    account = make_customer(tier="enterprise", credits=CREDITS, inflight=10_000, hour=10_000, day=10_000)
    served = ServerThread(app)
    driver = LoadDriver(served.url, concurrency=8, timeout=30)
    try:
        seeds = driver.run([Call("POST", SCAN, account.headers, {"target": f"seed{i}@example.com"})
                            for i in range(4)])
        scan_ids = [a.body["scan_id"] for a in seeds]
        killer = Killer(base_config["DATABASE_URL"])
        try:
            answers = driver.run(calls(account, scan_ids, 400))
        finally:
            killer.stop()
    finally:
        driver.close()
        served.stop()
        db.close_all()  # the pool's connections the killer ended: the checks below take fresh ones
    statuses = sorted({a.status for a in answers})
    assert set(statuses) <= {200, 202, 503}, [(a.status, a.body) for a in answers if a.status not in (200, 202, 503)]
    for answer in answers:
        if answer.status == 503:
            assert answer.body["error"] == "service_unavailable" and int(answer.headers["Retry-After"]) >= 1
    served_ok = [a for a in answers + seeds if a.status in (200, 202)]
    assert killer.killed > 0 and len(served_ok) >= 50  # the faults happened, and calls got through them
    with db.connection_context():
        entries = {e.request_id: e for e in ActivityEntry.select().where(ActivityEntry.customer_id == account.id)}
        # Every answer served has its entry, saying that answer.
        missing = [(a.status, a.headers["X-Request-Id"]) for a in served_ok if a.headers["X-Request-Id"] not in entries]
        assert missing == []
        assert all(entries[a.headers["X-Request-Id"]].status == a.status for a in served_ok)
        # No charge without its entry: what the entries say was spent is what the ledger took.
        spent = CREDITS - charges.balance_of(account.id)
        assert sum(e.credits for e in entries.values()) == spent
        assert charges.ledger_sum(account.id) == charges.balance_of(account.id) >= 0
    figures.update(requests=len(answers), concurrency=8, backends_killed=killer.killed,
                   faults=f"every backend of the database terminated every {KILL_EVERY_SECONDS}s",
                   answers={str(s): sum(a.status == s for a in answers) for s in statuses}, failures=0)
