"""callbacks: an engine's signed callback (E7) makes its scan due at once, and a look reads the
result; unsigned, wrongly signed, stale and replayed callbacks are refused and change nothing;
callback ids are forgotten once a replay of them would be stale anyway.

Callbacks are signed here with the ``standardwebhooks`` library, as an engine would sign them."""
from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from standardwebhooks.webhooks import Webhook

from app.events.models import Event
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.db import execute, transaction
from app.plumbing.errors import CallbackRefused, CallbackReplayed, InvalidRequest, PayloadTooLarge
from app.plumbing.log_tally import Tally
from app.plumbing.models import utcnow
from app.scans import reads
from app.scans import statements as scan_store
from app.scans.models import IN_FLIGHT, EngineCallback, Scan
from app.tracking import callbacks, looks, states
from app.tracking.statements import engine_callbacks, scan_states
from tests.domain_fixtures import new_customer, new_scan
from tests.jobrunner import JobRunner

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="
NOW = datetime(2026, 11, 22, 12, 0, 0)

pytestmark = pytest.mark.config(ENGINE_CALLBACK_URL="http://127.0.0.1:9/engine/v1/callbacks",
                                ENGINE_CALLBACK_SECRET=SECRET, ENGINE_POLL_SECONDS=600.0)



def signed(engine_id: str, *, msg_id: str = "msg_1", at: datetime | None = None, secret: str = SECRET,
           status: str = "done", done: int = 6) -> tuple[bytes, dict]:
    """A callback body and its Standard Webhooks headers, as an engine sends them."""
    body = json.dumps({"id": engine_id, "reference": "scn_x", "status": status, "recipes_done": done,
                       "recipes_total": 6})
    at = at or utcnow()
    signature = Webhook(secret).sign(msg_id, at.replace(tzinfo=UTC), body)
    return body.encode(), {"webhook-id": msg_id, "webhook-timestamp": str(int(at.replace(tzinfo=UTC).timestamp())),
                           "webhook-signature": signature}


def promised(scan: Scan) -> Scan:
    """The scan as a submission answered ``"callbacks": true`` records it (the first look one poll
    past the eta); the simulator of this branch makes no such promise itself."""
    deadline = states.deadline(scan)
    eta = (scan.eta_at - scan.created_at).total_seconds()
    scan_store.record_submissions([(scan.id, scan.engine_id, scan.recipes_total, scan.eta_at,
                                    looks.first_look_at(scan.created_at, eta, deadline, callbacks=True), True)])
    return Scan.get_by_id(scan.id)


def session_defaults(*names: str) -> tuple:
    """The values a new session starts with (``pg_settings.reset_val``), in the order named."""
    rows = dict(db.execute_sql("SELECT name, reset_val FROM pg_settings WHERE name = ANY(%s)", (list(names),)).fetchall())
    return tuple(rows[name] for name in names)


def state(scan_id: str) -> tuple:
    scan = Scan.get_by_id(scan_id)
    return scan.status, scan.next_look_at, scan.look_generation


def test_a_signed_callback_makes_its_scan_due_at_once_and_a_look_completes_it(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        # With callbacks promised, no look before a poll past the eta (600 s here).
        assert scan.callbacks and scan.next_look_at == scan.eta_at + timedelta(seconds=600)
        frozen.tick(3)  # the simulator has finished the investigation
        assert looks.look_due()["claimed"] == 0  # nothing due: without the callback it would wait
        assert callbacks.receive(*signed(scan.engine_id)) == callbacks.TAKEN
        assert Scan.get_by_id(scan.id).next_look_at == utcnow()
        report = looks.look_due()
    assert (report["claimed"], report["completed"]) == (1, 1)
    assert Scan.get_by_id(scan.id).status == "completed"


def test_a_callback_for_a_scan_due_already_or_an_unknown_id_changes_nothing(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = new_scan(cust, key)  # no promise: due half a second before its eta
        frozen.tick(30)
        before = state(scan.id)
        assert callbacks.receive(*signed(scan.engine_id, msg_id="msg_due")) == callbacks.TAKEN
        assert callbacks.receive(*signed("inv_nobody_has_this", msg_id="msg_unknown")) == callbacks.UNCHANGED
        assert state(scan.id) == before  # due 29.5 s ago, it stays so: first in line


def test_a_callback_during_a_look_at_its_scan_makes_it_due_again_once_the_look_is_recorded(conn):
    """The look may have asked the engine before the change the callback announces: the callback
    waits for the look's row lock, then makes the scan due again (a skipped one stayed running)."""
    cust, key = new_customer()
    scan = promised(new_scan(cust, key))
    assert callbacks.receive(*signed(scan.engine_id, msg_id="msg_first")) == callbacks.TAKEN
    outcome: list = []

    def callback_meanwhile():
        with db.connection_context():
            outcome.append(callbacks.receive(*signed(scan.engine_id, msg_id="msg_done")))

    with transaction():
        [(_, claimed)] = scan_states.claim_due(statuses=IN_FLIGHT, now=utcnow(), limit=10, hold_seconds=30)
        thread = threading.Thread(target=callback_meanwhile)
        thread.start()
        assert wait_for_lock_waiter(), "the callback should wait for the look's claim"
        # The look saw it running (before the change) and puts its next look back to the safety net.
        far = utcnow() + timedelta(hours=1)
        scan_states.record_looks([(scan.id, claimed.look_generation, far, 0, None, None, True)], statuses=IN_FLIGHT,
                                 queued="queued", running="running", now=utcnow())
    thread.join(10)
    assert outcome == [callbacks.TAKEN]
    assert Scan.get_by_id(scan.id).next_look_at <= utcnow()


def events_of(scan_id: str) -> list[str]:
    return [e.kind for e in Event.select().where(Event.scan_id == scan_id).order_by(Event.id)]


def test_a_progress_callback_records_its_progress_and_the_report_of_a_start_without_a_look(conn):
    """The engine calls back at every change: only the final one is worth a look. A progress
    callback writes its counts (never backwards: callbacks come in any order) and, for a queued
    scan, when the engine started it; a looker's turn then moves the scan to running, started
    then, with its event. The scan's next look stays where it was."""
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        due_at = scan.next_look_at
        frozen.tick(2)
        assert callbacks.receive(*signed(scan.engine_id, msg_id="msg_pending", status="pending", done=0)) \
            == callbacks.UNCHANGED
        assert Scan.get_by_id(scan.id).engine_started_at is None
        assert callbacks.receive(*signed(scan.engine_id, msg_id="msg_run4", status="running", done=4)) \
            == callbacks.TAKEN
        started = utcnow()
        frozen.tick(1)
        late = signed(scan.engine_id, msg_id="msg_run2", status="running", done=2)  # sent earlier, came later
        assert callbacks.receive(*late) == callbacks.UNCHANGED  # reported once: the first time stays
        written = Scan.get_by_id(scan.id)
        assert (written.status, written.engine_started_at, written.recipes_done, written.recipes_total) \
            == ("queued", started, 4, 6)
        assert events_of(scan.id) == []  # the callback wrote no event: the looker's move does
        frozen.tick(1)
        assert looks.move_reported_starts() == 1
        moved = Scan.get_by_id(scan.id)
        assert (moved.status, moved.started_at) == ("running", started)
        assert moved.next_look_at == due_at and looks.look_due()["claimed"] == 0  # no look caused
        assert looks.move_reported_starts() == 0
        assert events_of(scan.id) == ["scan.running"]  # once, though two callbacks said running
        assert json.loads(Event.get(Event.scan_id == scan.id).body)["status"] == "running"
        with pytest.raises(CallbackReplayed):
            callbacks.receive(*late)
    assert reads.read_scan(cust.id, scan.id)["progress"] == {"recipes_total": 6, "recipes_done": 4}


def test_progress_does_not_wait_for_the_disk_and_the_move_to_running_does(conn):
    """A crash may forget a progress callback, its report of a start included (the next one, or
    the look, says it again), but not a move to running, whose event is to be delivered: the
    looker's transaction waits for the disk."""
    with freeze_time(NOW):
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        with transaction():
            assert engine_callbacks.progress(
                "msg_a", until=NOW + timedelta(minutes=5), engine_id=scan.engine_id, statuses=IN_FLIGHT,
                running=True, recipes_total=6, recipes_done=1, queued="queued", now=NOW,
                lock_timeout_ms=1000) == (True, True)
            assert execute("SELECT current_setting('synchronous_commit')").fetchone() == ("off",)
        with transaction():
            [moved] = scan_states.move_reported_starts(queued="queued", running="running", limit=10)
            assert (moved.id, moved.status, moved.started_at) == (scan.id, "running", NOW)
            # The session's default, which waits for the disk on any server that does (the
            # embedded test server does not, for speed).
            assert execute("SELECT current_setting('synchronous_commit')").fetchone() \
                == session_defaults("synchronous_commit")


def test_the_looker_move_leaves_a_scan_a_look_holds_to_that_look(conn):
    """A scan reported running while a look holds it is skipped, not waited for: the look moves or
    ends it itself, and the move comes to it once the look lets go, unless it is no longer queued."""
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        held, free = promised(new_scan(cust, key)), promised(new_scan(cust, key))
        for number, scan in enumerate((held, free)):
            assert callbacks.receive(*signed(scan.engine_id, msg_id=f"msg_{number}", status="running", done=1)) \
                == callbacks.TAKEN
        frozen.tick(1)

    def move_meanwhile(outcome):
        with db.connection_context():
            outcome.append(looks.move_reported_starts())

    outcome: list = []
    with transaction():
        execute(f"SELECT 1 FROM {Scan._meta.table_name} WHERE id = ? FOR UPDATE", (held.id,))
        thread = threading.Thread(target=move_meanwhile, args=(outcome,))
        thread.start()
        thread.join(10)
        assert outcome == [1] and not thread.is_alive()  # the free one, at once
    assert (Scan.get_by_id(held.id).status, Scan.get_by_id(free.id).status) == ("queued", "running")
    assert looks.move_reported_starts() == 1 and Scan.get_by_id(held.id).status == "running"


def test_a_scan_reported_running_that_ends_before_its_move_hears_of_running_first(conn):
    """The final callback can come before a looker's turn: the look that ends the scan writes its
    ``scan.running`` before its final event, and no move follows."""
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        frozen.tick(1)
        callbacks.receive(*signed(scan.engine_id, msg_id="msg_running", status="running", done=1))
        frozen.tick(3)  # the simulator has finished the investigation
        assert callbacks.receive(*signed(scan.engine_id, msg_id="msg_done")) == callbacks.TAKEN
        assert looks.look_due()["completed"] == 1
        assert looks.move_reported_starts() == 0
    assert events_of(scan.id) == ["scan.running", "scan.completed"]
    assert Scan.get_by_id(scan.id).status == "completed"


def wait_for_lock_waiter(seconds: float = 5.0) -> bool:
    """Whether another session comes to wait on a lock within ``seconds`` (polled)."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        # (In a transaction the statistics are a snapshot taken once: cleared before each look.)
        db.execute_sql("SELECT pg_stat_clear_snapshot()")
        waiting = db.execute_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND datname = current_database()").fetchone()[0]
        if waiting:
            return True
        time.sleep(0.02)
    return False


def refused_calls(engine_id: str) -> dict:
    body, headers = signed(engine_id, msg_id="msg_refused")
    stale_body, stale_headers = signed(engine_id, msg_id="msg_stale", at=utcnow() - timedelta(seconds=301))
    future_body, future_headers = signed(engine_id, msg_id="msg_future", at=utcnow() + timedelta(seconds=301))
    wrong_body, wrong_headers = signed(engine_id, msg_id="msg_wrong", secret=OTHER_SECRET)
    return {
        "unsigned": (body, {}),
        "no signature": (body, {k: v for k, v in headers.items() if k != "webhook-signature"}),
        "wrong secret": (wrong_body, wrong_headers),
        "body changed": (body.replace(b'"done"', b'"error"'), headers),
        "stale": (stale_body, stale_headers),
        "from the future": (future_body, future_headers),
    }


def test_unsigned_wrongly_signed_and_stale_callbacks_are_refused_and_change_nothing(conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        before = state(scan.id)
        for name, (body, headers) in refused_calls(scan.engine_id).items():
            with pytest.raises(CallbackRefused) as refused:
                callbacks.receive(body, headers)
            assert refused.value.code == "invalid_signature", name
        assert state(scan.id) == before
        assert EngineCallback.select().count() == 0


REASONS = {"unsigned": "unsigned", "no signature": "unsigned", "wrong secret": "bad_signature",
           "body changed": "bad_signature", "stale": "stale", "from the future": "stale"}


def refusals_counted(reason: str) -> float:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("scan_api_engine_callbacks_refused_total", {"reason": reason}) or 0.0


def test_every_refusal_is_counted_by_reason_and_logged_in_one_line_with_the_count(conn, caplog):
    """A flood of forgeries is one log line per interval (and process), saying how many, never a line
    each; the metric counts each by its reason."""
    callbacks.REFUSALS.flush()
    caplog.clear()
    with freeze_time(NOW):
        calls = refused_calls("inv_1")
        before = {reason: refusals_counted(reason) for reason in set(REASONS.values()) | {"too_large", "malformed"}}
        with caplog.at_level(logging.DEBUG):
            for _ in range(50):
                for body, headers in calls.values():
                    with pytest.raises(CallbackRefused):
                        callbacks.receive(body, headers)
                with pytest.raises(PayloadTooLarge):
                    callbacks.receive(*signed("x" * callbacks.MAX_BODY_BYTES))
                with pytest.raises(CallbackRefused):
                    callbacks.receive(b"{}", {"webhook-id": "m" * 300, "webhook-timestamp": "1",
                                              "webhook-signature": "v1,AAAA"})
            assert caplog.records == []  # nothing yet: the line is written when the minute ends
            timer = callbacks.REFUSALS._timer
            assert timer is not None and timer.is_alive() and timer.interval == 60
            counts = callbacks.REFUSALS.flush()
        assert timer.finished.is_set()  # cancelled: it writes no second line
    expected = {"unsigned": 100, "bad_signature": 100, "stale": 100, "too_large": 50, "malformed": 50}
    assert counts == expected
    assert {reason: refusals_counted(reason) - before[reason] for reason in expected} == expected
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["400 engine callbacks refused in the last 60 s (bad_signature 100, malformed 50, stale 100, "
                     "too_large 50, unsigned 100)"]
    assert callbacks.REFUSALS.flush() == {}  # and the next interval starts from nothing


def test_the_refusals_line_is_written_by_its_timer_when_the_interval_ends(caplog):
    """The timer of the first refusal writes the line by itself (here after 50 ms, not a minute)."""
    tally = Tally(logging.getLogger("test.tally"), "%d refused in %.0f s (%s)", interval=0.05)
    with caplog.at_level(logging.INFO, logger="test.tally"):
        for _ in range(3):
            tally.add("stale")
        tally._timer.join(5)
    assert [r.getMessage() for r in caplog.records] == ["3 refused in 0 s (stale 3)"]
    assert tally._timer is None


def test_a_replayed_callback_is_refused_and_changes_nothing(conn):
    with freeze_time(NOW) as frozen:
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        call = signed(scan.engine_id)  # "done", though the engine is not done yet
        assert callbacks.receive(*call) == callbacks.TAKEN
        assert looks.look_due()["unfinished"] == 1  # the look put its next due time back
        after_look = state(scan.id)
        assert after_look[1] > utcnow()
        frozen.tick(60)  # still within the 5 minutes its signature is accepted for
        with pytest.raises(CallbackReplayed):
            callbacks.receive(*call)
        assert state(scan.id) == after_look


def test_a_callback_that_is_not_e7s_body_is_a_400_after_its_signature_and_changes_nothing(conn):
    with freeze_time(NOW):
        cust, key = new_customer()
        scan = promised(new_scan(cust, key))
        before = state(scan.id)
        for raw in (b"not json", b"[]", b'{"id": 5}', b'{"status": "done"}'):
            at = utcnow()
            headers = {"webhook-id": "msg_body", "webhook-timestamp": str(int(at.replace(tzinfo=UTC).timestamp())),
                       "webhook-signature": Webhook(SECRET).sign("msg_body", at.replace(tzinfo=UTC), raw.decode())}
            with pytest.raises(InvalidRequest):
                callbacks.receive(raw, headers)
        with pytest.raises(PayloadTooLarge):  # a 413, before its signature is looked at
            callbacks.receive(*signed("x" * callbacks.MAX_BODY_BYTES))
        assert state(scan.id) == before


@pytest.mark.config(ENGINE_CALLBACK_SECRET=None)
def test_without_a_secret_every_callback_is_refused(conn):
    with pytest.raises(CallbackRefused):
        callbacks.receive(*signed("inv_1"))


def test_callback_ids_are_forgotten_once_a_replay_would_be_stale(conn):
    with freeze_time(NOW) as frozen:
        callbacks.receive(*signed("inv_1", msg_id="msg_old"))
        frozen.tick(200)
        callbacks.receive(*signed("inv_1", msg_id="msg_new"))
        frozen.tick(101)  # msg_old's timestamp is 301 s old: a replay of it is refused as stale
        assert callbacks.forget_expired() == {"callback_ids_forgotten": 1}
        assert [c.id for c in EngineCallback.select()] == ["msg_new"]
        with pytest.raises(CallbackRefused):
            callbacks.receive(*signed("inv_1", msg_id="msg_old", at=NOW))


def test_callbacks_lost_every_one_still_complete_every_scan_through_looks(conn):
    """E7: callbacks may all be lost; the look one poll past the eta is the safety net."""
    with freeze_time(NOW) as frozen:
        cust, key = new_customer(credits=100, inflight=100, hour=1000, day=1000)
        scans = [promised(new_scan(cust, key, target=f"user{i}@example.com")) for i in range(12)]
        runner = JobRunner(runtime.redis())
        assert runner.run(frozen, until=lambda: Scan.select().where(Scan.status == "completed").count() == 12)
        # Each was looked at once, at its safety-net look: none before the eta, none wasted.
        assert runner.looked == 12
        done = {s.id: s for s in Scan.select()}
        assert all(abs((done[s.id].completed_at - (s.eta_at + timedelta(seconds=600))).total_seconds()) < 0.1
                   for s in scans)
