"""The engine callback endpoint flooded (issue 40): 50,000 wrongly signed callbacks (wrk, as fast
as the API answers them) against the API as production runs it (gunicorn.conf.py), while another
customer creates and reads scans. Every bogus callback is refused (401), none is written (no
callback row; the database's commits grow by the other customer's calls, not by the flood's), and
the other customer's every call is answered normally during the flood. Skipped without wrk."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import psycopg2
import pytest
import requests

from app.extensions import db
from app.scans.models import EngineCallback
from tests.processes import service_env
from tests.reliability.servers import Gunicorn
from tests.tracking.test_callbacks import SECRET

WRK = shutil.which("wrk")
FLOOD = int(os.environ.get("FLOOD_CALLBACKS") or 50_000)  # fewer: a quick look while editing
pytestmark = [pytest.mark.processes, pytest.mark.skipif(WRK is None, reason="wrk is not installed")]

# Each thread sends wrongly signed callbacks with a fresh webhook-id and the current timestamp (so
# each gets as far as the signature check), counts the answers and stops after its share.
FLOOD_LUA = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  share, answered, refused, n = tonumber(args[1]), 0, 0, 0
  body = '{"id":"sim_bogus","status":"done","recipes_done":3,"recipes_total":3}'
end
function request()
  n = n + 1
  return wrk.format("POST", "/engine/v1/callbacks", {
    ["Content-Type"] = "application/json", ["webhook-id"] = "msg_flood_" .. n .. "_" .. math.random(1e9),
    ["webhook-timestamp"] = tostring(os.time()),
    ["webhook-signature"] = "v1,Ym9ndXMgc2lnbmF0dXJlIGJvZ3VzIHNpZ25hdHVyZSBib2d1cw=="}, body)
end
function response(status, headers, body)
  answered = answered + 1
  if status == 401 then refused = refused + 1 end
  if answered >= share then wrk.thread:stop() end
end
function done(summary, latency, requests)
  local a, r = 0, 0
  for _, t in ipairs(threads) do a = a + t:get("answered"); r = r + t:get("refused") end
  io.write(string.format("FLOOD answered=%d refused=%d\\n", a, r))
end
"""


def commits(database_url: str) -> int:
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()[0]
    finally:
        conn.close()


@pytest.mark.config(ENGINE_CALLBACK_URL="http://127.0.0.1:9/engine/v1/callbacks", ENGINE_CALLBACK_SECRET=SECRET)
def test_a_flood_of_bogus_callbacks_is_refused_unwritten_and_other_customers_are_served(
        app, simulator, make_customer, tmp_path):
    env = service_env(app, simulator.url, tmp_path / "instance", LOG_LEVEL="WARNING", ENGINE_CALLBACK_SECRET=SECRET,
                      ENGINE_CALLBACK_URL="http://127.0.0.1:9/engine/v1/callbacks")
    account = make_customer(tier="enterprise", credits=10_000, inflight=10_000, hour=10_000, day=10_000)
    with Gunicorn(env, tmp_path / "web.log", workers=2, threads=4) as server:
        scan_id = requests.post(f"{server.url}/api/v1/scan", json={"target": "other@example.com"},
                                headers=account.headers, timeout=10).json()["scan_id"]
        served: list[tuple[int, float]] = []
        flooding = threading.Event()

        def other_customer():  # a read and a creation every 0.1 s while the flood lasts
            i = 0
            while flooding.is_set():
                started = time.monotonic()
                if i % 2:
                    r = requests.get(f"{server.url}/api/v1/scan/{scan_id}", headers=account.headers, timeout=30)
                else:
                    r = requests.post(f"{server.url}/api/v1/scan", json={"target": f"other{i}@example.com"},
                                      headers=account.headers, timeout=30)
                served.append((r.status_code, time.monotonic() - started))
                i += 1
                time.sleep(0.1)

        script = tmp_path / "flood.lua"
        script.write_text(FLOOD_LUA)
        database_url = app.config["DATABASE_DIRECT_URL"] or app.config["DATABASE_URL"]
        before = commits(database_url)
        flooding.set()
        customer = threading.Thread(target=other_customer)
        customer.start()
        started = time.monotonic()
        answered = refused = 0
        try:
            while answered < FLOOD:  # wrk runs its whole -d even when its threads stop: chunks of 5 s
                share = -(-(FLOOD - answered) // 2)
                out = subprocess.run([WRK, "-t2", "-c8", "-d5s", "--timeout=10s", "-s", str(script), server.url,
                                      "--", str(share)], capture_output=True, text=True, timeout=60).stdout
                got = dict(part.split("=") for part in out.split("FLOOD ")[1].split())
                answered, refused = answered + int(got["answered"]), refused + int(got["refused"])
        finally:
            flooding.clear()
            customer.join(60)
        took = time.monotonic() - started
        time.sleep(1.0)  # PostgreSQL's statistics are published about once a second
        flood_commits = commits(database_url) - before

    print(f"flood: {answered} callbacks in {took:.1f} s ({answered / took:.0f}/s); other customer: "
          f"{len(served)} calls, slowest {max(t for _, t in served) * 1000:.0f} ms; commits {flood_commits}")
    assert answered >= FLOOD and refused == answered  # every one refused as wrongly signed
    with db.connection_context():
        assert EngineCallback.select().count() == 0
    # The other customer's calls commit (about two each: the call and its activity entry);
    # 50,000 callbacks written would be 50,000 commits.
    assert flood_commits < 3 * len(served) + 500, flood_commits
    assert served and {status for status, _ in served} <= {200, 202}, sorted({s for s, _ in served})
    assert max(t for _, t in served) < 5.0  # answered normally, none left waiting behind the flood
