"""?wait=N over real HTTP (D27): a read answered as soon as its scan is final (the batch: all
done) and charged once, a creation that answers 200 with the finished scan or 202 as before,
and the 101st held connection of a key refused with 429, free."""
import threading
import time

import pytest
import requests

from app.accounts import admin
from app.accounts.models import ApiKey
from app.events import waits
from app.extensions import db
from app.plumbing.models import utcnow
from app.scans.models import Scan
from app.tracking import states
from tests.api.helpers import balance

RESULT = {"risk": {"score": 10, "band": "low"}}


def _complete_later(scan_ids, delay=0.5):
    def run():
        time.sleep(delay)
        with db.connection_context():
            for scan_id in scan_ids:
                states.complete(scan_id, RESULT)
    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_a_read_waits_for_its_scan_and_is_charged_once(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    before = balance(account)
    worker = _complete_later([scan_id])
    started = time.monotonic()
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=30", headers=account.headers, timeout=40)
    took = time.monotonic() - started
    worker.join()
    assert r.status_code == 200 and r.json()["status"] == "completed" and r.json()["result"]["risk"]["score"] == 10
    assert took < waits.REREAD_SECONDS - 1  # answered when it completed, not at the next re-read
    assert balance(account) == before - 1 and r.headers["X-Credits-Remaining"] == str(before - 1)

    started = time.monotonic()  # final already: at once
    assert requests.get(f"{url}/api/v1/scan/{scan_id}?wait=30", headers=account.headers,
                        timeout=40).json()["status"] == "completed"
    assert time.monotonic() - started < 1


def test_an_unfinished_scan_answers_after_the_wait_and_a_bad_wait_is_400(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    started = time.monotonic()
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=1", headers=account.headers, timeout=10)
    assert r.status_code == 200 and r.json()["status"] in ("queued", "running")
    assert 1.0 <= time.monotonic() - started < 3
    for bad in ("0", "61", "soon"):
        r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait={bad}", headers=account.headers, timeout=10)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"


def test_a_batch_read_waits_until_all_are_done(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    created = requests.post(f"{url}/api/v1/scan/bulk", json={"targets": [{"target": "a@example.com"},
                                                                         {"target": "b@example.com"}]},
                            headers=account.headers, timeout=10).json()
    worker = _complete_later([s["scan_id"] for s in created["scans"]])
    r = requests.get(f"{url}/api/v1/scan/bulk/{created['bulk_id']}?wait=30", headers=account.headers, timeout=40)
    worker.join()
    assert r.json()["all_done"] is True and r.json()["completed"] == 2


def test_a_creation_that_waits_answers_200_when_final_else_202(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    before = balance(account)
    r = requests.post(f"{url}/api/v1/scan?wait=1", json={"target": "jane@example.com"}, headers=account.headers,
                      timeout=10)
    assert r.status_code == 202 and "poll_url" in r.json()  # the creation's answer, as without wait
    assert balance(account) == before - 1  # the creation alone

    done = {}

    def complete_when_created():  # completes the scan as soon as it exists
        deadline = time.monotonic() + 10
        with db.connection_context():
            from app.scans.models import Scan
            while time.monotonic() < deadline and not done:
                scan = Scan.select().where(Scan.customer == account.id, Scan.target == "joe@example.com").first()
                if scan is not None:
                    states.complete(scan.id, RESULT)
                    done["id"] = scan.id
                time.sleep(0.05)
    worker = threading.Thread(target=complete_when_created)
    worker.start()
    r = requests.post(f"{url}/api/v1/scan?wait=20", json={"target": "joe@example.com"},
                      headers={**account.headers, "Idempotency-Key": "wait-1"}, timeout=30)
    worker.join()
    assert r.status_code == 200 and r.json()["status"] == "completed" and r.json()["scan_id"] == done["id"]
    assert balance(account) == before - 2
    again = requests.post(f"{url}/api/v1/scan?wait=20", json={"target": "joe@example.com"},
                          headers={**account.headers, "Idempotency-Key": "wait-1"}, timeout=30)
    assert again.json()["scan_id"] == done["id"] and again.headers.get("Idempotent-Replayed") == "true"
    # The creation's answer is what a retry replays: a replay reads nothing (the scan may be erased by now).
    assert again.status_code == 202 and "poll_url" in again.json() and "result" not in again.json()


def test_the_101st_held_connection_of_a_key_is_429_and_free(served_app, make_customer, redis_conn):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    holds = [waits.hold(account.key.id, 30) for _ in range(waits.MAX_HELD)]  # 100 calls waiting elsewhere
    before = balance(account)
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=5", headers=account.headers, timeout=10)
    assert r.status_code == 429 and r.json()["error"] == "rate_limited" and int(r.headers["Retry-After"]) >= 1
    r = requests.post(f"{url}/api/v1/scan?wait=5", json={"target": "x@example.com"}, headers=account.headers,
                      timeout=10)
    assert r.status_code == 429 and r.json()["error"] == "rate_limited"
    assert balance(account) == before
    waits.release(holds[0])
    assert requests.get(f"{url}/api/v1/scan/{scan_id}?wait=1", headers=account.headers, timeout=10).status_code == 200


def _later(*steps, delay=0.3):
    """Run each step after ``delay`` seconds, one after the other, on a thread of its own."""
    def run():
        for step in steps:
            time.sleep(delay)
            with db.connection_context():
                step()
    worker = threading.Thread(target=run)
    worker.start()
    return worker


def _narrowed(key_id):
    return lambda: ApiKey.update(scopes=["scans:write"]).where(ApiKey.id == key_id).execute()


@pytest.mark.parametrize("change", ["revoked", "narrowed", "expired"])
def test_a_waiting_read_whose_key_changes_gets_nothing_that_changed_after(served_app, make_customer, change):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    changes = {"revoked": lambda: admin.revoke_key(account.key.id), "narrowed": _narrowed(account.key.id),
               "expired": lambda: ApiKey.update(expires_at=utcnow()).where(ApiKey.id == account.key.id).execute()}
    before = balance(account)
    worker = _later(changes[change], lambda: states.complete(scan_id, RESULT))
    started = time.monotonic()
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=20", headers=account.headers, timeout=30)
    worker.join()
    # Answered when its scan completed, with the refusal its key gets now (free), not the result.
    assert (r.status_code, r.json()["error"]) == {"revoked": (401, "invalid_token"), "expired": (401, "key_expired"),
                                                  "narrowed": (403, "insufficient_scope")}[change]
    assert "jane@example.com" not in r.text and "risk" not in r.text
    assert time.monotonic() - started < waits.REREAD_SECONDS - 1
    assert balance(account) == before


def test_a_waiting_read_whose_key_is_revoked_ends_at_its_next_check(served_app, make_customer, monkeypatch):
    monkeypatch.setattr(waits, "KEY_CHECK_SECONDS", 1.0)
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    worker = _later(lambda: admin.revoke_key(account.key.id))
    started = time.monotonic()
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=10", headers=account.headers, timeout=20)
    worker.join()
    assert r.status_code == 401 and r.json()["error"] == "invalid_token"
    assert time.monotonic() - started < waits.KEY_CHECK_SECONDS + 1.5  # not the 10 s it asked for


def _complete_when_created(customer_id, target, *then):
    """Complete the scan of ``target`` as soon as it exists (after ``then``, each run first)."""
    def run():
        deadline = time.monotonic() + 10
        with db.connection_context():
            while time.monotonic() < deadline:
                scan = Scan.select().where(Scan.customer == customer_id, Scan.target == target).first()
                if scan is not None:
                    for step in then:
                        step()
                    states.complete(scan.id, RESULT)
                    return
                time.sleep(0.05)
    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_a_creation_by_a_key_without_scans_read_answers_202_whatever_wait_says(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    with db.connection_context():
        _, writer = admin.issue_key(account.id, "writer", scopes="scans:write")
    headers = {"Authorization": f"Bearer {writer}", "Idempotency-Key": "write-only"}
    worker = _complete_when_created(account.id, "joe@example.com")
    r = requests.post(f"{url}/api/v1/scan?wait=20", json={"target": "joe@example.com"}, headers=headers, timeout=30)
    worker.join()
    assert r.status_code == 202 and "poll_url" in r.json() and "result" not in r.json() and "target" not in r.json()
    again = requests.post(f"{url}/api/v1/scan?wait=20", json={"target": "joe@example.com"}, headers=headers,
                          timeout=30)
    assert again.status_code == 202 and again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == r.json()


def test_a_creation_whose_key_loses_scans_read_while_it_waits_answers_202(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    worker = _complete_when_created(account.id, "joe@example.com", _narrowed(account.key.id))
    r = requests.post(f"{url}/api/v1/scan?wait=20", json={"target": "joe@example.com"}, headers=account.headers,
                      timeout=30)
    worker.join()
    assert r.status_code == 202 and "result" not in r.json()


def test_reads_and_creations_refuse_the_same_waits(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    for bad in (" 5", "+5", "\uff15", "\u0665", "0", "61", "5.0"):
        read = requests.get(f"{url}/api/v1/scan/{scan_id}", params={"wait": bad}, headers=account.headers, timeout=10)
        made = requests.post(f"{url}/api/v1/scan", params={"wait": bad}, json={"target": "joe@example.com"},
                             headers=account.headers, timeout=10)
        assert read.status_code == made.status_code == 400, (bad, read.text, made.text)
        assert read.json()["error"] == made.json()["error"] == "invalid_request"
        assert "wait" in made.json()["details"]
    with db.connection_context():
        assert Scan.select().where(Scan.customer == account.id).count() == 1  # no creation went through


def test_a_waiting_read_is_charged_when_it_answers_not_when_it_begins(served_app, make_customer):
    account = make_customer(credits=50)
    url = served_app.url
    scan_id = requests.post(f"{url}/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers,
                            timeout=10).json()["scan_id"]
    before = balance(account)
    answer = {}
    waiting = threading.Thread(target=lambda: answer.update(r=requests.get(
        f"{url}/api/v1/scan/{scan_id}?wait=3", headers=account.headers, timeout=10)))
    waiting.start()
    time.sleep(1.5)
    assert balance(account) == before  # a wait cut short here (its process stopped) costs nothing
    waiting.join()
    assert answer["r"].status_code == 200 and answer["r"].headers["X-Credits-Remaining"] == str(before - 1)
    assert balance(account) == before - 1

    broke = make_customer(credits=0)  # a balance below one read: 402 at once, not after the wait
    started = time.monotonic()
    r = requests.get(f"{url}/api/v1/scan/{scan_id}?wait=30", headers=broke.headers, timeout=10)
    assert r.status_code == 402 and time.monotonic() - started < 2
    other = requests.get(f"{url}/api/v1/scan/scn_{'0' * 22}?wait=30", headers=account.headers, timeout=10)
    assert other.status_code == 404 and time.monotonic() - started < 4
