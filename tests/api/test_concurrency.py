"""Atomic admission under parallel calls over real HTTP (D3, D8, issue: Scan API item 6)."""
import threading

import requests

from app.extensions import db
from app.scans.models import Scan
from tests.api.helpers import assert_books_balance, balance, read_rows, scans_of

SCAN = "/api/v1/scan"


def fire(url, headers, n, payload):
    barrier = threading.Barrier(n)
    answers, lock = [], threading.Lock()

    def one():
        barrier.wait()
        try:
            response = requests.post(url, json=payload, headers=headers, timeout=60)
            outcome = (response.status_code, response.json().get("error"))
        except requests.RequestException as exc:  # a dropped connection must fail the test, visibly
            outcome = (0, exc.__class__.__name__)
        with lock:
            answers.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_50_concurrent_creations_admit_exactly_the_inflight_limit(served_app, make_customer):
    acct = make_customer(tier="business", credits=1000)  # in flight 10
    answers = fire(f"{served_app.url}{SCAN}", acct.headers, 50, {"target": "jane@example.com"})
    accepted = [a for a in answers if a[0] == 202]
    refused = [a for a in answers if a[0] == 429]
    assert len(accepted) == 10
    assert len(refused) == 40 and {code for _, code in refused} == {"rate_limit_inflight"}
    assert not [a for a in answers if a[0] >= 500 or a[0] == 0]
    assert len(scans_of(acct)) == 10 and balance(acct) == 990
    assert_books_balance(acct)


def test_concurrent_creations_admit_exactly_the_hourly_quota(served_app, make_customer):
    """The hour's count is made under the customer's lock (on PostgreSQL in the same round trip
    as the lock): an admission that waited for the lock still sees every scan admitted before it."""
    acct = make_customer(tier="enterprise", credits=1000, inflight=100, hour=6)
    answers = fire(f"{served_app.url}{SCAN}", acct.headers, 40, {"target": "jane@example.com"})
    assert sorted(status for status, _ in answers).count(202) == 6
    assert {code for status, code in answers if status != 202} == {"rate_limit_hour"}
    assert len(scans_of(acct)) == 6 and balance(acct) == 994
    assert_books_balance(acct)


def test_concurrent_creations_never_overdraw_the_balance(served_app, make_customer):
    acct = make_customer(tier="enterprise", credits=7, inflight=100)
    answers = fire(f"{served_app.url}{SCAN}", acct.headers, 30, {"target": "jane@example.com"})
    assert sorted(status for status, _ in answers).count(202) == 7
    assert {code for status, code in answers if status != 202} == {"insufficient_balance"}
    assert balance(acct) == 0
    with db.connection_context():
        assert Scan.select().where(Scan.customer == acct.id).count() == 7
    assert_books_balance(acct)


def test_concurrent_reads_charge_exactly_once_each(served_app, make_customer):
    acct = make_customer(tier="pro", credits=20)
    answers = []
    barrier = threading.Barrier(25)

    def read():
        barrier.wait()
        answers.append(requests.get(f"{served_app.url}{SCAN}/scn_missing", headers=acct.headers, timeout=60).status_code)

    threads = [threading.Thread(target=read) for _ in range(25)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers.count(404) == 20 and answers.count(402) == 5
    assert balance(acct) == 0
    assert_books_balance(acct)


def read_in_parallel(url: str, headers: dict, paths: list[str]) -> list[int]:
    """GET every path at once, one thread each: the statuses answered."""
    barrier = threading.Barrier(len(paths))
    answers, lock = [], threading.Lock()

    def one(path):
        barrier.wait()
        try:
            status = requests.get(f"{url}{path}", headers=headers, timeout=60).status_code
        except requests.RequestException:  # a dropped connection must fail the test, visibly
            status = 0
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=one, args=(path,)) for path in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_40_parallel_readers_are_summed_and_the_ledger_adds_up(served_app, make_customer):
    """D24: each read's charge grows its minute's row in the statement that takes the credit;
    under 40 parallel readers of four endpoints no read is lost or counted twice."""
    acct = make_customer(tier="enterprise", credits=1000)
    created = requests.post(f"{served_app.url}{SCAN}", json={"target": "jane@example.com"}, headers=acct.headers,
                            timeout=60)
    scan_id = created.json()["scan_id"]
    routes = {f"{SCAN}/{scan_id}": "GET /api/v1/scan/{scan_id}", f"{SCAN}/scn_missing": "GET /api/v1/scan/{scan_id}",
              "/api/v1/account": "GET /api/v1/account", "/api/v1/scans": "GET /api/v1/scans"}
    paths = [path for path in routes for _ in range(10)]
    answers = read_in_parallel(served_app.url, acct.headers, paths)
    assert sorted(answers) == [200] * 30 + [404] * 10
    assert balance(acct) == 1000 - 1 - 40
    rows = read_rows(acct)
    counted: dict[str, int] = {}
    for row in rows:
        counted[row.note] = counted.get(row.note, 0) + row.reads
    assert counted == {"GET /api/v1/scan/{scan_id}": 20, "GET /api/v1/account": 10, "GET /api/v1/scans": 10}
    assert len(rows) <= 2 * len(counted)  # one row per endpoint and minute (the reads may straddle two)
    assert_books_balance(acct)


def test_parallel_readers_beyond_the_balance_are_refused_and_not_counted(served_app, make_customer):
    acct = make_customer(tier="enterprise", credits=15)
    answers = read_in_parallel(served_app.url, acct.headers, ["/api/v1/account", f"{SCAN}/scn_missing"] * 20)
    assert answers.count(402) == 25 and answers.count(200) + answers.count(404) == 15
    assert balance(acct) == 0
    assert sum(row.reads for row in read_rows(acct)) == 15
    assert_books_balance(acct)
