"""Probes (D30, E8) against the simulated engine: rounds sent at most once per interval, judged
right or wrong, a wrong source broken and quarantined, released after two right rounds."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import requests
from freezegun import freeze_time

from app.accounts.models import CreditLedger
from app.activity.models import ActivityEntry
from app.events.models import Event
from app.scans.models import Scan
from app.sources import health, probes
from app.sources.models import Source
from simulator.sources import PROBE_SECONDS
from tests import factories

START = datetime(2026, 3, 2, 12, 0, 0)
PROBE_DONE = timedelta(seconds=PROBE_SECONDS * 0.01 + 1)  # the suite's simulator runs at a 0.01 time scale


def sim(simulator, path, body=None):
    if body is None:
        return requests.get(f"{simulator.url}{path}", timeout=5).json()
    response = requests.post(f"{simulator.url}{path}", json=body, timeout=5)
    response.raise_for_status()
    return response.json()


def round_trip(frozen, now):
    """A round sent at ``now``, answered, judged."""
    report = probes.send(now)
    frozen.tick(PROBE_DONE)
    report.update(probes.run_health())
    return report


def test_a_round_per_source_per_interval_invisible_to_customers(conn, simulator):
    account = factories.customer()
    listed = len(sim(simulator, "/_sim/engine/sources")["sources"])
    with freeze_time(START) as frozen:
        assert probes.send(START) == {"probes_sent": listed}
        assert sim(simulator, "/_sim/engine/volume")["submitted"] == 2 * listed
        frozen.tick(timedelta(minutes=5))
        assert probes.send(START + timedelta(minutes=5)) == {"probes_sent": 0}  # rounds in flight: none again
        assert sim(simulator, "/_sim/engine/volume")["submitted"] == 2 * listed
        frozen.tick(PROBE_DONE)
        report = probes.look(START + timedelta(minutes=5) + PROBE_DONE)
    assert report == {"probes_right": listed}
    source = Source.get_by_id("breach_index")
    assert (source.last_probe_ok, source.probe_streak, source.probe_sent_at) == (True, 1, None)
    assert source.kinds and source.probes
    # Nothing of any customer's: no scan, charge, activity entry or event.
    assert Scan.select().count() == 0 and ActivityEntry.select().count() == 0 and Event.select().count() == 0
    assert CreditLedger.select().where(CreditLedger.customer == account.id).count() == 1  # the opening grant


def test_a_wrong_source_is_broken_quarantined_left_out_then_released_after_two_right_rounds(conn, simulator):
    sim(simulator, "/_sim/engine/sources/gravatar", {"mode": "wrong"})
    interval = timedelta(minutes=15)
    with freeze_time(START) as frozen:
        now = START
        round_trip(frozen, now)
        assert Source.get_by_id("gravatar").probe_streak == -1
        assert not Source.get_by_id("gravatar").quarantined  # one wrong round is not enough
        now += interval
        frozen.move_to(now)
        round_trip(frozen, now)
        gravatar = Source.get_by_id("gravatar")
        assert (gravatar.status, gravatar.quarantined, gravatar.last_probe_ok) == ("broken", True, False)
        assert gravatar.last_probes.count('"outcome": "wrong"') == 2
        assert Source.get_by_id("github").status == "healthy"
        assert "gravatar" not in health.asked_sources("email")
        sim(simulator, "/_sim/engine/sources/gravatar", {"mode": "ok"})
        now += interval
        frozen.move_to(now)
        round_trip(frozen, now)
        assert Source.get_by_id("gravatar").quarantined  # one right round is not enough
        now += interval
        frozen.move_to(now)
        round_trip(frozen, now)
        gravatar = Source.get_by_id("gravatar")
        assert (gravatar.status, gravatar.quarantined, gravatar.probe_streak) == ("healthy", False, 2)
        assert health.asked_sources("email") is None


def test_an_engine_erroring_on_probes_makes_them_unanswered_not_wrong(conn, simulator):
    sim(simulator, "/_sim/engine/sources/github", {"mode": "error"})
    with freeze_time(START) as frozen:
        for n in range(3):
            now = START + n * timedelta(minutes=15)
            frozen.move_to(now)
            round_trip(frozen, now)
    github = Source.get_by_id("github")
    assert (github.probe_streak, github.last_probe_ok, github.status) == (0, False, "healthy")  # 6 answers: too few


def test_an_engine_without_the_listing_gets_no_probes(conn, simulator):
    sim(simulator, "/_sim/engine/mode", {"mode": "up", "sources_listing": False})
    assert probes.send(START) == {"probes_unsupported": 1}
    assert sim(simulator, "/_sim/engine/volume")["submitted"] == 0 and Source.select().count() == 0


def test_the_operator_probes_one_source_now(conn, simulator):
    sim(simulator, "/_sim/engine/sources/x", {"mode": "wrong"})
    report = probes.probe_now("x", wait_seconds=5)
    assert report["probes_sent"] == 1 and report.get("probes_wrong") == 1
    assert Source.get_by_id("x").last_probe_ok is False
    assert Source.select().where(Source.probe_sent_at.is_null(False)).count() == 0
    with pytest.raises(Exception, match="no source"):
        probes.probe_now("nope")


def test_a_round_judged_by_two_processes_at_once_counts_once(conn):
    """A worker's periodic look and an operator's `sources probe` may judge one round at once:
    the judgement is a compare-and-set on the round in flight, so the second changes nothing (it
    moved the streak twice, and a source could be quarantined after one wrong round)."""
    from app.sources import statements as store
    now = datetime(2026, 3, 2, 12, 0)
    store.upsert_listed("twice", "Twice", '["email"]', None, now)
    store.update("twice", probe_sent_at=now, probe_good_id="g", probe_bad_id="b")
    [first_view] = [s for s in store.all_sources() if s.id == "twice"]
    [second_view] = [s for s in store.all_sources() if s.id == "twice"]  # read by the other process
    assert probes._judge_round(first_view, probes.WRONG, {}, now + timedelta(seconds=5)) is True
    assert probes._judge_round(second_view, probes.WRONG, {}, now + timedelta(seconds=5)) is False
    [source] = [s for s in store.all_sources() if s.id == "twice"]
    assert (source.probe_streak, source.probe_sent_at, source.last_probes.count("wrong")) == (-1, None, 1)
