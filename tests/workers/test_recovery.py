"""The recovery sweep (D13): lost tracking jobs are re-dispatched, reservations
the engine never heard of are reversed, and the operator command reports both.

Real Redis (flushed to lose jobs), real database, the simulator over HTTP, freezegun's clock.
"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import requests
from freezegun import freeze_time
from rq.registry import ScheduledJobRegistry

from app import runtime
from app.extensions import db
from app.jobs import ENGINE_QUEUE, queue, tracking_job_id
from app.models import BulkBatch, CreditLedger, Scan
from app.services import billing
from app.services.recovery import sweep
from app.services.results import normalize_result
from workers.engine_jobs import _track

# These tests are about the tracking chains (an RQ job per scan): batch looks off (D24's
# ``ENGINE_BATCH_LOOK=off``); tests/services/test_looks.py tests the batch looks.
pytestmark = pytest.mark.config(ENGINE_BATCH_LOOK="off")

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
START = "2026-11-21 12:00:00"
STALE = 30


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
        balance = billing.balance_of(account.id)
    return balance, sum(e.delta for e in entries), [(e.delta, e.reason) for e in entries]


def run_cli(app, *args):
    result = app.test_cli_runner().invoke(args=list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_whose_jobs_were_flushed_are_redispatched_and_complete(app, client, make_customer, jobs, redis_conn,
                                                                     simulator):
    account = make_customer(tier="business", credits=1000)
    with freeze_time(START) as frozen:
        singles = [create(client, account, t) for t in ("john.roe@example.com", "+4915123456788", "torvalds")]
        response = client.post(BULK, json={"targets": [{"target": "ann@example.com"}, {"target": "+4915123456787"},
                                                       {"target": "slow.sam@example.com"}]}, headers=account.headers)
        assert response.status_code == 202, response.json
        ids = singles + [s["scan_id"] for s in response.json["scans"]]
        # Mid-run: the first looks found them running. Then Redis loses every job.
        assert jobs.run(frozen, until=lambda: statuses(ids).count("running") >= 3)
        in_flight = [i for i, s in rows(ids).items() if s.status in ("queued", "running")]
        assert len(in_flight) >= 3
        tokens = {i: rows([i])[i].tracking_job_id for i in in_flight}
        redis_conn.flushdb()
        assert jobs.run(frozen) and scheduled_ids() == []  # nothing left to run: the chains are lost
        assert all(s.status in ("queued", "running") for s in rows(in_flight).values())

        # Not yet stale: a scan looked at moments ago may just be between two looks.
        assert sweep()["scans_redispatched"] == 0
        assert scheduled_ids() == [] and queue(ENGINE_QUEUE).count == 0

        frozen.tick(STALE + 1)
        report = run_cli(app, "scans", "recover", "--json")  # flask --app wsgi scans recover --json
        assert report["ok"] is True
        assert report["scans_redispatched"] == len(in_flight)
        assert report["reservations_reversed"] == 0
        assert queue(ENGINE_QUEUE).count == len(in_flight)  # enqueued to run now
        after = rows(in_flight)
        for scan_id, token in tokens.items():  # each chain has a new token: a late old job stops
            assert after[scan_id].tracking_job_id != token
        # Sweeping again right away finds the new chains alive and changes nothing.
        assert sweep()["scans_redispatched"] == 0
        assert queue(ENGINE_QUEUE).count == len(in_flight)

        # The old chains' jobs, if one came back now, would do nothing: not even look.
        calls = engine_stats(simulator)["status"]
        with db.connection_context():
            assert {_track(scan_id, token) for scan_id, token in tokens.items()} == {"stale"}
        assert engine_stats(simulator)["status"] == calls
        assert jobs.run(frozen, until=all_final(ids))
    assert statuses(ids) == ["completed"] * len(ids)
    assert engine_stats(simulator)["status"] == calls + len(in_flight)  # one look each, none from stale jobs


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_scan_with_a_live_job_is_left_alone_however_long_it_waits(client, make_customer, redis_conn, jobs):
    """A scheduled job that has not come due (a long poll interval, a busy worker) is not lost."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        token = rows([scan_id])[scan_id].tracking_job_id
        frozen.tick(STALE * 10)
        report = sweep()
        assert report["scans_redispatched"] == 0
        assert rows([scan_id])[scan_id].tracking_job_id == token
        # Long overdue with no scheduler running: moved to its queue, the same job.
        assert report["scheduled_jobs_promoted"] == 1 and scheduled_ids() == []
        from rq import Queue
        assert Queue("engine", connection=redis_conn).job_ids == [token]
        # The same scan once its job is gone.
        redis_conn.flushdb()
        assert sweep()["scans_redispatched"] == 1
        assert rows([scan_id])[scan_id].tracking_job_id == tracking_job_id(scan_id, 1)
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_job_left_started_by_a_dead_worker_is_treated_as_lost(client, make_customer, jobs):
    """A worker killed mid-job leaves its job 'started' for ever: that chain is lost too."""
    from rq.job import JobStatus
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        token = rows([scan_id])[scan_id].tracking_job_id
        job = queue(ENGINE_QUEUE).fetch_job(token)
        ScheduledJobRegistry(queue=queue(ENGINE_QUEUE)).remove(job)
        job.set_status(JobStatus.STARTED)  # what a worker SIGKILLed inside the job leaves behind
        frozen.tick(STALE + 1)
        assert sweep()["scans_redispatched"] == 1
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_reservation_never_submitted_is_reversed_after_the_stale_window(app, client, make_customer, monkeypatch,
                                                                          simulator):
    account = make_customer(credits=10)

    def die(**_):
        raise ProcessDied()

    with freeze_time(START) as frozen:
        monkeypatch.setattr("app.services.engine.submit", die)
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
        monkeypatch.setattr("app.services.engine.submit_batch", die)
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
        before = rows([running, finished, failed])
        assert before[running].status == "running"
        report = sweep()
        after = rows([running, finished, failed])
    assert report["reservations_reversed"] == 0 and report["scans_redispatched"] == 1
    assert after[running].tracking_job_id != before[running].tracking_job_id
    for scan_id in (finished, failed):
        assert after[scan_id].tracking_job_id == before[scan_id].tracking_job_id
        assert after[scan_id].status == before[scan_id].status
    assert queue(ENGINE_QUEUE).count == 1
    assert books(account)[0] == 97  # three scans charged, nothing refunded


def test_the_sweep_report_names_what_it_did(app):
    report = run_cli(app, "scans", "recover", "--json")
    assert report["ok"] is True
    assert {"scans_redispatched", "reservations_reversed", "idempotency_purged"} <= set(report)
    assert report["scans_redispatched"] == report["reservations_reversed"] == 0


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE)
def test_a_scan_never_looked_at_is_redispatched_only_once_its_creation_is_stale(client, make_customer, redis_conn,
                                                                                 jobs):
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        redis_conn.flushdb()  # its first look is lost before it ever ran
        assert sweep()["scans_redispatched"] == 0
        frozen.tick(STALE - 1)
        assert sweep()["scans_redispatched"] == 0
        frozen.tick(2)
        assert sweep()["scans_redispatched"] == 1
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=60)
def test_sweep_moves_overdue_scheduled_jobs_when_no_scheduler_runs(app, client, account, redis_conn, jobs):
    """After a worker group is SIGKILLed, RQ's scheduler lock lingers ~61 s; the sweep does its job."""
    from rq import Queue
    from rq.registry import ScheduledJobRegistry

    from app.services.recovery import sweep

    engine_queue = Queue("engine", connection=redis_conn)
    registry = ScheduledJobRegistry(queue=engine_queue)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        scan_id = client.post("/api/v1/scan", json={"target": "jane@example.com"},
                              headers=account.headers).json["scan_id"]
        assert registry.count == 1 and engine_queue.count == 0  # the first look is scheduled
        frozen.tick(30)
        assert sweep()["scheduled_jobs_promoted"] == 0  # due, but not overdue by 60 s: the scheduler's job
        frozen.tick(60)
        assert sweep()["scheduled_jobs_promoted"] == 1
        assert registry.count == 0 and engine_queue.count == 1
        assert jobs.run(frozen, until=lambda: statuses([scan_id]) == ["completed"])


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=5)
def test_a_handover_whose_commit_was_lost_is_repaired_by_the_sweep(client, make_customer, jobs):
    """A look at an unfinished scan commits its progress and hand-over without waiting for
    PostgreSQL's disk flush (tracking.hand_over, durable=False). Were that commit lost in
    a crash, the row would be as before the look: the old token, the old progress. The
    successor then stops as stale, nothing tracks the scan, and the sweep starts a new chain."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        scan_id = create(client, account, "john.roe@example.com")
        before = rows([scan_id])[scan_id]
        frozen.tick(0.2)  # the simulator runs 100 times faster here: 0.6-1.8 s a scan
        assert _track(scan_id, before.tracking_job_id) == "unfinished"
        successor = rows([scan_id])[scan_id].tracking_job_id
        assert successor == tracking_job_id(scan_id, 1)
        with db.connection_context():  # the crash: the hand-over's commit never reached the disk
            Scan.update(tracking_job_id=before.tracking_job_id, status=before.status,
                        recipes_done=before.recipes_done, last_checked_at=before.last_checked_at).where(
                Scan.id == scan_id).execute()
        assert _track(scan_id, successor) == "stale"
        for job_id in (before.tracking_job_id, successor):  # both ran (here by hand) and are done
            queue(ENGINE_QUEUE).fetch_job(job_id).delete()
        frozen.tick(STALE + 1)
        assert sweep()["scans_redispatched"] == 1
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


# --- amended D13: the timeout is judged by a look at the engine, never by age alone -------------

TIMEOUT = 60


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, SCAN_TIMEOUT_SECONDS=TIMEOUT, ENGINE_POLL_SECONDS=1)
def test_after_a_long_outage_a_finished_scan_completes_and_an_unfinished_one_times_out(client, make_customer,
                                                                                      redis_conn, jobs, simulator):
    """Redis (or every worker) was gone for an hour: the tracking of both scans was lost. The
    one the engine finished meanwhile completes with its result, however late; the one still
    running at the engine fails with engine_timeout; each after exactly one look."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        done = create(client, account, "john.roe@example.com")  # 0.6-1.8 s of engine time here
        hanging = create(client, account, "hang.harry@example.com")  # running for ever
        redis_conn.flushdb()  # their chains are lost before a single look
        frozen.tick(3600)
        assert statuses([done, hanging]) == ["queued", "queued"]
        assert sweep()["scans_redispatched"] == 2
        assert jobs.run(frozen, until=all_final([done, hanging]))
        after = rows([done, hanging])
    assert engine_stats(simulator)["status"] == 2
    assert after[done].status == "completed" and after[done].failure_code is None
    assert after[done].completed_at - after[done].created_at > timedelta(seconds=TIMEOUT)
    assert normalize_result(json.loads(after[done].result_json), "email", scan_id=done, stored=True) == \
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
        assert run_cli(app, "scans", "recover", "--json")["scans_redispatched"] == 1
        looks = []
        assert jobs.run(frozen, until=lambda: looks.append(rows([scan_id])[scan_id]) or looks[-1].check_errors >= 3)
        scan = rows([scan_id])[scan_id]
        assert scan.status == "queued" and scan.failed_at is None  # not failed on age alone
        assert scheduled_ids() == [scan.tracking_job_id]  # and looked at again later
        assert sweep()["scans_redispatched"] == 0  # its chain is alive: nothing to recover

        requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "up"}, timeout=5).raise_for_status()
        assert jobs.run(frozen, until=all_final([scan_id]))
    assert statuses([scan_id]) == ["completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_recover_redispatches_at_once_every_scan_whose_job_is_gone(app, client, make_customer, redis_conn,
                                                                         jobs):
    """The operator's command, run right after Redis came back: no grace period (the periodic
    sweep keeps one), and a scan whose job is alive is left alone."""
    account = make_customer(credits=100)
    with freeze_time(START) as frozen:
        lost = create(client, account, "john.roe@example.com")
        token = rows([lost])[lost].tracking_job_id
        redis_conn.flushdb()  # Redis restarted empty, right after the creation
        kept = create(client, account, "ann@example.com")  # created after: its job is alive
        kept_token = rows([kept])[kept].tracking_job_id
        assert sweep()["scans_redispatched"] == 0  # the workers' sweep waits RECOVERY_STALE_SECONDS

        report = run_cli(app, "scans", "recover", "--json")  # flask --app wsgi scans recover --json
        assert report["ok"] is True and report["scans_redispatched"] == 1
        assert report["reservations_reversed"] == 0
        after = rows([lost, kept])
        assert after[lost].tracking_job_id == tracking_job_id(lost, 1) != token
        assert after[kept].tracking_job_id == kept_token
        assert queue(ENGINE_QUEUE).job_ids == [after[lost].tracking_job_id]  # to run now
        assert run_cli(app, "scans", "recover", "--json")["scans_redispatched"] == 0  # alive now
        assert jobs.run(frozen, until=all_final([lost, kept]))
    assert statuses([lost, kept]) == ["completed", "completed"]


@pytest.mark.config(RECOVERY_STALE_SECONDS=STALE, ENGINE_POLL_SECONDS=1)
def test_scans_recover_redispatches_a_fresh_delivery_whose_job_is_gone(app, client, make_customer, redis_conn,
                                                                        simulator):
    """The same for webhook deliveries: one created moments ago whose job Redis lost is sent now, once."""
    from app.models import DeliveryAttempt, WebhookDelivery
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
