"""Erasure leaves no handle (D25): the scan's engine id goes with its target and result, and the
engine is asked to delete the investigation after the answer (E7), retried until it answers, with
nothing lost when the engine or Redis is down at erasure. The engine is the simulator over HTTP."""
import logging
from datetime import timedelta

import pytest
import requests
from freezegun import freeze_time

from app import recovery
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.jobs import FORGET_RETRY_SCHEDULE
from app.plumbing.models import utcnow
from app.privacy import erasure
from app.privacy.models import EngineDeletion
from app.scans.models import Scan
from app.tracking import states
from tests import factories

SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
RESULT = {"risk": {"score": 10, "band": "low"}}
ENGINE_AUTH = {"Authorization": "Bearer test-engine-token"}


@pytest.fixture
def engine(simulator):
    """The simulator's engine side: ``look(engine_id)`` -> HTTP status, ``mode(name)``."""
    class Engine:
        def look(self, engine_id):
            return requests.get(f"{simulator.url}/v1/investigations/{engine_id}", headers=ENGINE_AUTH, timeout=5).status_code

        def stats(self):
            return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()

        def mode(self, name):
            requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": name}, timeout=5).raise_for_status()
    yield Engine()
    Engine().mode("up")


def created_scan(client, account, target="jane.doe@example.com") -> tuple[str, str]:
    """A live scan submitted to the simulator and completed: (scan id, engine id)."""
    scan_id = client.post(SCAN, json={"target": target}, headers=account.headers).json["scan_id"]
    with db.connection_context():
        states.complete(scan_id, RESULT)
        return scan_id, Scan.get_by_id(scan_id).engine_id


def stored(scan_id):
    with db.connection_context():
        return Scan.get_by_id(scan_id)


def deletions_left() -> int:
    with db.connection_context():
        return EngineDeletion.select().count()


def test_erasing_a_scan_takes_its_engine_id_and_the_engine_then_forgets_it(client, account, engine, jobs):
    scan_id, engine_id = created_scan(client, account)
    assert engine_id and engine.look(engine_id) == 200
    erased = client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
    assert erased.status_code == 200
    assert stored(scan_id).engine_id is None  # with the target and result, in the same transaction
    assert engine.look(engine_id) == 200  # the answer did not wait for the engine
    jobs.run()
    assert engine.look(engine_id) == 404 and deletions_left() == 0


def test_erasing_a_batch_forgets_each_erased_scans_investigation_and_keeps_those_in_flight(client, make_customer,
                                                                                         engine, jobs):
    acct = make_customer(tier="enterprise", credits=100)
    created = client.post(BULK, json={"targets": [{"target": "a.person@example.com"}, {"target": "b.person@example.com"},
                                                  {"target": "c.person@example.com"}]}, headers=acct.headers).json
    ids = [entry["scan_id"] for entry in created["scans"]]
    with db.connection_context():
        for scan_id in ids[:2]:
            states.complete(scan_id, RESULT)
        engine_ids = [Scan.get_by_id(scan_id).engine_id for scan_id in ids]
    assert client.delete(f"{BULK}/{created['bulk_id']}", headers=acct.headers).json["erased"] == 2
    assert [stored(scan_id).engine_id for scan_id in ids] == [None, None, engine_ids[2]]
    jobs.run(until=lambda: deletions_left() == 0)
    assert [engine.look(engine_id) for engine_id in engine_ids] == [404, 404, 200]


def test_the_retention_job_forgets_the_investigations_it_erases(app, client, account, engine, jobs):
    scan_id, engine_id = created_scan(client, account)
    kept_id, kept_engine_id = created_scan(client, account, "kept@example.com")
    with db.connection_context():
        Scan.update(completed_at=utcnow() - timedelta(days=91)).where(Scan.id == scan_id).execute()
        assert erasure.erase_past_retention() == 1
    assert (stored(scan_id).engine_id, stored(kept_id).engine_id) == (None, kept_engine_id)
    jobs.run()
    assert (engine.look(engine_id), engine.look(kept_engine_id)) == (404, 200)


def test_a_deletion_the_engine_refuses_is_retried_until_it_answers(client, account, engine, jobs):
    with freeze_time(utcnow()) as frozen:
        scan_id, engine_id = created_scan(client, account)
        engine.mode("down")
        assert client.delete(f"{SCAN}/{scan_id}", headers=account.headers).status_code == 200  # not delayed
        jobs.run()  # the first try and every retry meet the engine down: the row stays
        frozen.tick(sum(FORGET_RETRY_SCHEDULE) + 1)
        jobs.run(freezer=frozen)
        assert deletions_left() == 1 and stored(scan_id).engine_id is None
        engine.mode("up")
        assert engine.look(engine_id) == 200
        with db.connection_context():  # past its retries, the sweep enqueues it again
            assert recovery.sweep()["engine_deletions_redispatched"] == 1
        jobs.run()
        assert engine.look(engine_id) == 404 and deletions_left() == 0


def test_a_retry_completes_the_deletion_once_the_engine_is_back(client, account, engine, jobs):
    with freeze_time(utcnow()) as frozen:
        scan_id, engine_id = created_scan(client, account)
        engine.mode("down")
        client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
        jobs.run()
        assert deletions_left() == 1
        engine.mode("up")
        jobs.run(freezer=frozen, until=lambda: deletions_left() == 0)
        assert engine.look(engine_id) == 404


def test_redis_down_at_erasure_loses_no_deletion(client, account, engine, jobs, monkeypatch):
    with freeze_time(utcnow()) as frozen:
        scan_id, engine_id = created_scan(client, account)
        with monkeypatch.context() as redis_down:
            redis_down.setitem(runtime.config, "REDIS_URL", "redis://127.0.0.1:1/0")
            erased = client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
        assert erased.status_code == 200 and stored(scan_id).engine_id is None
        jobs.run()
        assert engine.look(engine_id) == 200 and deletions_left() == 1  # no job: Redis refused it
        with db.connection_context():
            assert recovery.sweep()["engine_deletions_redispatched"] == 0  # its job may be on its way
            frozen.tick(runtime.config["RECOVERY_STALE_SECONDS"] + 1)
            assert recovery.sweep()["engine_deletions_redispatched"] == 1
        jobs.run()
        assert engine.look(engine_id) == 404 and deletions_left() == 0


def test_erasing_a_test_scan_has_nothing_to_delete_at_the_engine(client, account, engine, jobs):
    with db.connection_context():
        sandbox = factories.sandbox_key(account)
    scan_id = client.post(SCAN, json={"target": "jane.doe@example.com"}, headers=sandbox.headers).json["scan_id"]
    with db.connection_context():
        states.complete(scan_id, RESULT)
    assert stored(scan_id).engine_id.startswith("sbx_")  # the service's sandbox ran it
    erased = client.delete(f"{SCAN}/{scan_id}", headers=sandbox.headers)
    assert erased.status_code == 200
    assert (stored(scan_id).engine_id, stored(scan_id).target, deletions_left()) == (None, None, 0)
    jobs.run()
    assert engine.stats()["deletes"] == 0


def test_an_engine_without_deletion_is_asked_once_and_told_in_one_line_without_the_id(client, account, simulator,
                                                                                    engine, jobs, caplog):
    scan_id, engine_id = created_scan(client, account)
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "up", "deletion": False}, timeout=5)
    caplog.set_level(logging.INFO)  # what production logs (urllib3 names URLs at DEBUG)
    client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
    jobs.run()
    assert deletions_left() == 0 and engine.stats()["deletes"] == 1  # asked once, not again
    told = [r.getMessage() for r in caplog.records if "does not offer deletion" in r.getMessage()]
    assert len(told) == 1
    assert engine_id not in caplog.text and engine.look(engine_id) == 200


def test_no_log_line_names_the_engine_id_of_an_erased_scan(client, account, engine, jobs, caplog):
    caplog.set_level(logging.INFO)  # what production logs (urllib3 names URLs at DEBUG)
    with freeze_time(utcnow()) as frozen:
        scan_id, engine_id = created_scan(client, account)
        engine.mode("down")
        client.delete(f"{SCAN}/{scan_id}", headers=account.headers)
        jobs.run()
        engine.mode("up")
        jobs.run(freezer=frozen, until=lambda: deletions_left() == 0)
    assert "DELETE /v1/investigations/<id>: HTTP 503" in caplog.text  # the failed tries were logged
    assert engine_id not in caplog.text
