"""login_throttle: a few tries per (address, account), more per account, reserved before the
password is checked, given back on success, lifted by an operator; fails open without Redis."""
from app.accounts import login_throttle as throttle
from app.plumbing import runtime

EMAIL = "ops@acme.example"
PAIR_LIMIT = throttle.MAX_PER_ADDRESS_AND_ACCOUNT
ACCOUNT_LIMIT = throttle.MAX_PER_ACCOUNT


def _fail(times, email=EMAIL, address="10.0.0.1"):
    attempts = [throttle.begin(email, address) for _ in range(times)]
    assert all(a.allowed for a in attempts)
    return attempts


def test_one_address_gets_its_few_tries_then_waits_for_the_window(redis_conn):
    _fail(PAIR_LIMIT)
    refused = throttle.begin(EMAIL, "10.0.0.1")
    assert refused.allowed is False
    assert 0 < refused.retry_after <= throttle.WINDOW_SECONDS
    account_key, pair_key = throttle.keys_for(EMAIL, "10.0.0.1")
    assert int(redis_conn.get(pair_key)) == PAIR_LIMIT  # a refused attempt is not counted
    assert int(redis_conn.get(account_key)) == PAIR_LIMIT
    assert 0 < redis_conn.ttl(pair_key) <= throttle.WINDOW_SECONDS


def test_another_address_and_another_account_are_not_locked_out_by_it(redis_conn):
    _fail(PAIR_LIMIT)
    assert throttle.begin(EMAIL, "10.0.0.2").allowed
    assert throttle.begin("other@acme.example", "10.0.0.1").allowed


def test_the_account_limit_holds_across_addresses(redis_conn):
    for n in range(ACCOUNT_LIMIT):
        assert throttle.begin(EMAIL, f"10.0.1.{n}").allowed
    refused = throttle.begin(EMAIL, "10.0.2.1")
    assert refused.allowed is False and refused.retry_after > 0


def test_the_email_is_normalised_and_not_kept_in_key_names(redis_conn):
    _fail(PAIR_LIMIT, email=" OPS@Acme.Example ")
    assert not throttle.begin(EMAIL, "10.0.0.1").allowed
    assert not any(b"acme" in key for key in redis_conn.keys(f"{throttle.PREFIX}:*"))


def test_a_success_gives_its_slot_back_and_clears_this_clients_counter(redis_conn):
    _fail(PAIR_LIMIT - 1)
    good = throttle.begin(EMAIL, "10.0.0.1")
    throttle.succeeded(good)
    account_key, pair_key = throttle.keys_for(EMAIL, "10.0.0.1")
    assert redis_conn.get(pair_key) is None
    assert int(redis_conn.get(account_key)) == PAIR_LIMIT - 1
    _fail(PAIR_LIMIT)  # a full set of tries again


def test_an_abandoned_attempt_counts_as_nothing(redis_conn):
    _fail(2)
    attempt = throttle.begin(EMAIL, "10.0.0.1")
    throttle.abandoned(attempt)
    account_key, pair_key = throttle.keys_for(EMAIL, "10.0.0.1")
    assert (int(redis_conn.get(account_key)), int(redis_conn.get(pair_key))) == (2, 2)


def test_releasing_a_refused_attempt_changes_nothing(redis_conn):
    _fail(PAIR_LIMIT)
    refused = throttle.begin(EMAIL, "10.0.0.1")
    throttle.succeeded(refused)
    _, pair_key = throttle.keys_for(EMAIL, "10.0.0.1")
    assert int(redis_conn.get(pair_key)) == PAIR_LIMIT


def test_clear_account_lifts_every_lockout_of_the_account_only(redis_conn):
    _fail(PAIR_LIMIT, address="10.0.0.1")
    _fail(PAIR_LIMIT, address="10.0.0.2")
    _fail(PAIR_LIMIT, email="other@acme.example")
    throttle.clear_account(EMAIL)
    assert throttle.begin(EMAIL, "10.0.0.1").allowed
    assert throttle.begin(EMAIL, "10.0.0.2").allowed
    assert not throttle.begin("other@acme.example", "10.0.0.1").allowed


def test_a_missing_address_is_one_unknown_client(redis_conn):
    _fail(PAIR_LIMIT, address=None)
    assert not throttle.begin(EMAIL, None).allowed
    assert throttle.keys_for(EMAIL, None)[1].endswith(":unknown")


def test_without_redis_the_throttle_fails_open(app, monkeypatch):
    monkeypatch.setitem(runtime.config, "REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    for _ in range(PAIR_LIMIT + 1):
        attempt = throttle.begin(EMAIL, "10.0.0.1")
        assert attempt.allowed and attempt.keys is None
    throttle.succeeded(attempt)  # nothing to give back, and no error
    throttle.clear_account(EMAIL)
