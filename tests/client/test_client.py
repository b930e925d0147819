"""``scan_api_client.ScanClient`` against the real API on a real HTTP port (``served_app``).

The engine is the simulator; scans advance by running RQ jobs on frozen time inside the
client's injected ``sleep``, so nothing here sleeps for real.
"""
import http.server
import threading
import time

import pytest
import requests
from freezegun import freeze_time
from scan_api_client import (
    ApiError,
    AuthenticationError,
    Batch,
    Conflict,
    EngineUnavailable,
    Forbidden,
    InsufficientBalance,
    NotFound,
    RateLimited,
    Scan,
    ScanClient,
    ServerError,
    TransportError,
    ValidationError,
    WaitTimeout,
    parse_rate_limit,
    verify_signature,
)
from scan_api_client.errors import parse_retry_after

from app.extensions import db
from app.plumbing.signatures import sign
from app.tracking import states
from tests.api.helpers import balance, engine_mode, scans_of
from tests.client.held import HeldOnFrozenTime
from tests.conftest import ServerThread

START = "2026-11-21 12:00:00"
CREATED_FIELDS = {"ok", "scan_id", "livemode", "kind", "recipes_to_run", "eta_seconds", "poll_url"}


class Recorder:
    """A ``sleep`` for the client: records each pause, moves frozen time by it and runs the jobs due.
    With both, ``held`` stands in for the server's hold of the reads that wait (``tests/client/held.py``)."""

    def __init__(self, frozen=None, jobs=None, then=None):
        self.frozen, self.jobs, self.then = frozen, jobs, then
        self.calls = []
        self.held = HeldOnFrozenTime(frozen, jobs) if frozen is not None and jobs is not None else None

    def __call__(self, seconds):
        self.calls.append(seconds)
        if self.frozen is not None:
            self.frozen.tick(seconds)
        if self.jobs is not None:
            self.jobs.run()
        if self.then is not None:
            self.then(len(self.calls))


def make_client(served_app, account, **kwargs):
    kwargs.setdefault("sleep", Recorder())
    held = getattr(kwargs["sleep"], "held", None)
    if held is not None:
        kwargs.setdefault("session", held.session())
    return ScanClient(served_app.url, account.api_key, **kwargs)


# --- bodies and headers ----------------------------------------------------------------

def test_create_and_get_bodies_and_account_headers(served_app, make_customer):
    acct = make_customer(tier="business", credits=100)
    api = make_client(served_app, acct)
    created = api.create("jane@example.com")
    assert set(created.raw) == CREATED_FIELDS and isinstance(created, Scan) and created.kind == "email" and created.scan_id.startswith("scn_")
    assert created.poll_url == f"{served_app.url}/api/v1/scan/{created.scan_id}"
    assert api.last_credits == 99
    assert api.last_rate_limit["hour"] == {"limit": 100, "window": 3600, "remaining": 99,
                                           "reset": api.last_rate_limit["hour"]["reset"]}
    assert api.last_rate_limit["day"]["limit"] == 1000 and api.last_rate_limit["day"]["remaining"] == 999
    assert api.last_request_id.startswith("req_")

    scan = api.get(created.scan_id)
    assert scan.status == "queued" and scan.target == "jane@example.com"
    assert {"eta_seconds", "progress", "created_at"} <= set(scan.raw) and scan.progress.recipes_total >= 0
    assert api.last_credits == 98
    assert api.create("janedoe", kind="username").kind == "username"
    assert api.last_credits == 97 and api.last_rate_limit["hour"]["remaining"] == 98


def test_bulk_and_get_bulk_bodies(served_app, make_customer):
    acct = make_customer(tier="business", credits=100)
    api = make_client(served_app, acct)
    created = api.bulk(["a.person@example.com", {"target": "+14155552671", "kind": "phone"}, {"target": "ab"}])
    assert isinstance(created, Batch) and set(created.raw) == {"ok", "bulk_id", "livemode", "total", "queued", "rejected", "scans", "aggregate_poll_url"}
    assert (created.total, created.queued) == (3, 2)
    assert [(r.index, r.error) for r in created.rejected] == [(2, "target_too_short")]
    assert [s.kind for s in created.scans] == ["email", "phone"]
    assert api.last_credits == 98  # one credit per queued scan
    batch = api.get_bulk(created.bulk_id)
    assert set(batch.raw) == {"ok", "bulk_id", "livemode", "total", "queued", "running", "completed", "failed", "rejected_count",
                          "all_done", "scans"}
    assert (batch.total, batch.queued, batch.rejected_count, batch.all_done) == (3, 2, 1, False)
    assert [s.target for s in batch.scans] == ["a.person@example.com", "+14155552671"]
    assert api.last_credits == 97


def test_bulk_refuses_more_than_100_or_no_targets_without_a_call(served_app, account):
    api = make_client(served_app, account)
    with pytest.raises(ValueError, match="at most 100"):
        api.bulk([f"user{i}@example.com" for i in range(101)])
    with pytest.raises(ValueError):
        api.bulk([])
    assert api.last_response is None and balance(account) == 100


def test_base_url_may_end_in_api_v1(served_app, account):
    api = ScanClient(f"{served_app.url}/api/v1/", account.api_key)
    assert api.create("jane@example.com").scan_id


# --- waiting ----------------------------------------------------------------------------

def test_wait_reads_held_by_the_server_until_completed(served_app, account, jobs):
    with freeze_time(START) as frozen:
        sleep = Recorder(frozen, jobs)
        api = make_client(served_app, account, sleep=sleep)
        scan_id = api.create("jane@example.com").scan_id
        seen = []
        final = api.wait(scan_id, on_progress=seen.append)
    assert final.status == "completed" and final.scan_id == scan_id
    assert final.result.risk.band in {"low", "medium", "high", "critical"}
    assert sleep.calls == [] and set(sleep.held.asked) == {60}  # no polling: each read held up to 60 s
    assert len(seen) == len(sleep.held.asked) and seen[-1] is final


def test_wait_lets_the_server_hold_the_read_and_pays_for_one(served_app, account):
    """On real time: the read is answered when the scan completes (another thread, 0.3 s later), one
    credit for the wait. It used to read every 12 s (here: at once, the sleep being a no-op), one
    credit each."""
    sleep = Recorder()
    api = make_client(served_app, account, sleep=sleep)
    scan = api.create("jane@example.com")
    worker = _complete_later(scan.scan_id)
    started = time.monotonic()
    done = api.wait(scan, timeout=30)
    worker.join()
    assert done.status == "completed" and time.monotonic() - started < 10
    assert sleep.calls == [] and balance(account) == 100 - 2  # the creation and one read


def test_reads_that_wait_and_the_stream_go_to_the_wait_url(app, served_app, account):
    """``make run`` serves the calls that wait on the API's port + 1 (no nginx in front to send them
    there): ``wait_url`` names it; every other call goes to the base URL."""
    held = ServerThread(app)
    sent = []

    class Recording(requests.Session):
        def request(self, method, url, *args, **kwargs):
            sent.append((method, url.split("/api/v1")[0], (kwargs.get("params") or {}).get("wait")))
            return super().request(method, url, *args, **kwargs)

    try:
        api = ScanClient(served_app.url, account.api_key, wait_url=f"{held.url}/api/v1", session=Recording(),
                         sleep=Recorder())
        scan = api.create("jane@example.com")
        worker = _complete_later(scan.scan_id)
        assert api.wait(scan, timeout=30).status == "completed"
        worker.join()
        oldest = list(api.iter_events())[-1]  # the stream replays what followed it
        next(api.events(after=oldest.event_id))
    finally:
        held.stop()
    assert sent[0] == ("POST", served_app.url, None)
    assert sent[1][:2] == ("GET", held.url) and 1 <= sent[1][2] <= 60  # the read that waits
    assert sent[-1][:2] == ("GET", held.url)  # the events stream


def _complete_later(scan_id, delay=0.3):
    def run():
        time.sleep(delay)
        with db.connection_context():
            states.complete(scan_id, {"risk": {"score": 10, "band": "low"}})
    worker = threading.Thread(target=run)
    worker.start()
    return worker


def test_wait_ends_on_failed(served_app, account, jobs):
    with freeze_time(START) as frozen:
        api = make_client(served_app, account, sleep=Recorder(frozen, jobs), poll_interval=10)
        scan_id = api.create("fail.me@example.com").scan_id
        final = api.wait(scan_id)
    assert final.status == "failed"
    assert final.failure.code == "engine_failed" and final.result is None


def test_wait_timeout_raises_with_the_last_state(served_app, account, jobs):
    with freeze_time(START) as frozen:
        sleep = Recorder(frozen, jobs)
        api = make_client(served_app, account, sleep=sleep, poll_interval=12)
        scan_id = api.create("hang.me@example.com").scan_id
        with pytest.raises(WaitTimeout) as caught:
            api.wait(scan_id, timeout=50)
    assert sleep.calls == [] and sleep.held.asked == [50]  # one read, held never past the deadline
    assert caught.value.resource_id == scan_id and caught.value.last.status in {"queued", "running"}
    assert caught.value.elapsed >= 50


def test_wait_bulk_until_all_done(served_app, account, jobs):
    with freeze_time(START) as frozen:
        sleep = Recorder(frozen, jobs)
        api = make_client(served_app, account, sleep=sleep)
        bulk_id = api.bulk(["a.person@example.com", "fail.x@example.com", "+14155552671"]).bulk_id
        seen = []
        final = api.wait_bulk(bulk_id, on_progress=seen.append)
    assert final.all_done is True
    assert (final.queued, final.running, final.completed, final.failed) == (0, 0, 2, 1)
    assert seen[-1].all_done is True and sleep.calls == [] and set(sleep.held.asked) == {60}


# --- back-off and retries -----------------------------------------------------------------

def test_429_backs_off_by_retry_after_then_raises_rate_limited(served_app, make_customer):
    acct = make_customer(tier="pro", credits=10, hour=1, inflight=5)
    with freeze_time("2026-11-21 10:00:00"):
        sleep = Recorder()  # time stands still: the quota never frees
        api = make_client(served_app, acct, sleep=sleep, max_retries=3, max_retry_after=None)
        api.create("jane@example.com")
        with pytest.raises(RateLimited) as caught:
            api.create("john@example.com")
    error = caught.value
    assert sleep.calls == [3600, 3600, 3600]  # Retry-After of each 429, three retries
    assert (error.status, error.code, error.retry_after) == (429, "rate_limit_hour", 3600)
    assert error.request_id.startswith("req_") and error.message
    assert len(scans_of(acct)) == 1 and balance(acct) == 9 and api.last_credits == 9  # a 429 is free
    assert api.last_rate_limit["hour"]["remaining"] == 0


def test_429_retry_succeeds_once_the_window_frees(served_app, make_customer):
    acct = make_customer(tier="pro", credits=10, hour=1, inflight=5)
    with freeze_time("2026-11-21 10:00:00") as frozen:
        sleep = Recorder(frozen)
        api = make_client(served_app, acct, sleep=sleep, max_retry_after=None)
        api.create("jane@example.com")
        created = api.create("john@example.com")
    assert sleep.calls == [3600] and created.scan_id
    assert len(scans_of(acct)) == 2 and api.last_credits == 8


def test_retry_after_beyond_the_cap_is_not_slept_through(served_app, make_customer):
    acct = make_customer(tier="pro", credits=10, hour=1, inflight=5)
    sleep = Recorder()
    api = make_client(served_app, acct, sleep=sleep)  # max_retry_after defaults to 300 s
    api.create("jane@example.com")
    with pytest.raises(RateLimited) as caught:
        api.create("john@example.com")
    assert sleep.calls == [] and caught.value.retry_after > 300


def attempts_of(session):
    """Record (status, Idempotency-Key) of every HTTP exchange the session makes."""
    seen = []
    session.hooks["response"].append(
        lambda response, *args, **kwargs: seen.append((response.status_code,
                                                       response.request.headers.get("Idempotency-Key"))))
    return seen


def test_502_backs_off_and_the_idempotent_retry_creates_exactly_one_scan(served_app, account, simulator):
    engine_mode(simulator, "down")
    session = requests.Session()
    seen = attempts_of(session)
    sleep = Recorder(then=lambda n: n == 2 and engine_mode(simulator, "up"))  # the engine is back after 2 pauses
    api = make_client(served_app, account, session=session, sleep=sleep)
    created = api.create("jane@example.com")
    assert sleep.calls == [30, 30]  # Retry-After: 30 of engine_submit_failed
    assert [status for status, _ in seen] == [502, 502, 202]
    keys = {key for _, key in seen}
    assert len(keys) == 1 and None not in keys
    assert [s.id for s in scans_of(account)] == [created.scan_id] and balance(account) == 99
    # The key really is the idempotency key of that creation: sending it again replays, creating nothing.
    replay = requests.post(f"{served_app.url}/api/v1/scan", json={"target": "jane@example.com"},
                           headers={**account.headers, "Idempotency-Key": keys.pop()}, timeout=10)
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json()["scan_id"] == created.scan_id
    assert len(scans_of(account)) == 1 and balance(account) == 99


def test_502_retries_exhausted_raise_engine_unavailable(served_app, account, simulator):
    engine_mode(simulator, "down")
    sleep = Recorder()
    api = make_client(served_app, account, sleep=sleep, max_retries=2)
    with pytest.raises(EngineUnavailable) as caught:
        api.bulk(["jane@example.com", "john@example.com"])
    assert isinstance(caught.value, ServerError)
    assert (caught.value.code, caught.value.retry_after) == ("engine_submit_failed", 30)
    assert sleep.calls == [30, 30] and scans_of(account) == [] and balance(account) == 100


def test_given_idempotency_key_is_sent_and_replays(served_app, account):
    api = make_client(served_app, account)
    first = api.create("jane@example.com", idempotency_key="order-1")
    again = api.create("jane@example.com", idempotency_key="order-1")
    assert again == first and api.last_response.headers["Idempotent-Replayed"] == "true"
    assert len(scans_of(account)) == 1


def test_unreachable_api_is_a_transport_error_after_retries():
    sleep = Recorder()
    api = ScanClient("http://127.0.0.1:9", "service_live_x", sleep=sleep, max_retries=2, timeout=5)
    with pytest.raises(TransportError, match="cannot reach"):
        api.get("scn_x")
    assert sleep.calls == [1, 2]


# --- typed errors -----------------------------------------------------------------------

def assert_api_error(caught, cls, status, code):
    error = caught.value
    assert type(error) is cls and isinstance(error, ApiError)
    assert (error.status, error.code) == (status, code)
    assert error.request_id and error.request_id.startswith("req_")
    assert error.message and code in str(error)
    return error


def test_401_errors(served_app, account):
    with pytest.raises(AuthenticationError) as caught:
        ScanClient(served_app.url, "service_live_unknownkey0000000000000000000").create("jane@example.com")
    assert_api_error(caught, AuthenticationError, 401, "invalid_token")
    with pytest.raises(AuthenticationError) as caught:
        ScanClient(served_app.url, "two words").get("scn_x")
    assert_api_error(caught, AuthenticationError, 401, "unauthorized")


def test_402_insufficient_balance(served_app, make_customer):
    broke = make_customer(credits=0)
    with pytest.raises(InsufficientBalance) as caught:
        make_client(served_app, broke).create("jane@example.com")
    assert_api_error(caught, InsufficientBalance, 402, "insufficient_balance")


def test_403_forbidden_and_bulk_not_allowed(served_app, account, make_customer):
    scan_id = make_client(served_app, account).create("jane@example.com").scan_id
    other = make_client(served_app, make_customer())
    with pytest.raises(Forbidden) as caught:
        other.get(scan_id)
    assert_api_error(caught, Forbidden, 403, "forbidden")
    pro = make_client(served_app, make_customer(tier="pro"))
    with pytest.raises(Forbidden) as caught:
        pro.bulk(["jane@example.com"])
    assert_api_error(caught, Forbidden, 403, "bulk_not_allowed")


def test_404_not_found(served_app, account):
    api = make_client(served_app, account)
    with pytest.raises(NotFound) as caught:
        api.get("scn_doesnotexist")
    assert_api_error(caught, NotFound, 404, "not_found")
    with pytest.raises(NotFound):
        api.get_bulk("blk_doesnotexist")
    with pytest.raises(NotFound):
        api.get("../bulk/x")  # ids are path-quoted: no escaping into another route


def test_400_validation_errors(served_app, account):
    api = make_client(served_app, account)
    with pytest.raises(ValidationError) as caught:
        api.create("ab")
    assert_api_error(caught, ValidationError, 400, "target_too_short")
    with pytest.raises(ValidationError) as caught:
        api.create("jane@example.com", kind="fax")
    assert_api_error(caught, ValidationError, 400, "invalid_kind")
    with pytest.raises(ValidationError) as caught:
        api.create("not an address", kind="email")
    assert_api_error(caught, ValidationError, 400, "invalid_target")


def test_409_idempotency_conflict(served_app, account):
    api = make_client(served_app, account)
    api.create("jane@example.com", idempotency_key="k-1")
    with pytest.raises(Conflict) as caught:
        api.create("john@example.com", idempotency_key="k-1")
    assert_api_error(caught, Conflict, 409, "idempotency_conflict")


class _HtmlProxy(http.server.BaseHTTPRequestHandler):
    """Something in front of the API that answers in HTML (a load balancer's error page)."""

    def _answer(self):
        status = 502 if "gateway" in self.path else 500
        body = b"<html><body><h1>Bad Gateway</h1></body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def html_proxy():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlProxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_non_json_error_bodies_still_become_clear_api_errors(html_proxy):
    sleep = Recorder()
    api = ScanClient(f"{html_proxy}/gateway", "service_live_x", sleep=sleep)
    with pytest.raises(EngineUnavailable) as caught:
        api.get("scn_x")
    error = caught.value
    assert error.status == 502 and error.code == "http_502" and error.body is None
    assert "non-JSON" in error.message and "text/html" in error.message and "Bad Gateway" in error.message
    assert sleep.calls == [1, 2, 4]  # no Retry-After: exponential back-off
    with pytest.raises(ServerError) as caught:
        ScanClient(html_proxy, "service_live_x", sleep=sleep).get("scn_x")
    assert caught.value.status == 500 and type(caught.value) is ServerError


# --- helpers ----------------------------------------------------------------------------

def test_verify_signature_agrees_with_the_services_signer():
    body = b'{"event":"scan.completed","scan_id":"scn_1"}'
    header = sign("whsec", body)  # the service's own signer
    assert header.startswith("sha256=") and verify_signature("whsec", body, header)
    assert verify_signature(["old", "whsec"], body, header)  # several secrets
    assert not verify_signature("other", body, header)
    assert not verify_signature("whsec", body + b" ", header)
    assert not verify_signature("whsec", body, None) and not verify_signature("whsec", body, header.upper())


def test_parse_rate_limit_and_retry_after():
    parsed = parse_rate_limit('"hour";q=100;w=3600, "day";q=1000;w=86400', '"hour";r=42;t=1200, "day";r=900;t=50000')
    assert parsed == {"hour": {"limit": 100, "window": 3600, "remaining": 42, "reset": 1200},
                      "day": {"limit": 1000, "window": 86400, "remaining": 900, "reset": 50000}}
    assert parse_retry_after("30") == 30 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Sat, 21 Nov 2026 12:00:30 GMT", now=1795262400) == 30


def test_purpose_and_case_ref_go_with_a_creation_and_come_back(served_app, make_customer):
    api = make_client(served_app, make_customer(tier="enterprise"))
    created = api.create("jane@example.com", purpose="kyc_aml", case_ref="C-9")
    scan = api.get(created.scan_id)
    assert (scan.purpose, scan.case_ref) == ("kyc_aml", "C-9")
    batch = api.bulk(["john@example.com"], purpose="other")
    entry = api.get_bulk(batch.bulk_id).scans[0]
    assert (entry.purpose, entry.case_ref) == ("other", None)


# --- sources (D30) ------------------------------------------------------------------------

def _seed_sources():
    from app.extensions import db
    from app.plumbing.models import utcnow
    from app.sources import health
    health.forget_cache()
    with db.connection_context(), db.atomic():
        health.record_answers([("github", "GitHub", "found", 300)] * 3 + [("github", "GitHub", "error", None)],
                              utcnow())


def test_the_client_lists_the_sources(served_app, account):
    from scan_api_client import SourceHealth
    _seed_sources()
    api = make_client(served_app, account)
    (github,) = api.list_sources()
    assert isinstance(github, SourceHealth)
    assert (github.id, github.name, github.status, github.answered_ratio, github.quarantined) == (
        "github", "GitHub", "healthy", 0.75, False)
    assert api.last_credits == 99
