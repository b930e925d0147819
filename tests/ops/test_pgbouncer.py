"""The service behind PgBouncer in transaction mode (D19: ``DATABASE_URL`` may name a pooler):
creations, reads, a bulk call, the batch looks and a webhook delivery, from concurrent clients
whose transactions land on whichever server connection is free. Before, the hot statements were
``PREPARE``d once per client connection: a creation answered 500 ``prepared statement "hot_..."
already exists`` (or "does not exist") when its transaction ran on another server connection."""
from __future__ import annotations

import psycopg2
import pytest
from freezegun import freeze_time

from app import create_app
from app.activity.models import ActivityEntry
from app.extensions import db
from app.scans.models import Scan
from app.webhooks.models import WebhookDelivery
from bench.load import Call, LoadDriver
from tests.api.helpers import assert_books_balance
from tests.conftest import ServerThread
from tests.ops import pgbouncer

pytestmark = pytest.mark.skipif(not pgbouncer.available(), reason="Debian's pgbouncer is not installed")

SECRET = "whsec_cGdib3VuY2VyIHRlc3Qgc2VjcmV0IDAxMjM0NTY="
SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"


@pytest.fixture
def bouncer(database_url):
    with pgbouncer.PgBouncer(database_url, pool_size=2) as running:
        yield running


@pytest.fixture
def pooled_app(app, base_config, bouncer):
    """The service with ``DATABASE_URL`` naming the PgBouncer (tables emptied by ``app``)."""
    yield create_app(dict(base_config, DATABASE_URL=bouncer.url))
    if not db.is_closed():
        db.close()
    create_app(base_config)  # the next tests' binding: the database itself


def test_the_bouncer_pools_by_transaction(bouncer):
    client = psycopg2.connect(bouncer.url)  # a pool exists once a client used it
    client.cursor().execute("SELECT 1")
    conn = psycopg2.connect(bouncer.admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW POOLS")
            names = [column[0] for column in cursor.description]
            pools = [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        conn.close()
        client.close()
    assert [p["pool_mode"] for p in pools if p["database"] == bouncer.database] == ["transaction"]


def test_creations_reads_bulk_looks_and_deliveries_through_pgbouncer(pooled_app, make_customer, sim_receiver, jobs):
    url, received = sim_receiver(SECRET)
    account = make_customer(credits=1000, inflight=1000, hour=1000, day=1000, webhook_url=url,
                            webhook_secret=SECRET)
    served = ServerThread(pooled_app)
    driver = LoadDriver(served.url, concurrency=8, timeout=30)
    try:
        # Eight clients, two server connections: each transaction runs on whichever is free.
        created = driver.run([Call("POST", SCAN, account.headers, {"target": f"pooled{i}@example.com"})
                              for i in range(24)])
        bulk = driver.run([Call("POST", BULK, account.headers,
                                {"targets": [{"target": f"bulk{i}@example.com"} for i in range(3)]})])
        ids = [a.body.get("scan_id") for a in created]
        reads = driver.run([Call("GET", f"{SCAN}/{scan_id}", account.headers) for scan_id in ids * 2]
                           + [Call("GET", f"{BULK}/{bulk[0].body.get('bulk_id')}", account.headers),
                              Call("GET", "/api/v1/scans", account.headers)])
    finally:
        driver.close()
        served.stop()
    answers = created + bulk + reads
    assert [(a.status, a.body) for a in answers if a.status not in (200, 202)] == []
    with freeze_time() as frozen:  # the batch looks (D24) and the deliveries, on the pooled binding
        assert jobs.run(frozen, until=lambda: not Scan.select().where(Scan.status.not_in(["completed", "failed"]))
                        .exists() and not WebhookDelivery.select().where(WebhookDelivery.status == "pending").exists())
    assert jobs.looked >= len(ids) + 3
    with db.connection_context():
        scans = list(Scan.select().where(Scan.customer == account.id))
        assert len(scans) == 27 and {s.status for s in scans} <= {"completed", "failed"}
        deliveries = list(WebhookDelivery.select().where(WebhookDelivery.customer == account.id))
        assert len(deliveries) == 27 and {d.status for d in deliveries} == {"succeeded"}
        entries = ActivityEntry.select().where(ActivityEntry.customer_id == account.id).count()
    assert len(received()) == 27
    assert entries == len(answers)  # one activity entry per call (D20)
    assert_books_balance(account)
