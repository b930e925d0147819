"""Batch looks (D24): scans in flight hold no RQ job; due looks are claimed in batches from the
database (FOR UPDATE SKIP LOCKED), looked at in one engine request, and recorded under a fencing
token. Every guarantee of the chains holds: nothing lost when a looker dies or Redis is emptied,
the timeout only after a look, progress, ``running`` once with its event."""
import json
import threading
from datetime import datetime, timedelta

import pytest
import requests
from freezegun import freeze_time

from app import recovery
from app.accounts.models import Customer
from app.events.models import Event
from app.plumbing import runtime
from app.plumbing.db import execute, transaction
from app.plumbing.jobs import ENGINE_QUEUE, queue
from app.plumbing.models import utcnow
from app.scans.models import IN_FLIGHT, Scan
from app.tracking import looks, states
from app.tracking.statements import scan_states
from app.webhooks import outbox
from app.webhooks.models import WebhookDelivery
from tests.api.helpers import assert_counters_match
from tests.domain_fixtures import new_customer, new_scan
from tests.jobrunner import JobRunner

NOW = datetime(2026, 11, 22, 12, 0, 0)


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def engine_mode(simulator, mode="up", **extra):
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": mode, **extra}, timeout=5).raise_for_status()


def rows(ids) -> dict[str, Scan]:
    return {s.id: s for s in Scan.select().where(Scan.id.in_(list(ids)))}


def make_scans(n, *, livemode=True, target="jane@example.com"):
    cust, key = new_customer(credits=1000, livemode=livemode, inflight=1000, hour=10_000, day=10_000)
    return cust, [new_scan(cust, key, target=target) for _ in range(n)]


def no_engine_job() -> bool:
    engine = queue(ENGINE_QUEUE)
    return engine.count == 0 and engine.scheduled_job_registry.count == 0


def test_a_submitted_scan_gets_its_first_look_due_and_no_rq_job(conn):
    with freeze_time(NOW):
        _, [scan] = make_scans(1)
    assert scan.tracking_job_id is None
    assert scan.engine_id is not None
    # Half a second before the engine's eta, at most ENGINE_POLL_SECONDS (10 s) away.
    eta = (scan.eta_at - NOW).total_seconds()
    assert scan.next_look_at == NOW + timedelta(seconds=states.first_look_delay(eta, 10.0))
    assert no_engine_job()


def test_one_engine_request_looks_at_a_whole_claim_and_completes_every_scan(conn, simulator):
    with freeze_time(NOW) as frozen:
        cust, scans = make_scans(30)
        ids = [s.id for s in scans]
        before = engine_stats(simulator)
        runner = JobRunner(runtime.redis())
        assert runner.run(frozen, until=lambda: all(s.status == "completed" for s in rows(ids).values()))
    after = engine_stats(simulator)
    assert after["status"] == before["status"]  # never a single look
    # Every scan was looked at at least twice (half a second before its eta, then at it), yet each
    # round of looks was one request for up to 100 of them.
    assert runner.looked >= 2 * len(ids)
    assert after["looks"] - before["looks"] <= runner.looked / 10
    assert no_engine_job()
    assert Customer.get_by_id(cust.id).in_flight == 0
    assert_counters_match(cust.id)


HOOK_URL, HOOK_SECRET = "https://hooks.example.com/x", "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_a_looks_bodies_are_the_compact_json_of_each_scans_read_byte_for_byte(conn, simulator):
    """A batch look writes each completed scan's result into its webhook and feed bodies as the
    stored text (not parsed and written again): the bytes are still those of the body with the
    result parsed, in compact JSON with ASCII escapes (the simulator's names have accents)."""
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(credits=1000, inflight=1000, hour=10_000, day=10_000, webhook_url=HOOK_URL,
                                 webhook_secret=HOOK_SECRET)
        ids = [new_scan(cust, key, target=f"person.{i}@example.com").id for i in range(12)]
        frozen.tick(600)
        assert looks.look_due()["completed"] == 12
        scans = rows(ids)
        deliveries = {d.scan_id: d.body for d in WebhookDelivery.select().where(WebhookDelivery.scan_id.in_(ids))}
        feed = {(e.scan_id, e.kind): e.body for e in Event.select().where(Event.scan_id.in_(ids))}
        expected = {scan_id: compact(outbox.event_body(scan)) for scan_id, scan in scans.items()}
    assert deliveries == expected
    assert {scan_id: feed[(scan_id, "scan.completed")] for scan_id in ids} == expected
    running = [feed[(scan_id, "scan.running")] for scan_id in ids]
    assert all(body == compact(json.loads(body)) for body in running)
    assert any("\\u00" in body for body in expected.values())  # an accent, escaped as json.dumps does


def claim(limit, *, now=None, hold_seconds=30.0):
    return scan_states.claim_due(statuses=IN_FLIGHT, now=now or utcnow(), limit=limit, hold_seconds=hold_seconds)


def test_a_claim_takes_the_due_scans_earliest_first_up_to_the_limit_and_writes_nothing(conn):
    with freeze_time(NOW) as frozen:
        _, scans = make_scans(5)
        before = rows([s.id for s in scans])
        frozen.tick(60)  # all due
        with transaction():
            claimed = claim(3)
            # The claim's planner setting ends with the claim: the look's later statements that
            # sort (customers' locks, events in order) are planned as usual, not costed as
            # disabled sorts (which made the server JIT-compile each of them).
            assert execute("SELECT current_setting('enable_sort')").fetchone() == ("on",)
            plan = execute("EXPLAIN (FORMAT JSON) SELECT c FROM unnest(?::varchar[]) AS c ORDER BY c",
                           (["b", "a"],)).fetchone()[0]
            assert plan[0]["Plan"]["Total Cost"] < 1000
    assert len(claimed) == 3
    dues = [due for due, _ in claimed]
    assert dues == sorted(dues) and dues == sorted(s.next_look_at for s in before.values())[:3]
    # The claim is its transaction's row locks: once it ended, the rows are as they were.
    after = rows([s.id for s in scans])
    assert all((s.next_look_at, s.look_generation) == (before[s.id].next_look_at, 0) for s in after.values())
    # A record carries the generation it claimed: a stale one writes nothing (a later look won),
    # the current one writes and counts the look.
    scan = claimed[0][1]
    stale = (scan.id, scan.look_generation - 1, NOW, 0, 9, 9, False)
    assert record(stale) == []
    assert record((scan.id, scan.look_generation, NOW, 0, 9, 9, False)) == [(scan.id, False)]
    assert Scan.get_by_id(scan.id).look_generation == 1
    assert record((scan.id, scan.look_generation, NOW, 0, 9, 9, False)) == []


def record(*looks):
    return scan_states.record_looks(looks, statuses=IN_FLIGHT, queued="queued", running="running", now=utcnow())


def test_a_record_moves_the_scans_the_engine_runs_to_running_once(conn):
    """The move to ``running`` is part of the look's one row write, and says which scans moved."""
    with freeze_time(NOW):
        _, (first, second) = make_scans(2)
    later = NOW + timedelta(seconds=5)
    written = scan_states.record_looks([(first.id, 0, later, 0, 6, 1, True), (second.id, 0, later, 0, 6, 0, False)],
                                       statuses=IN_FLIGHT, queued="queued", running="running", now=later)
    assert sorted(written) == sorted([(first.id, True), (second.id, False)])
    now_running, still_queued = Scan.get_by_id(first.id), Scan.get_by_id(second.id)
    assert (now_running.status, now_running.started_at, now_running.recipes_done) == ("running", later, 1)
    assert (still_queued.status, still_queued.started_at) == ("queued", None)
    # A later look at a running scan writes its progress and moves nothing.
    again = scan_states.record_looks([(first.id, 1, later, 0, 6, 2, True)], statuses=IN_FLIGHT, queued="queued",
                                     running="running", now=later + timedelta(seconds=5))
    assert again == [(first.id, False)]
    assert Scan.get_by_id(first.id).started_at == later


def hold_a_claim(limit, *, close_when: threading.Event, claimed: list, done: threading.Event,
                 hold_seconds=30.0, die=False):
    """Another looker, on its own connection: claims ``limit`` scans (their ids go in
    ``claimed``), then waits for ``close_when``; it then commits, or with ``die`` drops its
    connection as a killed process's (the error of its commit then goes in ``claimed`` too)."""
    from app.extensions import db

    def looker():
        with db.connection_context():
            try:
                with transaction():
                    claimed.extend(s.id for _, s in claim(limit, now=NOW + timedelta(seconds=60),
                                                          hold_seconds=hold_seconds))
                    done.set()
                    close_when.wait(10)
                    if die:
                        db.connection().close()  # the server sees the connection end mid-transaction
            except Exception as exc:  # the ended connection's commit: the server has rolled back
                claimed.append(exc)
            finally:
                done.set()

    thread = threading.Thread(target=looker)
    thread.start()
    assert done.wait(10)
    return thread


def test_two_lookers_never_claim_the_same_scan(app):
    """SKIP LOCKED: a claim not yet committed holds its rows; another claim takes the others."""
    from app.extensions import db
    with db.connection_context(), freeze_time(NOW) as frozen:
        _, scans = make_scans(6)
        frozen.tick(60)
    first_claimed, release, done = [], threading.Event(), threading.Event()
    thread = hold_a_claim(4, close_when=release, claimed=first_claimed, done=done)
    try:
        with db.connection_context(), transaction():
            second = [s.id for _, s in claim(10, now=NOW + timedelta(seconds=60))]
    finally:
        release.set()
        thread.join(10)
    assert len(first_claimed) == 4 and len(second) == 2
    assert not set(first_claimed) & set(second)
    assert set(first_claimed) | set(second) == {s.id for s in scans}


def test_a_looker_that_dies_after_its_claim_loses_nothing(app):
    """Its connection ends with it, and so does its claim: the scan is due again at once."""
    from app.extensions import db
    with db.connection_context(), freeze_time(NOW) as frozen:
        cust, [scan] = make_scans(1)
        frozen.tick(60)
    held, die, done = [], threading.Event(), threading.Event()
    thread = hold_a_claim(10, close_when=die, claimed=held, done=done, die=True)
    try:
        assert held == [scan.id]
        with db.connection_context(), freeze_time(NOW + timedelta(seconds=60)):
            assert looks.look_due()["claimed"] == 0  # held by the other looker
    finally:
        die.set()
        thread.join(10)
    assert isinstance(held[-1], Exception)  # its connection ended inside the claim's transaction
    with db.connection_context(), freeze_time(NOW + timedelta(seconds=60)):
        report = looks.look_due()
        assert report["claimed"] == 1 and report["completed"] == 1
        # At once: late only by what the test's clock skipped, from its first due time.
        assert report["lags"] == [pytest.approx((NOW + timedelta(seconds=60) - scan.next_look_at).total_seconds())]
        assert Scan.get_by_id(scan.id).status == "completed"
        assert_counters_match(cust.id)


def test_a_looker_that_hangs_in_its_claim_loses_it_when_the_hold_ends(app):
    """PostgreSQL ends a session idle in its claim's transaction past the hold; its scans are
    free again (waited for by polling: the server's timer cannot be frozen)."""
    from app.extensions import db
    with db.connection_context(), freeze_time(NOW) as frozen:
        _, [scan] = make_scans(1)
        frozen.tick(60)
    held, never, done = [], threading.Event(), threading.Event()
    thread = hold_a_claim(10, close_when=never, claimed=held, done=done, hold_seconds=0.2)
    try:
        assert held == [scan.id]
        claimed_again: list = []
        for _ in range(100):
            with db.connection_context(), transaction():
                claimed_again = [s.id for _, s in claim(10, now=NOW + timedelta(seconds=60))]
            if claimed_again:
                break
            never.wait(0.1)
        assert claimed_again == [scan.id]
    finally:
        never.set()
        thread.join(10)
    assert isinstance(held[-1], Exception)  # its session was ended: its commit could not be made


def test_progress_and_running_once_with_its_event(conn, simulator, sim_receiver):
    url, _ = sim_receiver("whsec_ZGVsaXZlcmllcyBhcGkgc2VjcmV0IDAxMjM0NQ==")
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(credits=100, webhook_url=url, webhook_secret="whsec_ZGVsaXZlcmllcyBhcGkgc2VjcmV0IDAxMjM0NQ==")
        from app.webhooks import endpoints
        endpoint = endpoints.list_endpoints(key)[0]
        endpoints.update(key, endpoint["endpoint_id"], events=["scan.running", "scan.completed", "scan.failed"])
        scan = new_scan(cust, key, target="slowpoke@example.com")
        # Looks until the engine runs it and some of its recipes are done.
        for _ in range(40):
            frozen.tick(0.5)
            looks.look_due()
            current = Scan.get_by_id(scan.id)
            if current.status == "running" and 0 < current.recipes_done < current.recipes_total:
                break
        assert current.status == "running" and current.started_at is not None
        assert 0 < current.recipes_done < current.recipes_total
        assert current.next_look_at > utcnow()
        frozen.tick(0.5)
        looks.look_due()
    running = WebhookDelivery.select().where((WebhookDelivery.scan_id == scan.id)
                                             & (WebhookDelivery.event == "scan.running")).count()
    assert running == 1


def test_the_timeout_comes_only_after_a_look(conn, simulator):
    with freeze_time(NOW) as frozen:
        cust, [scan] = make_scans(1, target="hang@example.com")  # the simulator never finishes it
        engine_mode(simulator, "down")
        try:
            frozen.tick(runtime.config["SCAN_TIMEOUT_SECONDS"] + 60)
            report = looks.look_due()
            assert report["engine_errors"] == 1
            assert Scan.get_by_id(scan.id).status in IN_FLIGHT  # no verdict from the engine: still in flight
        finally:
            engine_mode(simulator, "up")
        frozen.tick(states.backoff(1) + 0.01)
        report = looks.look_due()
    assert report["failed"] == 1
    assert Scan.get_by_id(scan.id).failure_code == "engine_timeout"
    assert_counters_match(cust.id)


def test_an_engine_without_the_batch_look_gets_single_looks(conn, simulator, monkeypatch):
    monkeypatch.setattr(looks, "_unsupported_until", 0.0)
    engine_mode(simulator, batch_look=False)
    try:
        with freeze_time(NOW) as frozen:
            _, scans = make_scans(4)
            before = engine_stats(simulator)
            frozen.tick(60)
            report = looks.look_due()
            assert report["completed"] == 4 and report["engine_requests"] == 5  # the refused batch, then 4 single
            after = engine_stats(simulator)
            assert after["status"] - before["status"] == 4
            # It is remembered: the next claim goes scan by scan straight away.
            _, more = make_scans(2)
            frozen.tick(60)
            assert looks.look_due()["engine_requests"] == 2
    finally:
        engine_mode(simulator)
        monkeypatch.setattr(looks, "_unsupported_until", 0.0)
    assert {s.status for s in rows([s.id for s in scans + more]).values()} == {"completed"}


def test_test_mode_scans_are_looked_at_in_the_sandbox(conn, simulator):
    with freeze_time(NOW) as frozen:
        before = engine_stats(simulator)
        cust, scans = make_scans(2, livemode=False)
        assert all(s.next_look_at is not None for s in scans)
        frozen.tick(runtime.config["SANDBOX_SCAN_SECONDS"] + 1)
        report = looks.look_due()
    assert report["completed"] == 2 and report["engine_requests"] == 0
    assert engine_stats(simulator)["total"] == before["total"]


def test_the_sweep_hands_a_scan_a_chain_tracked_to_the_batch_looks(conn):
    with freeze_time(NOW) as frozen:
        _, [scan] = make_scans(1)
        # A scan a job chain tracked before the upgrade, whose job is gone.
        Scan.update(next_look_at=None, tracking_job_id=f"trk-{scan.id}-0").where(Scan.id == scan.id).execute()
        frozen.tick(1)
        assert recovery.sweep()["scans_redispatched"] == 1
        adopted = Scan.get_by_id(scan.id)
        assert adopted.tracking_job_id is None and adopted.next_look_at == utcnow()
        report = looks.look_due()
    assert report["claimed"] == 1 and report["engine_requests"] == 1  # looked at at once
    assert no_engine_job()


def test_a_scan_the_first_look_finds_done_sends_scan_running_before_scan_completed(conn, simulator, sim_receiver):
    secret = "whsec_ZGVsaXZlcmllcyBhcGkgc2VjcmV0IDAxMjM0NQ=="
    listening_url, heard = sim_receiver(secret)
    final_only_url, heard_final_only = sim_receiver(secret)
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(credits=100, webhook_url=listening_url, webhook_secret=secret)
        from app.webhooks import endpoints
        first = endpoints.list_endpoints(key)[0]
        endpoints.update(key, first["endpoint_id"], events=["scan.running", "scan.completed", "scan.failed"])
        endpoints.create(key, url=final_only_url, events=["scan.completed"], secret=secret)
        scan = new_scan(cust, key)
        frozen.tick((scan.eta_at - NOW).total_seconds() + 60)  # the engine is done before any look
        assert looks.look_due()["completed"] == 1
        assert JobRunner(runtime.redis()).run(frozen, until=lambda: len(heard()) == 2 and heard_final_only())
    bodies = [json.loads(d["body"]) for d in heard()]
    assert [b["event"] for b in bodies] == ["scan.running", "scan.completed"]
    assert (bodies[0]["scan_id"], bodies[0]["status"]) == (scan.id, "running")
    assert [json.loads(d["body"])["event"] for d in heard_final_only()] == ["scan.completed"]
    done = Scan.get_by_id(scan.id)
    assert done.status == "completed" and done.started_at is None  # the row says what the looks saw


@pytest.mark.config(ENGINE_POLL_SECONDS=1.0)
def test_the_first_look_is_just_before_the_eta_however_short_the_poll(conn):
    """No look long before a scan can be done: the first at its eta (half a second before), then
    the cadence, not every poll from the start."""
    with freeze_time(NOW):
        _, [scan] = make_scans(1, target="slow@example.com")
    eta = (scan.eta_at - NOW).total_seconds()
    assert eta > 1.5  # the slow target's eta is longer than the poll
    assert scan.next_look_at == scan.eta_at - timedelta(seconds=0.5)


@pytest.mark.config(SCAN_TIMEOUT_SECONDS=1)
def test_the_first_look_is_never_past_the_scans_deadline(conn):
    with freeze_time(NOW):
        _, [scan] = make_scans(1, target="slow@example.com")
    assert scan.eta_at - timedelta(seconds=0.5) > NOW + timedelta(seconds=1)
    assert scan.next_look_at == NOW + timedelta(seconds=1)  # the look that may time it out


def test_with_callbacks_the_first_look_is_a_poll_past_the_eta_and_a_look_before_it_waits_for_it(conn):
    deadline = NOW + timedelta(seconds=900)
    assert looks.first_look_at(NOW, 5, deadline, callbacks=True) == NOW + timedelta(seconds=15)
    assert looks.first_look_at(NOW, 5, deadline) == NOW + timedelta(seconds=4.5)
    assert looks.first_look_at(NOW, 895, deadline, callbacks=True) == deadline
    with freeze_time(NOW) as frozen:
        _, [scan] = make_scans(1)
        Scan.update(callbacks=True).where(Scan.id == scan.id).execute()
        frozen.tick(0.1)  # a look before the eta (a callback made the scan due): it is unfinished
        Scan.update(next_look_at=utcnow()).where(Scan.id == scan.id).execute()
        assert looks.look_due()["unfinished"] == 1
    # Its next look waits a poll past the eta (10 s), not the eta: a callback will make it due.
    assert Scan.get_by_id(scan.id).next_look_at == scan.eta_at + timedelta(seconds=10)
