"""pipeline: one accounted call (authenticate → access → idempotency → can pay → serve → charge →
record) and its rule table, whose SQL (run on the real PostgreSQL) and Python agree on every case.

The HTTP side is ``Answers``, a stand-in of what the adapter (``app.api_calls``) gives the
pipeline: a view's answer and the error table's statuses; everything behind it is real."""
from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app import pipeline
from app.accounts import access, admin
from app.accounts.models import ApiKey
from app.accounts.statements import keys as key_store
from app.activity import entries as activity
from app.activity.models import ActivityEntry
from app.billing import charges
from app.plumbing.errors import InsufficientScope, InvalidRequest, KeyRefused, NotAuthenticated, TargetSuppressed
from tests.domain_fixtures import books_of, new_customer

NOW = datetime(2026, 11, 22, 12, 0, 0)
STATUSES = {InvalidRequest: 400, InsufficientScope: 403, TargetSuppressed: 403}


# --- the rule table: every case, SQL against Python ---------------------------------------------

KEY_CASES = list(itertools.product(
    (None, NOW - timedelta(days=1)),  # revoked_at
    (None, NOW - timedelta(seconds=1), NOW, NOW + timedelta(hours=1)),  # expires_at (at now: expired)
    (None, ["203.0.113.0/24"], ["2001:db8::/32", "198.51.100.7/32"]),  # allowed_ips
    ([access.SCANS_READ, access.WEBHOOKS], [access.SCANS_WRITE], []),  # scopes
    (True, False),  # livemode
))
CALLERS = [pipeline.Caller(scope, address) for scope, address in itertools.product(
    (access.SCANS_READ, access.ANY_SCOPE), ("203.0.113.5", "198.51.100.7", "2001:db8::1", None, "unix:/socket"))]


def test_every_key_rule_has_its_sql_and_the_sql_every_rule():
    assert [rule.name for rule in pipeline.KEY_RULES] == list(key_store.KEY_CONDITIONS)
    assert all(rule.sql == key_store.KEY_CONDITIONS[rule.name] for rule in pipeline.KEY_RULES)


def test_the_rules_sql_and_python_agree_on_every_case(conn):
    cust, _ = new_customer()
    keys = []
    for n, (revoked_at, expires_at, allowed_ips, scopes, livemode) in enumerate(KEY_CASES):
        keys.append(ApiKey.create(id=f"key_case{n}", customer=cust.id, name="case", digest=f"d{n}", prefix="p",
                                  last4="0000", livemode=livemode, scopes=scopes, expires_at=expires_at,
                                  allowed_ips=allowed_ips, revoked_at=revoked_at))
    checked = 0
    for caller in CALLERS:
        in_sql = key_store.conditions_hold([key.id for key in keys], pipeline.RULE_NAMES,
                                           pipeline.rule_values(caller, NOW))
        for key in keys:
            in_python = {rule.name: rule.holds(key, caller, NOW) for rule in pipeline.KEY_RULES}
            assert in_sql[key.id] == in_python, (key.revoked_at, key.expires_at, key.allowed_ips, key.scopes,
                                                 key.livemode, caller)
            checked += 1
    assert checked == len(KEY_CASES) * len(CALLERS) == 1440
    # Each rule both holds and fails somewhere: the cases really cover it.
    for rule in pipeline.KEY_RULES:
        assert {rule.holds(key, caller, NOW) for key, caller in itertools.product(keys, CALLERS)} == {True, False}


def test_the_python_rules_are_the_ones_the_other_paths_run(conn):
    """``access.refusal_of`` refuses exactly when a D21 rule fails; ``keyauth`` when "active" does."""
    cust, _ = new_customer()
    for n, (revoked_at, expires_at, allowed_ips, scopes, livemode) in enumerate(KEY_CASES):
        key = ApiKey(id=f"key_{n}", customer=cust.id, livemode=livemode, scopes=scopes, expires_at=expires_at,
                     allowed_ips=allowed_ips, revoked_at=revoked_at)
        for caller in CALLERS:
            holds = {rule.name: rule.holds(key, caller, NOW) for rule in pipeline.KEY_RULES}
            refused = access.refusal_of(key, scope=caller.scope, client_address=caller.address, now=NOW)
            assert (refused is None) == (holds["unexpired"] and holds["address_allowed"] and holds["scoped"])
            assert holds["active"] == key.is_live
            assert holds["billed"] == charges.is_billed(livemode)


@pytest.mark.parametrize("fails", [None, "active", "unexpired", "address_allowed", "scoped", "billed"])
def test_the_one_statement_charges_exactly_a_key_that_passes_every_rule(conn, fails):
    cust, _ = new_customer(credits=10)
    with freeze_time(NOW):
        key, token = admin.issue_key(cust.id, "k", scopes=[access.SCANS_WRITE] if fails == "scoped" else None,
                                        allowed_ips="203.0.113.0/24" if fails == "address_allowed" else None,
                                        livemode=fails != "billed")
    changes = {"active": {"revoked_at": NOW}, "unexpired": {"expires_at": NOW}}.get(fails or "", {})
    if changes:
        ApiKey.update(**changes).where(ApiKey.id == key.id).execute()
    caller = pipeline.Caller(access.SCANS_READ, "192.0.2.1")
    entry = activity.read_entry(action="scan.read", resource_id="scn_x", client_address="192.0.2.1",
                                request_id="req_r", statuses=(404, 200, 403, 402))
    before = books_of(cust.id)
    with freeze_time(NOW):
        key_row = key_store.by_digest(key.digest)
        assert pipeline.may_be_charged(key_row, caller, NOW) == (fails is None)
        try:
            pipeline.serve_scan_read(token, "scn_unknown", "req_r", {200: "a", 403: "b", 404: "c"}, caller=caller,
                                     entry=entry)
        except (NotAuthenticated, KeyRefused):
            assert fails in ("active", "unexpired", "address_allowed", "scoped")
    assert charges.balance_of(cust.id) == before.balance - (1 if fails is None else 0)


# --- the accounted call -----------------------------------------------------------------------------

class Answers:
    """The HTTP side of a call: ``view`` answers (a status, or raises), the error table's statuses."""

    def __init__(self, view):
        self.view = view
        self.served = []

    def serve(self, key):
        served = pipeline.Served(0)
        served.status = self.view(key, served)
        self.served.append(served)
        return served

    def refuse(self, exc):
        return pipeline.Served(self.status_of(exc), code=getattr(exc, "code", None), text=lambda: '{"ok":false}')

    def unavailable(self):
        return pipeline.Served(503)

    def status_of(self, exc):
        return 402 if exc.__class__.__name__ == "InsufficientBalance" else STATUSES.get(type(exc), 500)


def request(method="GET", *, idempotency_key=None, scope=access.SCANS_READ) -> pipeline.Request:
    return pipeline.Request(method=method, path="/api/v1/scans", scope=scope, client_address="192.0.2.1",
                            request_id="req_p", action="scans.list", resource_id=None, route="/api/v1/scans",
                            idempotency_key=idempotency_key,
                            body=lambda: b"{}")


def entries(customer_id) -> list[ActivityEntry]:
    return list(ActivityEntry.select().where(ActivityEntry.customer_id == customer_id)
                .order_by(ActivityEntry.created_at))


def test_a_served_call_is_charged_once_and_its_entry_written_with_the_charge(conn):
    cust, key = new_customer(credits=5)
    outcome = pipeline.account(key, request(), Answers(lambda key, served: 200), idempotent=False)
    assert (outcome.status, outcome.credits, outcome.balance) == (200, 1, 4) == (200, 1, charges.balance_of(cust.id))
    assert outcome.usage is not None and outcome.limits is not None
    [entry] = entries(cust.id)
    assert (entry.id, entry.status, entry.credits, entry.action) == (outcome.recorded.id, 200, 1, "scans.list")


def test_a_call_its_service_charged_is_not_charged_again(conn):
    cust, key = new_customer(credits=5)

    def view(key, served):
        served.charge = pipeline.Charge(3, credits=2)  # the service's own transaction charged it
        return 202
    outcome = pipeline.account(key, request("POST"), Answers(view), idempotent=True)
    assert (outcome.status, outcome.charge.credits, outcome.balance) == (202, 2, 3)
    assert charges.balance_of(cust.id) == 5  # nothing taken here
    [entry] = entries(cust.id)
    assert (entry.status, entry.credits) == (202, 2)


def test_a_free_refusal_costs_nothing_and_a_charged_one_a_call(conn):
    cust, key = new_customer(credits=5)

    def suppressed(key, served):
        raise TargetSuppressed("opted out")
    assert pipeline.account(key, request("POST"), Answers(suppressed), idempotent=False).credits == 0

    def invalid(key, served):
        raise InvalidRequest("no")
    outcome = pipeline.account(key, request("POST"), Answers(invalid), idempotent=False)
    assert (outcome.status, outcome.credits) == (400, 1)
    assert charges.balance_of(cust.id) == 4
    assert [(e.status, e.credits) for e in entries(cust.id)] == [(403, 0), (400, 1)]


def test_a_test_key_is_never_charged(conn):
    cust, key = new_customer(credits=0, livemode=False)
    outcome = pipeline.account(key, request(), Answers(lambda key, served: 200), idempotent=False)
    assert (outcome.status, outcome.charge, outcome.balance) == (200, None, 0)
    assert [(e.status, e.credits, e.livemode) for e in entries(cust.id)] == [(200, 0, False)]


def test_a_balance_that_ran_out_before_the_charge_answers_402_uncharged(conn):
    cust, key = new_customer(credits=1)

    def spends_it(key, served):
        charges.charge_call(cust.id, "req_other", NOW, entry=activity.call_entry(
            customer_id=cust.id, livemode=True, key_id=key.id, action="scans.list", resource_id=None,
            client_address=None, request_id=None, status=200).row(credits=1))
        return 200
    rows = books_of(cust.id).ledger_rows
    outcome = pipeline.account(key, request(), Answers(spends_it), idempotent=False)
    assert (outcome.status, outcome.answer.status, outcome.credits, outcome.balance) == (402, 402, 0, 0)
    assert books_of(cust.id).ledger_rows == rows + 1  # the other call's only


def test_an_idempotency_key_replays_the_first_answer_free(conn):
    cust, key = new_customer(credits=5)
    answers = Answers(lambda key, served: 202)
    answers.serve = lambda key: pipeline.Served(202, text=lambda: '{"ok":true}')
    first = pipeline.account(key, request("POST", idempotency_key="k1"), answers, idempotent=True)
    again = pipeline.account(key, request("POST", idempotency_key="k1"), answers, idempotent=True)
    assert first.replay is None and first.credits == 1
    assert again.replay == (202, '{"ok":true}') and again.credits == 0
    assert charges.balance_of(cust.id) == 4 == again.balance


def test_a_refused_key_is_recorded_free_and_raised(conn):
    cust, _ = new_customer(credits=5)
    key, token = admin.issue_key(cust.id, "writer", scopes=[access.SCANS_WRITE])
    with pytest.raises(InsufficientScope):
        pipeline.authorize(token, request(), Answers(None).status_of)
    assert [(e.status, e.credits, e.key_id) for e in entries(cust.id)] == [(403, 0, key.id)]
    assert charges.balance_of(cust.id) == 5
    with pytest.raises(NotAuthenticated):
        pipeline.authorize("service_live_unknown", request(), Answers(None).status_of)


def test_the_ledger_note_names_the_route_of_a_refused_or_read_call_never_its_id():
    def note(method, status, path="/api/v1/scan/scn_x1", route="/api/v1/scan/{scan_id}"):
        return pipeline.Request(method=method, path=path, scope="", client_address=None, request_id=None,
                                action="", resource_id=None, route=route).note(status)
    assert note("DELETE", 200) == "DELETE /api/v1/scan/scn_x1"
    assert note("DELETE", 404) == "DELETE /api/v1/scan/{scan_id} (404)"
    assert note("GET", 404) == note("GET", 200) == "GET /api/v1/scan/{scan_id}"  # a minute's reads: one row
    assert note("POST", 400, path="/nowhere", route=None) == "POST /nowhere"


def test_still_allowed_says_no_once_the_key_is_revoked_expired_or_narrowed(conn):
    from app.plumbing.models import utcnow
    caller = pipeline.Caller(access.SCANS_READ, "203.0.113.9")
    keys = [new_customer()[1] for _ in range(4)]
    assert all(pipeline.still_allowed(key.id, caller) for key in keys)
    revoked, expired, narrowed, kept = keys
    admin.revoke_key(revoked.id)
    ApiKey.update(expires_at=utcnow()).where(ApiKey.id == expired.id).execute()
    ApiKey.update(scopes=[access.SCANS_WRITE]).where(ApiKey.id == narrowed.id).execute()
    assert [pipeline.still_allowed(key.id, caller) for key in keys] == [False, False, False, True]
    assert pipeline.still_allowed(kept.id, pipeline.Caller(access.SCANS_WRITE, "203.0.113.9"))
    assert not pipeline.still_allowed("key_unknown", caller)
