"""POST /engine/v1/callbacks (E7) over HTTP: no key, free, outside the customer API's document; a
signed callback is answered at once and makes its scan due; every refusal is the JSON envelope and
changes nothing; and a flood of bogus callbacks costs the database nothing (not one statement)."""
from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
import requests
from flask import Flask
from freezegun import freeze_time

from app import api_calls
from app.activity.models import ActivityEntry
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.models import utcnow
from app.scans.models import EngineCallback, Scan
from app.tracking import callbacks, looks
from tests.api.helpers import balance
from tests.conftest import ServerThread
from tests.tracking.test_callbacks import NOW, OTHER_SECRET, SECRET, promised, session_defaults, signed

PATH = "/engine/v1/callbacks"
pytestmark = pytest.mark.config(ENGINE_CALLBACK_URL="http://127.0.0.1:9/engine/v1/callbacks",
                                ENGINE_CALLBACK_SECRET=SECRET, ENGINE_POLL_SECONDS=600.0)



def post(client, call, **extra):
    body, headers = call
    return client.post(PATH, data=body, headers={"Content-Type": "application/json", **headers, **extra})


def create_scan(client, account) -> Scan:
    response = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers)
    assert response.status_code == 202, response.json
    with db.connection_context():
        return promised(Scan.get_by_id(response.json["scan_id"]))


def test_a_signed_callback_is_answered_at_once_free_and_without_a_key_and_its_scan_is_looked_at(client, account):
    with freeze_time(NOW) as frozen:
        scan = create_scan(client, account)
        credits, entries = balance(account), ActivityEntry.select().count()
        frozen.tick(3)
        response = post(client, signed(scan.engine_id))
        assert (response.status_code, response.json) == (200, {"ok": True})
        assert (balance(account), ActivityEntry.select().count()) == (credits, entries)  # free, not a customer call
        with db.connection_context():
            assert Scan.get_by_id(scan.id).next_look_at == utcnow()
            assert looks.look_due()["completed"] == 1
    read = client.get(f"/api/v1/scan/{scan.id}", headers=account.headers)
    assert read.json["status"] == "completed"


def test_every_refusal_is_the_json_envelope_and_changes_nothing(client, account):
    from tests.tracking.test_callbacks import refused_calls

    with freeze_time(NOW):
        scan = create_scan(client, account)
        with db.connection_context():
            before = Scan.get_by_id(scan.id).next_look_at
        for name, call in refused_calls(scan.engine_id).items():
            response = post(client, call)
            assert response.status_code == 401, name
            assert response.json["error"] == "invalid_signature" and response.json["request_id"], name
            assert "WWW-Authenticate" not in response.headers  # not a customer's bearer key
        taken = signed(scan.engine_id, msg_id="msg_once", status="running")
        assert post(client, taken).status_code == 200
        with db.connection_context():
            looks.look_due()
            after_look = Scan.get_by_id(scan.id).next_look_at
        replay = post(client, taken)
        assert (replay.status_code, replay.json["error"]) == (400, "callback_replayed")
        too_large = post(client, signed("x" * 5000))
        assert (too_large.status_code, too_large.json["error"]) == (413, "payload_too_large")
        assert client.get(PATH).status_code == 405 and client.get(PATH).json["error"] == "method_not_allowed"
        with db.connection_context():
            assert before > utcnow() and Scan.get_by_id(scan.id).next_look_at == after_look > utcnow()
            assert [c.id for c in EngineCallback.select()] == ["msg_once"]


@pytest.fixture
def database_calls(monkeypatch):
    """Every statement the database object runs and every connection it opens, from now on."""
    calls = []
    database = db.obj
    execute_sql, connect = database.execute_sql, database.connect
    monkeypatch.setattr(database, "execute_sql", lambda *a, **k: calls.append(a[0]) or execute_sql(*a, **k))
    monkeypatch.setattr(database, "connect", lambda *a, **k: calls.append("connect") or connect(*a, **k))
    return calls


def test_bogus_callbacks_cost_the_database_nothing(client, account, database_calls):
    """A flood of forged callbacks (unsigned, wrongly signed, stale, malformed, oversized) is
    refused before the database is touched: no connection, no statement, whatever their number."""
    with freeze_time(NOW):
        engine_id = "inv_some_engine_id"
        forged = [*refused_calls_list(engine_id),
                  (json.dumps({"id": engine_id}).encode(), {"webhook-id": "m", "webhook-timestamp": "x" * 40,
                                                          "webhook-signature": "v1,AAAA"}),
                  (b"{" * 5000, {}),
                  (b"", {"webhook-id": "m" * 300, "webhook-timestamp": "1", "webhook-signature": "v1,AAAA"})]
        database_calls.clear()
        statuses = {post(client, call).status_code for _ in range(50) for call in forged}
    assert statuses == {401, 413}
    assert database_calls == []
    # The same spy sees a signed callback's statement: the count above could have failed.
    with freeze_time(NOW):
        assert post(client, signed(engine_id, msg_id="msg_real")).status_code == 200
    assert any("engine_callback" in str(sql) for sql in database_calls)


@pytest.fixture
def round_trips(monkeypatch):
    """The query strings the database object sends (each a cursor's one ``execute``: a statement
    through ``execute_sql`` as well as peewee's own ``BEGIN`` and ``COMMIT``), from now on."""
    sent = []
    database = db.obj
    cursor = database.cursor

    class Spied:
        def __init__(self, real):
            self.real = real

        def execute(self, sql, *args, **kwargs):
            sent.append(sql)
            return self.real.execute(sql, *args, **kwargs)

        def __getattr__(self, name):  # fetchone, rowcount, description...
            return getattr(self.real, name)

    def spied(*args, **kwargs):
        return Spied(cursor(*args, **kwargs))

    monkeypatch.setattr(database, "cursor", spied)
    return sent


def http_requests(status: str) -> float:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("scan_api_http_requests_total",
                                     {"method": "POST", "route": PATH, "status": status}) or 0.0


def test_a_callback_taken_is_one_round_trip_to_the_database_and_gives_its_connection_back(client, account,
                                                                                          round_trips):
    """``BEGIN``, the statement and ``COMMIT`` were three round trips a callback: the statement now
    commits on its own (one query string, one implicit transaction). The first that says the
    engine runs the queued scan too: it records when, and a looker moves the scan to running."""
    with freeze_time(NOW):
        scan = create_scan(client, account)
        for number, (status, done) in enumerate((("running", 0), ("running", 2), ("running", 3), ("done", 6))):
            round_trips.clear()
            assert post(client, signed(scan.engine_id, msg_id=f"msg_{number}", status=status,
                                       done=done)).status_code == 200
            assert len(round_trips) == 1 and "engine_callback" in round_trips[0], (status, round_trips)
            assert db.is_closed()  # the connection is back in the pool
        with db.connection_context():
            stored = Scan.get_by_id(scan.id)
            assert (stored.status, stored.engine_started_at, stored.recipes_done, stored.next_look_at) \
                == ("queued", utcnow(), 3, utcnow())
            assert EngineCallback.select().count() == 4
            # Its settings ended with it (D19: nothing outlives a transaction behind a pooler): each
            # is the session's default again (the embedded test server's is not durable: "off").
            assert db.execute_sql("SELECT current_setting('lock_timeout'), current_setting('synchronous_commit')"
                                  ).fetchone() == session_defaults("lock_timeout", "synchronous_commit")


def test_a_callback_taken_is_answered_in_front_of_flask_as_flask_answered_it(app, client, account, monkeypatch):
    """The fast path (``app.tracking.routes.FastPath``) answers a callback taken with the view's
    status, body and headers, the client's request id echoed, and counts it in the same metric."""
    with freeze_time(NOW):
        scan = create_scan(client, account)
        before = http_requests("200")
        fast = post(client, signed(scan.engine_id, msg_id="msg_fast", status="running"), **{"X-Request-Id": "abc-1"})
        generated = post(client, signed(scan.engine_id, msg_id="msg_fast_2", status="running"))
        monkeypatch.setattr(app, "wsgi_app", app.wsgi_app.wsgi_app)  # Flask alone, as before
        flask = post(client, signed(scan.engine_id, msg_id="msg_flask", status="running"), **{"X-Request-Id": "abc-2"})
    assert http_requests("200") - before == 3
    assert fast.status_code == flask.status_code == 200 and fast.data == flask.data == b'{"ok":true}\n'
    assert (fast.headers["X-Request-Id"], flask.headers["X-Request-Id"]) == ("abc-1", "abc-2")
    assert generated.headers["X-Request-Id"].startswith("req_")
    def without_id(response):
        return sorted((k, v) for k, v in response.headers.items() if k != "X-Request-Id")
    assert without_id(fast) == without_id(flask)


def test_a_body_over_4_kib_is_a_413_whether_announced_or_chunked(served_app, client, account):
    """A chunked body has no Content-Length to refuse up front: measured once read, it is refused
    alike (it was a 400), and nothing changes."""
    with freeze_time(NOW):
        scan = create_scan(client, account)
        body, headers = signed(scan.engine_id, msg_id="msg_big")
        big = body[:-1] + b', "pad": "' + b"x" * 5000 + b'"}'
    url = served_app.url + PATH
    announced = requests.post(url, data=big, headers={**headers, "Content-Type": "application/json"}, timeout=10)
    chunked = requests.post(url, data=iter([big[:2000], big[2000:]]), timeout=10,
                            headers={**headers, "Content-Type": "application/json"})
    assert "Content-Length" not in chunked.request.headers  # sent chunked
    for response in (announced, chunked):
        assert (response.status_code, response.json()["error"]) == (413, "payload_too_large"), response.text
        assert response.json()["message"] == "the callback body is larger than 4096 bytes"
    with db.connection_context():
        assert EngineCallback.select().count() == 0


def test_a_flood_of_forged_callbacks_writes_no_line_per_call(client, account, caplog):
    """50,000 wrongly signed callbacks wrote 51,520 log lines: now none per call, the refusals
    are counted (metric) and written as one line with their count when the minute ends."""
    from tests.tracking.test_callbacks import refusals_counted
    callbacks.REFUSALS.flush()
    caplog.clear()
    before = refusals_counted("bad_signature")
    with freeze_time(NOW):
        forged = signed("inv_forged", msg_id="msg_forged", secret=OTHER_SECRET)
        with caplog.at_level(logging.DEBUG):
            answers = {post(client, forged).status_code for _ in range(300)}
            assert answers == {401}
            assert [r.getMessage() for r in caplog.records] == []  # not one line per refusal
            callbacks.REFUSALS.flush()  # the end of the minute
    assert [r.getMessage() for r in caplog.records] == [
        "300 engine callbacks refused in the last 60 s (bad_signature 300)"]
    assert refusals_counted("bad_signature") - before == 300
    served = client.get("/metrics").get_data(as_text=True)
    assert 'scan_api_engine_callbacks_refused_total{reason="bad_signature"}' in served


def test_callbacks_taken_are_one_line_a_minute_by_what_they_said_not_a_line_each(client, account, caplog):
    """The engine calls back at every change of every scan (about nine a scan): a request line each
    was the busiest line of the log. Taken ones are counted into one line a minute; one that is
    not taken (here a replay) keeps its request line."""
    callbacks.TAKEN_LINES.flush()
    with freeze_time(NOW), caplog.at_level(logging.INFO):
        caplog.clear()
        for number, status in enumerate(("running", "running", "done")):
            assert post(client, signed("inv_some", msg_id=f"msg_taken_{number}", status=status)).status_code == 200
        assert [r.getMessage() for r in caplog.records] == []
        callbacks.TAKEN_LINES.flush()  # the end of the minute
        assert [r.getMessage() for r in caplog.records] == [
            "3 engine callbacks taken in the last 60 s (final 1, progress 2)"]
        caplog.clear()
        assert post(client, signed("inv_some", msg_id="msg_taken_0", status="running")).status_code == 400
    lines = [r.getMessage() for r in caplog.records if r.name == "app.access"]
    assert len(lines) == 1 and lines[0].startswith("POST /engine/v1/callbacks 400 "), lines


def refused_calls_list(engine_id):
    from tests.tracking.test_callbacks import refused_calls
    return list(refused_calls(engine_id).values())


def test_the_endpoint_is_not_in_the_customer_api_document(client):
    spec = client.get("/api/v1/openapi.json").json
    assert not [path for path in spec["paths"] if "engine" in path or "callbacks" in path]


def test_no_other_view_may_sit_outside_the_accounted_wrappers_under_engine(app):
    bare = Flask("extra")
    bare.register_blueprint(app.blueprints["engine_callbacks"])
    api_calls.check_accounted(bare)  # the one exemption, named in hooks.UNACCOUNTED
    bare.add_url_rule("/engine/v1/other", "other", lambda: "", methods=["POST"])
    with pytest.raises(RuntimeError, match="UNACCOUNTED"):
        api_calls.check_accounted(bare)


def test_a_wrong_secret_form_is_refused_at_start_and_production_wants_the_secret_with_the_url():
    from app.plumbing.config import ConfigError, finalize, load_settings

    base = {"APP_ENV": "production", "SECRET_KEY": "k" * 40, "DATABASE_URL": "postgresql://x/y",
            "REDIS_URL": "redis://x", "ENGINE_URL": "https://engine", "PUBLIC_BASE_URL": "https://api.example.com",
            "ENGINE_CALLBACK_URL": "https://api.internal/engine/v1/callbacks"}
    with pytest.raises(ConfigError, match="ENGINE_CALLBACK_SECRET"):
        finalize(load_settings(base))
    assert finalize(load_settings({**base, "ENGINE_CALLBACK_SECRET": SECRET}))["ENGINE_CALLBACK_SECRET"] == SECRET
    with pytest.raises(ConfigError, match="whsec_"):
        finalize(load_settings({**base, "ENGINE_CALLBACK_SECRET": "plain-secret"}))
    with pytest.raises(ConfigError, match="ENGINE_CALLBACK_URL"):
        finalize(load_settings({**base, "ENGINE_CALLBACK_SECRET": OTHER_SECRET, "ENGINE_CALLBACK_URL": "engine/cb"}))
    # Elsewhere the URL alone is allowed (every callback is then refused, and looks do the work).
    assert finalize(load_settings({**base, "APP_ENV": "development"}))["ENGINE_CALLBACK_URL"]



# --- end to end: the bundled simulator calls back ---------------------------------------------


@pytest.fixture(scope="module")
def calling_simulator():
    """A simulator that promises callbacks (it has the shared secret) and sends them, signed."""
    from simulator.app import create_sim_app
    server = ServerThread(create_sim_app({"SIM_TIME_SCALE": 0.01, "ENGINE_TOKEN": "test-engine-token",
                                          "ENGINE_CALLBACK_SECRET": SECRET}))
    yield server
    server.stop()


@pytest.fixture
def calling_service(app, calling_simulator):
    """The API on a real socket, submitting to ``calling_simulator`` with its own callback URL."""
    requests.post(f"{calling_simulator.url}/_sim/engine/reset", timeout=5).raise_for_status()
    server = ServerThread(app)
    settings = {"ENGINE_URL": calling_simulator.url, "ENGINE_CALLBACK_URL": server.url + PATH}
    app.config.update(settings)
    runtime.config.update(settings)
    yield calling_simulator.url
    server.stop()


def look_until_final(scan_ids: list[str], seconds: float = 20.0) -> dict[str, Scan]:
    """Run the batch looks, as a worker's lookers do, until every scan is final (or ``seconds``)."""
    ends = time.monotonic() + seconds
    while True:
        with db.connection_context():
            looks.look_due()
            scans = {s.id: s for s in Scan.select().where(Scan.id.in_(scan_ids))}
        if all(s.status in ("completed", "failed") for s in scans.values()) or time.monotonic() > ends:
            return scans
        time.sleep(0.05)  # polled: the simulator's callbacks come in real time


def sim_callbacks(sim_url) -> dict:
    return requests.get(f"{sim_url}/_sim/engine/callbacks", timeout=5).json()


def create_scans(client, account, n) -> list[str]:
    response = client.post("/api/v1/scan/bulk", headers=account.headers,
                           json={"targets": [{"target": f"user{i}@example.com"} for i in range(n)]})
    assert response.status_code == 202, response.json
    return [entry["scan_id"] for entry in response.json["scans"]]


def test_end_to_end_the_simulator_calls_back_and_the_scans_complete_long_before_their_first_look(
        client, account, calling_service):
    ids = create_scans(client, account, 5)
    with db.connection_context():
        submitted = {s.id: s for s in Scan.select().where(Scan.id.in_(ids))}
    # Every submission carried callback_url and the engine promised: the first looks wait 600 s.
    assert all(s.callbacks and s.next_look_at >= s.eta_at + timedelta(seconds=600) for s in submitted.values())
    done = look_until_final(ids)
    assert all(s.status == "completed" for s in done.values()), {s.status for s in done.values()}
    assert all(s.completed_at < submitted[s.id].next_look_at for s in done.values())  # the callbacks did it
    counts = sim_callbacks(calling_service)
    assert counts["sent"] >= 5 and counts["failed"] == 0  # every callback answered 2xx


@pytest.mark.config(ENGINE_POLL_SECONDS=1.0)
def test_end_to_end_every_callback_lost_every_scan_still_completes_through_looks(client, account, calling_service):
    requests.post(f"{calling_service}/_sim/engine/callbacks", json={"drop": True}, timeout=5).raise_for_status()
    ids = create_scans(client, account, 5)
    done = look_until_final(ids)
    assert all(s.status == "completed" for s in done.values())
    counts = sim_callbacks(calling_service)
    assert counts["sent"] == 0 and counts["dropped"] >= 5


def test_end_to_end_callbacks_refused_while_a_slow_look_holds_the_scan_are_sent_again_and_it_completes(
        client, account, calling_service):
    """What made the end-to-end test above fail once on a loaded machine: a look holding its scan
    longer than a callback waits for it (1 s) has the callback refused with 503 and Retry-After;
    a "done" refused so, never sent again, left the scan to the look one poll after its eta
    (600 s here). The engine sends such a callback again (E7: at least once)."""
    import psycopg2

    ids = create_scans(client, account, 1)
    holder = psycopg2.connect(runtime.config["DATABASE_URL"])
    try:
        with holder.cursor() as cursor:  # a slow look: the scan's row locked through every callback
            cursor.execute("SELECT 1 FROM scan WHERE id = %s FOR UPDATE", (ids[0],))
        ends = time.monotonic() + 20
        while sim_callbacks(calling_service)["retried"] < 2 and time.monotonic() < ends:
            time.sleep(0.1)  # polled: the simulator's callbacks come in real time
    finally:
        holder.rollback()
        holder.close()
    done = look_until_final(ids)
    assert done[ids[0]].status == "completed"
    counts = sim_callbacks(calling_service)
    assert counts["retried"] >= 2 and counts["failed"] == 0 and counts["sent"] >= 1, counts
