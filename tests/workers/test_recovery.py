"""The recovery sweep (D13): scans in flight without a due look (tracked by a job chain before
the upgrade that retired them, D24) are given one, reservations the engine never heard of are
reversed, and the operator command reports both. Scans in flight lose nothing with Redis.

Real Redis (flushed to lose jobs), real database, the simulator over HTTP, freezegun's clock.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
import requests
from freezegun import freeze_time
from rq.registry import ScheduledJobRegistry

from app.accounts.models import CreditLedger
from app.billing import charges
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.jobs import ENGINE_QUEUE, queue
from app.plumbing.models import utcnow
from app.recovery import sweep
from app.scans.models import BulkBatch, Scan
from app.scans.results import Owner, normalize_result
from tests.jobrunner import enqueue_old_tracking_job

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"
STALE = 30
START_AT = datetime(2026, 11, 21, 12, 0, 0)


class ProcessDied(BaseException):
    """Stands for the API process dying in the middle of its engine call (not an ``Exception``:
    nothing in the request path may catch it, as nothing survives a killed process)."""


def create(client, account, target):
    response = client.post(SCAN, json={"target": target}, headers=account.headers)
    assert response.status_code == 202, response.json
    return response.json["scan_id"]


def rows(scan_ids) -> dict:
    with db.connection_context():
        return {s.id: s for s in Scan.select().where(Scan.id.in_(list(scan_ids)))}


def statuses(scan_ids) -> list[str]:
    return sorted(s.status for s in rows(scan_ids).values())


def all_final(scan_ids):
    return lambda: all(s in ("completed", "failed") for s in statuses(scan_ids))


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def scheduled_ids() -> list[str]:
    registry = ScheduledJobRegistry(queue=queue(ENGINE_QUEUE))
    return [j.decode() if isinstance(j, bytes) else j for j in runtime.redis().zrange(registry.key, 0, -1)]


def books(account) -> tuple[int, int, list]:
    """(balance, sum of the ledger, [(delta, reason), ...])."""
    with db.connection_context():
        entries = list(CreditLedger.select().where(CreditLedger.customer == account.id).order_by(CreditLedger.id))
        balance = charges.balance_of(account.id)
    return balance, sum(e.delta for e in entries), [(e.delta, e.reason) for e in entries]


def as_the_chains_left_it(scan_id, generation=0, *, delay=None):
    """Make a scan as an RQ job chain of before the upgrade tracked it: no due look, its chain's
    token, and (unless ``delay`` is None) its job in Redis, due in ``delay`` seconds."""
    token = f"trk-{scan_id}-{generation}"
    with db.connection_context():
        Scan.update(next_look_at=None, tracking_job_id=token).where(Scan.id == scan_id).execute()
    if delay is not None:
        enqueue_old_tracking_job(scan_id, token, delay)
    return token


def run_cli(app, *args):
    result = app.test_cli_runner().invoke(args=list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_in_flight_when_redis_is_flushed_lose_nothing(app, client, make_customer, jobs, redis_conn, simulator):
    account = make_customer(tier="business", credits=1000)
    with freeze_time(START) as frozen:
        singles = [create(client, account, t) for t in ("john.roe@example.com", "+4915123456788", "torvalds")]
        response = client.post(BULK, json={"targets": [{"target": "ann@example.com"}, {"target": "+4915123456787"},
                                                       {"target": "slow.sam@example.com"}]}, headers=account.headers)
        assert response.status_code == 202, response.json
        ids = singles + [s["scan_id"] for s in response.json["scans"]]
        # Mid-run: the first looks (each just before its scan's eta) found some running or done, the
        # slow one still in flight. Then Redis loses everything.
        assert jobs.run(frozen, until=lambda: set(statuses(ids)) & {"running", "completed"})
        in_flight = [i for i, s in rows(ids).items() if s.status in ("queued", "running")]
        assert len(in_flight) >= 1
        redis_conn.flushdb()
        frozen.tick(STALE + 1)
        report = run_cli(app, "scans", "recover", "--json")  # flask --app wsgi scans recover --json
        assert report["ok"] is True and report["scans_redispatched"] == 0  # nothing was lost: nothing to do
        assert report["reservations_reversed"] == 0
        assert jobs.run(frozen, until=all_final(ids))
    assert statuses(ids) == ["completed"] * len(ids)


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_scan_with_a_due_look_is_left_alone_however_long_it_waits(client, make_customer, jobs):
    """A look not yet due (a long poll interval, busy lookers) is not lost: the sweep leaves it be."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        before = rows([scan_id])[scan_id]
        frozen.tick(STALE * 10)
        assert sweep()["scans_redispatched"] == 0
        after = rows([scan_id])[scan_id]
        assert (after.next_look_at, after.look_generation) == (before.next_look_at, before.look_generation)
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_chain_whose_job_a_dead_worker_left_started_is_handed_to_the_looks(client, make_customer, jobs):
    """Before the upgrade, a worker killed mid-job left its job 'started' for ever: the scan has no
    due look and no job will run. The sweep gives it a due look, and it completes."""
    from rq.job import JobStatus
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        token = as_the_chains_left_it(scan_id, delay=0)
        job = queue(ENGINE_QUEUE).fetch_job(token)
        queue(ENGINE_QUEUE).remove(job)
        job.set_status(JobStatus.STARTED)  # what a worker SIGKILLed inside the job leaves behind
        assert sweep()["scans_redispatched"] == 1
        scan = rows([scan_id])[scan_id]
        assert (scan.next_look_at, scan.tracking_job_id) == (utcnow(), None)
        assert sweep()["scans_redispatched"] == 0  # once
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_reservation_never_submitted_is_reversed_after_the_stale_window(app, client, make_customer, monkeypatch,
                                                                          simulator):
    account = make_customer(credits=10)

    def die(**_):
        raise ProcessDied()

    with freeze_time(START) as frozen:
        monkeypatch.setattr("app.plumbing.engine.submit", die)
        with pytest.raises(ProcessDied):
            client.post(SCAN, json={"target": "john.roe@example.com"}, headers=account.headers)
        monkeypatch.undo()
        with db.connection_context():
            orphans = list(Scan.select().where(Scan.customer == account.id))
        assert len(orphans) == 1 and orphans[0].engine_id is None and orphans[0].status == "queued"
        balance, total, entries = books(account)
        assert balance == total == 9 and entries == [(10, "grant"), (-1, "scan")]

        # Within the window the creator may still be in its engine call: hands off.
        frozen.tick(STALE - 1)
        assert sweep()["reservations_reversed"] == 0
        assert len(rows([orphans[0].id])) == 1

        frozen.tick(2)
        report = run_cli(app, "scans", "recover", "--json")
        assert report["reservations_reversed"] == 1 and report["scans_redispatched"] == 0
        assert rows([orphans[0].id]) == {}
        balance, total, entries = books(account)
        assert balance == total == 10
        assert entries == [(10, "grant"), (-1, "scan"), (1, "refund")]
        assert sweep()["reservations_reversed"] == 0  # refunded once
        assert books(account)[0] == 10
    assert engine_stats(simulator)["status"] == 0


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_bulk_reservation_never_submitted_is_reversed_whole(client, make_customer, monkeypatch):
    account = make_customer(tier="business", credits=10)

    def die(items):
        raise ProcessDied()

    with freeze_time(START) as frozen:
        monkeypatch.setattr("app.plumbing.engine.submit_batch", die)
        with pytest.raises(ProcessDied):
            client.post(BULK, json={"targets": [{"target": "a.one@example.com"}, {"target": "torvalds"},
                                                {"target": "+4915123456788"}, {"target": "x"}]},
                        headers=account.headers)
        monkeypatch.undo()
        with db.connection_context():
            batches = list(BulkBatch.select().where(BulkBatch.customer == account.id))
        assert len(batches) == 1 and len(rows_of(account)) == 3
        assert books(account)[0] == 7
        frozen.tick(STALE + 1)
        assert sweep()["reservations_reversed"] == 3
    assert rows_of(account) == []
    with db.connection_context():
        assert BulkBatch.get_or_none(BulkBatch.id == batches[0].id) is None
    balance, total, entries = books(account)
    assert balance == total == 10
    assert entries[:2] == [(10, "grant"), (-3, "bulk")]
    assert sum(delta for delta, reason in entries if reason == "refund") == 3


def rows_of(account) -> list:
    with db.connection_context():
        return list(Scan.select().where(Scan.customer == account.id))


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_submitted_scan_is_never_reversed_and_a_finished_one_never_redispatched(client, make_customer, jobs,
                                                                                  redis_conn):
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        running = create(client, account, "hang.harry@example.com")
        finished = create(client, account, "torvalds")
        failed = create(client, account, "fail.fred@example.com")
        assert jobs.run(frozen, until=all_final([finished, failed]))
        assert statuses([finished, failed]) == ["completed", "failed"]
        redis_conn.flushdb()
        frozen.tick(STALE * 5)
        for scan_id in (running, finished, failed):  # as if a job chain of before the upgrade had tracked them
            as_the_chains_left_it(scan_id)
        before = rows([running, finished, failed])
        assert before[running].status == "running"
        swept_at = utcnow()
        report = sweep()
        after = rows([running, finished, failed])
    assert report["reservations_reversed"] == 0 and report["scans_redispatched"] == 1
    assert after[running].next_look_at == swept_at
    for scan_id in (finished, failed):
        assert after[scan_id].next_look_at is None
        assert after[scan_id].status == before[scan_id].status
    assert books(account)[0] == 97  # three scans charged, nothing refunded


def test_the_sweep_report_names_what_it_did(app):
    report = run_cli(app, "scans", "recover", "--json")
    assert report["ok"] is True
    assert {"scans_redispatched", "reservations_reversed", "idempotency_purged"} <= set(report)
    assert report["scans_redispatched"] == report["reservations_reversed"] == 0


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_chain_whose_first_job_was_lost_is_handed_to_the_looks_at_once(client, make_customer, redis_conn, jobs):
    """A scan a chain tracked before the upgrade, whose first look was lost with Redis: no job will
    ever run for it. The sweep gives it a due look at once (no grace period: nothing but the
    sweep would track it, and a duplicate look is harmless)."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        as_the_chains_left_it(scan_id, delay=1)
        redis_conn.flushdb()
        assert jobs.run(frozen) and statuses([scan_id]) == ["queued"]  # nothing tracks it
        assert sweep()["scans_redispatched"] == 1
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=60)
def test_sweep_moves_overdue_scheduled_jobs_when_no_scheduler_runs(app, client, account, redis_conn, jobs):
    """After a worker group is SIGKILLed, RQ's scheduler lock lingers ~61 s; the sweep does its job.
    The job here is a chain's, left scheduled from before the upgrade: once run, it hands over."""
    from rq import Queue
    from rq.registry import ScheduledJobRegistry

    from app.recovery import sweep

    engine_queue = Queue("engine", connection=redis_conn)
    registry = ScheduledJobRegistry(queue=engine_queue)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        scan_id = client.post("/api/v1/scan", json={"target": "jane@example.com"},
                              headers=account.headers).json["scan_id"]
        as_the_chains_left_it(scan_id, delay=1)
        with db.connection_context():  # a scan tracked by looks stands by: it must not be made due
            Scan.update(next_look_at=START_AT + timedelta(days=1)).where(Scan.id != scan_id).execute()
        assert registry.count == 1 and engine_queue.count == 0
        frozen.tick(30)
        report = sweep()
        assert report["scheduled_jobs_promoted"] == 0  # due, but not overdue by 60 s: the scheduler's job
        assert report["scans_redispatched"] == 1  # and the sweep hands the scan over meanwhile
        with db.connection_context():
            Scan.update(next_look_at=None, tracking_job_id=f"trk-{scan_id}-0").where(Scan.id == scan_id).execute()
        frozen.tick(60)
        from app import recovery
        assert recovery.promote_overdue(utcnow()) == 1
        assert registry.count == 0 and engine_queue.count == 1
        assert jobs.run(frozen, until=lambda: statuses([scan_id]) == ["completed"])


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=5)
def test_a_look_whose_commit_was_lost_is_looked_at_again(client, make_customer, jobs):
    """A look at an unfinished scan commits its progress and next due time without waiting for
    PostgreSQL's disk flush. Were that commit lost in a crash, the row would be as before the
    look: its earlier due time, past by then. It is claimed again at once; nothing is lost."""
    from app.tracking import looks
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "slowpoke@example.com")
        before = rows([scan_id])[scan_id]
        frozen.move_to(before.next_look_at)
        with db.connection_context():
            assert looks.look_due()["unfinished"] == 1
        assert rows([scan_id])[scan_id].look_generation == 1
        with db.connection_context():  # the crash: the look's commit never reached the disk
            Scan.update(next_look_at=before.next_look_at, look_generation=before.look_generation,
                        status=before.status, recipes_done=before.recipes_done).where(Scan.id == scan_id).execute()
            report = looks.look_due()
        assert report["claimed"] == 1  # due again at once
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


# --- amended D13: the timeout is judged by a look at the engine, never by age alone -------------

TIMEOUT = 60


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, SCAN_TIMEOUT_SECONDS=TIMEOUT, ENGINE_POLL_SECONDS=1)
def test_after_a_long_outage_a_finished_scan_completes_and_an_unfinished_one_times_out(client, make_customer,
                                                                                      redis_conn, jobs, simulator):
    """Redis and every worker were gone for an hour: no look at either scan. The
    one the engine finished meanwhile completes with its result, however late; the one still
    running at the engine fails with engine_timeout; each after exactly one look."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        done = create(client, account, "john.roe@example.com")  # 0.6-1.8 s of engine time here
        hanging = create(client, account, "hang.harry@example.com")  # running for ever
        redis_conn.flushdb()
        frozen.tick(3600)  # no worker looked for an hour
        assert statuses([done, hanging]) == ["queued", "queued"]
        assert sweep()["scans_redispatched"] == 0
        assert jobs.run(frozen, until=all_final([done, hanging]))
        after = rows([done, hanging])
    assert engine_stats(simulator)["looks"] == 1  # one batch look for both
    assert after[done].status == "completed" and after[done].failure_code is None
    assert after[done].completed_at - after[done].created_at > timedelta(seconds=TIMEOUT)
    owner = Owner(after[done].customer_id, "email", after[done].target)
    assert normalize_result(json.loads(after[done].result_json), "email", scan_id=done, owner=owner, stored=True) == \
        json.loads(after[done].result_json)
    assert (after[hanging].status, after[hanging].failure_code) == ("failed", "engine_timeout")
    assert books(account)[0] == 98  # both charged; nothing refunded by the late verdicts


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, SCAN_TIMEOUT_SECONDS=TIMEOUT, ENGINE_POLL_SECONDS=1)
def test_past_the_timeout_an_engine_that_cannot_be_reached_leaves_the_scan_in_flight(app, client, make_customer,
                                                                                    redis_conn, jobs, simulator):
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        redis_conn.flushdb()
        frozen.tick(3600)
        requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "down"}, timeout=5).raise_for_status()
        assert run_cli(app, "scans", "recover", "--json")["scans_redispatched"] == 0
        looks = []
        assert jobs.run(frozen, until=lambda: looks.append(rows([scan_id])[scan_id]) or looks[-1].check_errors >= 3)
        scan = rows([scan_id])[scan_id]
        assert scan.status == "queued" and scan.failed_at is None  # not failed on age alone
        assert scan.next_look_at > START_AT + timedelta(seconds=3600)  # and looked at again later
        assert sweep()["scans_redispatched"] == 0  # its due look tracks it: nothing to recover

        requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "up"}, timeout=5).raise_for_status()
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_in_flight_before_the_upgrade_complete_after_it(app, client, make_customer, jobs, simulator):
    """Nothing lost at the upgrade: scans as the chains left them (no due look, a tracking job
    queued or scheduled in Redis, or lost with it) are made due by migration 22, by the
    operator's command, by the periodic sweep and by their old jobs, each alone; a scan the looks
    track is left alone; every one completes, once."""
    from app.migrations import _one_way_to_track
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        queued_job, scheduled_job, lost_job, migrated, kept = (
            create(client, account, t) for t in ("john.roe@example.com", "ann@example.com", "torvalds",
                                                 "+4915123456788", "bo.b@example.com"))
        kept_before = rows([kept])[kept]
        as_the_chains_left_it(queued_job, delay=0)
        as_the_chains_left_it(scheduled_job, 2, delay=5)
        as_the_chains_left_it(lost_job, 1)
        as_the_chains_left_it(migrated, 3)
        with db.connection_context():
            _one_way_to_track(db.obj)  # migration 22, as the upgrade runs it
        # Due now by the database's clock (the upgrade's), which the test's frozen one cannot move.
        assert rows([migrated])[migrated].next_look_at is not None
        assert rows([migrated])[migrated].tracking_job_id is None
        assert run_cli(app, "scans", "recover", "--json")["scans_redispatched"] == 0  # the migration took them all
        for scan_id, generation in ((queued_job, 0), (scheduled_job, 2), (lost_job, 1)):
            as_the_chains_left_it(scan_id, generation)  # a process of before the upgrade wrote them since
        assert run_cli(app, "scans", "recover", "--json")["scans_redispatched"] == 3
        for scan_id, generation in ((queued_job, 0), (scheduled_job, 2)):
            as_the_chains_left_it(scan_id, generation)  # once more, for their old jobs to hand over
        jobs.run()  # the queued old job runs now (no freezer: time stands still)
        from rq.job import Job
        assert Job.fetch(f"trk-{queued_job}-0", connection=runtime.redis()).return_value() == "handed_over"
        assert rows([queued_job])[queued_job].next_look_at is not None
        assert rows([scheduled_job])[scheduled_job].next_look_at is None  # its old job is not due yet
        assert rows([kept])[kept].next_look_at == kept_before.next_look_at
        assert jobs.run(frozen, until=all_final([queued_job, scheduled_job, lost_job, migrated, kept]))
        after = rows([queued_job, scheduled_job, lost_job, migrated, kept])
    assert [s.status for s in after.values()] == ["completed"] * 5
    assert books(account)[0] == 95  # five scans charged once, nothing refunded


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_recover_redispatches_a_fresh_delivery_whose_job_is_gone(app, client, make_customer, redis_conn,
                                                                        simulator):
    """The same for webhook deliveries: one created moments ago whose job Redis lost is sent now, once."""
    from app.webhooks.models import DeliveryAttempt, WebhookDelivery
    from tests.jobrunner import JobRunner
    requests.post(f"{simulator.url}/_sim/receivers/recover-now", json={"secret": "whsec_cmVjb3Zlci1ub3cgc2VjcmV0IDAxMjM=",
                                                                      "responses": [200]}, timeout=5)
    account = make_customer(webhook_url=f"{simulator.url}/_sim/hooks/recover-now",
                            webhook_secret="whsec_cmVjb3Zlci1ub3cgc2VjcmV0IDAxMjM=")
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        engine_only = JobRunner(redis_conn, queue_names=(ENGINE_QUEUE,))
        assert engine_only.run(frozen, until=all_final([scan_id]))
        redis_conn.flushdb()  # the delivery's job is lost moments after its row was written
        assert run_cli(app, "scans", "recover", "--json")["deliveries_redispatched"] == 1
        assert JobRunner(redis_conn).run(frozen)
    with db.connection_context():
        [delivery] = list(WebhookDelivery.select())
        assert (delivery.status, delivery.attempts) == ("succeeded", 1)
        assert DeliveryAttempt.select().count() == 1
    received = requests.get(f"{simulator.url}/_sim/receivers/recover-now/deliveries", timeout=5).json()
    assert len(received["deliveries"]) == 1
