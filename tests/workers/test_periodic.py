"""periodic: the periodic jobs are data (name, interval setting, what runs), and each runs once per
its interval among all workers, a failing one not stopping the others."""
import logging

import pytest
import redis

from app import periodic


@pytest.mark.config(RECOVERY_INTERVAL_SECONDS=30, RETENTION_INTERVAL_SECONDS=3600)
def test_each_job_runs_once_per_its_own_interval_among_all_workers(app, redis_conn):
    first = periodic.run_due()
    assert set(first) == {job.name for job in periodic.SCHEDULE} == {"recovery", "retention", "activity_log",
                                                                      "delivery_retention", "callback_ids",
                                                                      "event_retention", "watches",
                                                                      "source_probes", "sources"}
    assert first["watches"] == {"watch_scans": 0, "watch_scans_missed": 0, "watch_scans_skipped": 0,
                                "watches_paused": 0, "watches_ended": 0}
    assert {"scans_redispatched", "reservations_reversed"} <= set(first["recovery"])
    assert first["retention"] == {"scans_erased": 0}
    assert first["event_retention"] == {"events_removed": 0}
    assert first["source_probes"]["probes_sent"] >= 10  # a round per source the engine lists (D30)
    assert periodic.run_due() == {}  # another worker (or this one) ran them within their intervals
    assert 0 < redis_conn.ttl(periodic.BY_NAME["recovery"].lock) <= 29
    assert 3500 < redis_conn.ttl(periodic.BY_NAME["retention"].lock) <= 3599
    assert 15 * 60 - 100 < redis_conn.ttl(periodic.BY_NAME["source_probes"].lock) <= 15 * 60 - 1  # SOURCE_PROBE_MINUTES
    redis_conn.delete(periodic.BY_NAME["recovery"].lock)  # the recovery interval is over
    assert set(periodic.run_due()) == {"recovery"}


def test_a_failing_job_is_logged_and_the_others_still_run(app, redis_conn, monkeypatch, caplog):
    def broken():
        raise RuntimeError("boom")
    ran = []
    monkeypatch.setattr(periodic, "SCHEDULE", (
        periodic.PeriodicJob("broken", "RECOVERY_INTERVAL_SECONDS", broken),
        periodic.PeriodicJob("fine", "RECOVERY_INTERVAL_SECONDS", lambda: ran.append(1) or {"done": 1})))
    with caplog.at_level(logging.ERROR, logger="app.periodic"):
        assert periodic.run_due() == {"fine": {"done": 1}}
    assert ran == [1]
    assert [r.getMessage() for r in caplog.records] == ["periodic job broken failed; it runs again in 60 s"]


@pytest.mark.parametrize("outage", [redis.exceptions.ConnectionError("reset"), redis.exceptions.TimeoutError("slow")])
def test_redis_lost_inside_a_job_ends_the_turn_without_a_traceback(app, redis_conn, monkeypatch, caplog, outage):
    """Redis gone while a job runs (its own commands, or its enqueues) is an outage, as the
    database's is: the turn ends and the worker says so in one line, not a job's traceback."""
    def cut_off():
        raise outage
    ran = []
    monkeypatch.setattr(periodic, "SCHEDULE", (
        periodic.PeriodicJob("cut_off", "RECOVERY_INTERVAL_SECONDS", cut_off),
        periodic.PeriodicJob("later", "RECOVERY_INTERVAL_SECONDS", lambda: ran.append(1) or {})))
    with caplog.at_level(logging.ERROR, logger="app.periodic"), pytest.raises(type(outage)):
        periodic.run_due()
    assert ran == [] and caplog.records == []
