"""Load: the API as production runs it (gunicorn, several workers x threads) under concurrent
creations and reads, against the test session's database (the embedded PostgreSQL, or the server of
TEST_DATABASE_URL) and Redis; the simulator is the engine.

Per tier (limits at their defaults), 200 concurrent creations must admit exactly the in-flight
limit (D8: atomic admission) while 2,000 mixed reads (own scans, own and foreign bulk batches,
foreign scans, unknown ids) each get exactly their documented answer, none a 5xx. Afterwards,
for every customer: the balance is the initial credits minus what the answers say was charged,
and equals the sum of the ledger; every scan has its charge and every scan charge its scan; the
engine saw exactly the submissions of the accepted scans; the service logged exactly the requests
sent (nothing retried, nothing lost), and the run ended by itself within its deadline.
"""
from __future__ import annotations

import random
import re
import secrets
from collections import Counter, defaultdict

import pytest
import requests

from app.accounts.models import CreditLedger
from app.billing import charges
from app.extensions import db
from app.scans.models import BulkBatch, Scan
from bench.load import Call, LoadDriver, timed_run
from tests.api.helpers import assert_counters_match
from tests.processes import service_env
from tests.reliability.servers import Gunicorn

pytestmark = [pytest.mark.slow, pytest.mark.processes]

TIER_INFLIGHT = {"pro": 3, "business": 10, "enterprise": 25}  # §8 defaults
CREATIONS_PER_TIER = 200
READS = 2000
CONCURRENCY = 32
WORKERS, THREADS = 3, 8
CREDITS = 100_000
PHASE_DEADLINE_SECONDS = 150  # the run must end by itself well before this
SCAN, BULK = "/api/v1/scan", "/api/v1/scan/bulk"
CHARGED_READ = {200, 403, 404}


def unknown(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(16)}"


def cost(answer) -> int:
    """What an answer says was charged (D3)."""
    method, path = answer.call.method, answer.call.path
    if method == "POST" and path == BULK and answer.status == 202:
        return max(answer.body["queued"], 1)
    if method == "POST" and answer.status in (202, 400, 403, 404):
        return 1
    if method == "GET" and answer.status in CHARGED_READ:
        return 1
    return 0


def engine_stats(simulator) -> dict:
    return requests.get(f"{simulator.url}/_sim/engine/stats", timeout=5).json()


def test_concurrent_creations_and_mixed_reads_under_gunicorn(app, simulator, make_customer, tmp_path, figures):
    rng = random.Random(20261121)
    accounts = {tier: make_customer(tier=tier, credits=CREDITS, name=f"load {tier}") for tier in TIER_INFLIGHT}
    accounts["reader"] = make_customer(tier="enterprise", credits=CREDITS, name="load reader")
    names = list(accounts)
    headers = {name: acct.headers for name, acct in accounts.items()}

    env = service_env(app, simulator.url, tmp_path / "instance", LOG_LEVEL="INFO")
    with Gunicorn(env, tmp_path / "gunicorn.log", workers=WORKERS, threads=THREADS) as server:
        driver = LoadDriver(server.url, concurrency=CONCURRENCY, timeout=30)
        sent = []

        # Set-up, through the API: the reader's batch of 10 scans, an empty batch (every target
        # rejected: no scan, nothing in flight) for Business and Enterprise, and Pro refused bulk.
        setup = [Call("POST", BULK, headers["reader"],
                      {"targets": [{"target": f"reader{i}@example.com"} for i in range(10)]}, ("reader", "bulk")),
                 Call("POST", BULK, headers["business"], {"targets": [{"target": "ab"}]}, ("business", "bulk")),
                 Call("POST", BULK, headers["enterprise"], {"targets": [{"target": "ab"}]}, ("enterprise", "bulk")),
                 Call("POST", BULK, headers["pro"], {"targets": [{"target": "ab"}]}, ("pro", "bulk"))]
        setup_answers = LoadDriver(server.url, concurrency=1).run(setup)
        sent += setup_answers
        assert [a.status for a in setup_answers] == [202, 202, 202, 403], [a.body for a in setup_answers]
        batch_of = {"reader": setup_answers[0].body["bulk_id"], "business": setup_answers[1].body["bulk_id"],
                    "enterprise": setup_answers[2].body["bulk_id"]}
        reader_scans = [s["scan_id"] for s in setup_answers[0].body["scans"]]
        assert len(reader_scans) == 10

        def read_calls(count: int, own_scans: dict[str, list[str]]) -> list[Call]:
            """Mixed reads, each labelled with the status the contract gives it."""
            calls = []
            for i in range(count):
                who = names[i % len(names)]
                choice = i // len(names) % 6
                if choice == 0 and own_scans.get(who):  # own scan
                    calls.append(Call("GET", f"{SCAN}/{rng.choice(own_scans[who])}", headers[who], None, (who, 200)))
                elif choice in (0, 1):  # someone's scan: the reader's own, 403 for the others
                    calls.append(Call("GET", f"{SCAN}/{rng.choice(reader_scans)}", headers[who], None,
                                      (who, 200 if who == "reader" else 403)))
                elif choice == 2:  # own aggregate read (Pro has no batch: unknown)
                    bulk = batch_of.get(who)
                    calls.append(Call("GET", f"{BULK}/{bulk or unknown('blk')}", headers[who], None,
                                      (who, 200 if bulk else 404)))
                elif choice == 3:  # the reader's batch
                    calls.append(Call("GET", f"{BULK}/{batch_of['reader']}", headers[who], None,
                                      (who, 200 if who == "reader" else 403)))
                elif choice == 4:
                    calls.append(Call("GET", f"{SCAN}/{unknown('scn')}", headers[who], None, (who, 404)))
                else:
                    calls.append(Call("GET", f"{BULK}/{unknown('blk')}", headers[who], None, (who, 404)))
            return calls

        # Phase 1: 200 creations per tier, all at once, interleaved with half of the reads.
        creations = [Call("POST", SCAN, headers[tier], {"target": f"load.{tier}.{i}@example.com"}, (tier, "create"))
                     for i in range(CREATIONS_PER_TIER) for tier in TIER_INFLIGHT]
        phase1 = creations + read_calls(READS // 2, {})
        rng.shuffle(phase1)
        answers1, stats1 = timed_run(driver, phase1)
        sent += answers1

        accepted = defaultdict(list)
        for answer in answers1:
            if answer.call.tag[1] == "create" and answer.status == 202:
                accepted[answer.call.tag[0]].append(answer.body["scan_id"])
        own_scans = dict(accepted.items())
        own_scans["reader"] = reader_scans
        # Phase 2: the other half of the reads, now also of the scans just created.
        phase2 = read_calls(READS - READS // 2, own_scans)
        for tier, ids in accepted.items():  # and each tier's scans read by another customer: 403
            other = names[(names.index(tier) + 1) % len(names)]
            phase2 += [Call("GET", f"{SCAN}/{scan_id}", headers[other], None, (other, 403)) for scan_id in ids[:3]]
        rng.shuffle(phase2)
        answers2, stats2 = timed_run(driver, phase2)
        sent += answers2
        driver.close()
        server_log = server.log_text()
        server_alive = server.alive()

    # --- every answer is the contract's -----------------------------------------------------
    everything = setup_answers + answers1 + answers2
    assert not [a for a in everything if a.status == 0], "transport errors"
    server_errors = [(a.status, a.call.method, a.call.path, a.body) for a in everything if a.status >= 500]
    assert not server_errors, server_errors[:5]  # the first few, status and body first (a long list is cut)
    assert all(a.content_type.startswith("application/json") for a in everything)
    for tier, limit in TIER_INFLIGHT.items():
        mine = [a for a in answers1 if a.call.tag == (tier, "create")]
        assert len(mine) == CREATIONS_PER_TIER
        statuses = Counter(a.status for a in mine)
        assert statuses == {202: limit, 429: CREATIONS_PER_TIER - limit}, (tier, statuses)
        refused = [a for a in mine if a.status == 429]
        assert {a.body["error"] for a in refused} == {"rate_limit_inflight"}
        assert all(int(a.headers["Retry-After"]) >= 1 for a in refused)
    wrong = [(a.call.path, a.call.tag, a.status, a.body) for a in answers1 + answers2
             if isinstance(a.call.tag[1], int) and a.status != a.call.tag[1]]
    assert not wrong, wrong[:5]
    reads_sent = sum(1 for a in answers1 + answers2 if a.call.method == "GET")
    assert reads_sent >= READS

    # --- the books of every customer ---------------------------------------------------------
    books = {}
    with db.connection_context():
        for name, acct in accounts.items():
            mine = [a for a in everything if a.call.tag[0] == name]
            charged = sum(cost(a) for a in mine)
            balance, ledger_sum = charges.balance_of(acct.id), charges.ledger_sum(acct.id)
            assert balance == CREDITS - charged == ledger_sum, (name, balance, CREDITS - charged, ledger_sum)
            assert_counters_match(acct.id)
            reported = [int(a.headers["X-Credits-Remaining"]) for a in mine if "X-Credits-Remaining" in a.headers]
            assert min(reported) == balance  # the last charge reported the final balance
            scans = {s.id: s for s in Scan.select().where(Scan.customer == acct.id)}
            ledger = list(CreditLedger.select().where(CreditLedger.customer == acct.id))
            scan_rows = [r for r in ledger if r.reason == "scan"]
            singles = {i for i, s in scans.items() if s.bulk_id is None}
            # Every single scan has exactly one charge of 1, and every scan charge has its scan.
            assert sorted(r.scan_id for r in scan_rows) == sorted(singles), name
            assert all(r.delta == -1 for r in scan_rows)
            for row in (r for r in ledger if r.reason == "bulk"):
                in_batch = sum(1 for s in scans.values() if s.bulk_id == row.bulk_id)
                assert BulkBatch.get_or_none(BulkBatch.id == row.bulk_id) is not None
                assert row.delta == -max(in_batch, 1), name
            assert not [r for r in ledger if r.reason == "refund"]
            # Reads are summed per endpoint and minute (D24): their rows count every charged GET;
            # the other charged call (pro's refused bulk) has a row of its own.
            reads_charged = sum(1 for a in mine if cost(a) and a.call.method == "GET")
            assert sum(r.reads for r in ledger if r.reason == "reads") == reads_charged, name
            assert all(r.delta == -r.reads for r in ledger if r.reason == "reads"), name
            assert sum(1 for r in ledger if r.reason == "call") == (name == "pro"), name
            expected_scans = len(accepted.get(name, [])) + (10 if name == "reader" else 0)
            assert len(scans) == expected_scans, name
            books[name] = {"charged": charged, "balance": balance, "ledger_rows": len(ledger), "scans": len(scans)}

    # --- the engine saw exactly the accepted submissions; the service logged exactly the requests sent ---
    stats = engine_stats(simulator)
    assert stats["submit"] == sum(TIER_INFLIGHT.values()) and stats["batch"] == 1, stats
    logged = re.findall(r' app\.access \[[^\]]*\] (?:GET|POST) (/api/v1/\S*) (\d{3}) ', server_log)
    assert len(logged) == len(everything), (len(logged), len(everything))
    assert not [s for _, s in logged if s.startswith("5")]
    assert "Traceback" not in server_log and server_alive
    for acct in accounts.values():
        assert acct.api_key not in server_log
    assert stats1["seconds"] < PHASE_DEADLINE_SECONDS and stats2["seconds"] < PHASE_DEADLINE_SECONDS

    figures.update(
        requests=len(everything), concurrency=f"{CONCURRENCY} client threads; gunicorn {WORKERS}x{THREADS}",
        faults="none (load)", inputs={"creations": len(creations), "reads": reads_sent, "bulk": len(setup)},
        failures=0, phase1=stats1, phase2=stats2,
        accepted={tier: len(ids) for tier, ids in accepted.items()}, books=books,
    )
