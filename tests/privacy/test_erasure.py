"""erasure: a scan's personal data erased on request or when its customer's retention ends (D20).

What goes: the target, the result, the failure message, the deliveries' bodies and their
attempts' response excerpts; pending deliveries are cancelled. What stays: ids, times, status,
purpose, case reference, mode, and every charge (the ledger still adds up to the balance)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.billing import charges
from app.plumbing.db import db, execute
from app.plumbing.errors import DeliveryErased, Forbidden, NotFound, ScanInFlight
from app.plumbing.rawjson import parsed
from app.privacy import erasure
from app.scans import reads
from app.scans import statements as scan_store
from app.scans.models import FINAL, Scan
from app.tracking import states
from app.webhooks import delivery_log
from app.webhooks.models import CANCELLED, FAILED, PENDING, DeliveryAttempt, WebhookDelivery
from tests.domain_fixtures import new_customer, new_scan

T0 = datetime(2026, 3, 2, 9, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}, "ai_summary": "Jane Doe, London"}
HOOK = "https://receiver.example/hooks"


def _completed(cust, key, target):
    scan = new_scan(cust, key, target)
    states.complete(scan.id, RESULT)
    return scan.id


def _personal_data_left(scan_id: str) -> list[str]:
    """What of the scan's personal data is still stored anywhere it was written."""
    scan = Scan.get_by_id(scan_id)
    left = [name for name in ("target", "result_json", "failure_message") if getattr(scan, name) is not None]
    deliveries = list(WebhookDelivery.select().where(WebhookDelivery.scan_id == scan_id))
    left += [f"delivery {d.id} body" for d in deliveries if d.body is not None]
    left += [f"attempt {a.id} excerpt" for a in DeliveryAttempt.select().join(WebhookDelivery)
             .where(WebhookDelivery.scan_id == scan_id) if a.response_excerpt is not None]
    return left


def test_retention_erases_a_scan_a_day_past_it_and_keeps_one_a_day_short(conn):
    with freeze_time(T0) as frozen:
        cust, key = new_customer(credits=20, webhook_url=HOOK)
        admin.set_settings(cust.id, result_retention_days=30)
        old = _completed(cust, key, "old.one@example.com")
        frozen.tick(timedelta(days=2))
        young = _completed(cust, key, "young.one@example.com")
        balance = charges.balance_of(cust.id)
        frozen.tick(timedelta(days=29))  # old ended 31 days ago, young 29
        assert erasure.erase_past_retention() == 1
        assert _personal_data_left(old) == [] and _personal_data_left(young) != []
        assert Scan.get_by_id(old).erased_at == T0 + timedelta(days=31)
        view = parsed(reads.read_scan(cust.id, old))
        assert view["erased_at"] == "2026-04-02T09:00:00Z" and view["completed_at"] == "2026-03-02T09:00:00Z"
        assert "target" not in view and "result" not in view and view["kind"] == "email"
        assert parsed(reads.read_scan(cust.id, young))["result"] == RESULT
        listed = parsed(reads.list_scans(cust.id))["data"]
        assert [("target" in e, "erased_at" in e) for e in listed] == [(True, False), (False, True)]
        assert charges.balance_of(cust.id) == balance == charges.ledger_sum(cust.id)  # charges stay
        frozen.tick(timedelta(days=1, seconds=1))
        assert erasure.erase_past_retention() == 1 and _personal_data_left(young) == []
        assert erasure.erase_past_retention() == 0


def test_retention_is_each_customers_own_and_counts_from_the_end_of_a_failed_scan(conn):
    with freeze_time(T0) as frozen:
        short, short_key = new_customer()
        admin.set_settings(short.id, result_retention_days=1)
        default, default_key = new_customer()
        failed = new_scan(short, short_key, "fail.me@example.com")
        frozen.tick(timedelta(hours=1))
        states.fail(failed.id, "engine_failed", "nothing on Jane Doe")
        kept = _completed(default, default_key, "kept@example.com")
        frozen.tick(timedelta(hours=23, minutes=59))
        assert erasure.erase_past_retention() == 0  # failed 23 h 59 min ago
        frozen.tick(timedelta(minutes=2))
        assert erasure.erase_past_retention() == 1
        view = parsed(reads.read_scan(short.id, failed.id))
        assert "failure" not in view and view["failed_at"] == "2026-03-02T10:00:00Z" and "erased_at" in view
        assert _personal_data_left(kept) == ["target", "result_json"]  # 90 days by default


def test_the_retention_job_works_in_batches_and_reports_progress(conn):
    with freeze_time(T0) as frozen:
        cust, key = new_customer(credits=20)
        admin.set_settings(cust.id, result_retention_days=1)
        ids = [_completed(cust, key, f"person{i}@example.com") for i in range(5)]
        frozen.tick(timedelta(days=2))
        told = []
        assert erasure.erase_past_retention(batch=2, progress=told.append) == 5
        assert told == [2, 2, 1]
        assert all(_personal_data_left(scan_id) == [] for scan_id in ids)


def test_the_retention_look_can_use_its_partial_index(conn):
    """The job reads only what is still to erase: its query implies the partial index's
    predicate, so the planner can use it (forced here: a small table is read whole anyway)."""
    params = scan_store.past_retention_params(final=FINAL, now=T0, limit=10)
    with db.atomic():
        db.execute_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(row[0] for row in execute("EXPLAIN " + scan_store.PAST_RETENTION, params).fetchall())
    assert "scan_erasable_finished_at" in plan, plan


def test_erasing_on_request_refuses_a_scan_in_flight_and_is_the_same_twice(conn):
    with freeze_time(T0) as frozen:
        cust, key = new_customer(webhook_url=HOOK)
        scan = new_scan(cust, key, "jane.doe@example.com")
        with pytest.raises(ScanInFlight):
            erasure.erase_scan(customer_id=cust.id, scan_id=scan.id, livemode=True)
        assert Scan.get_by_id(scan.id).target == "jane.doe@example.com"
        states.complete(scan.id, RESULT)
        frozen.tick(5)
        first = erasure.erase_scan(customer_id=cust.id, scan_id=scan.id, livemode=True)
        assert first == {"ok": True, "scan_id": scan.id, "erased_at": "2026-03-02T09:00:05Z"}
        frozen.tick(5)
        assert erasure.erase_scan(customer_id=cust.id, scan_id=scan.id, livemode=True) == first
        assert _personal_data_left(scan.id) == []


def test_only_the_owner_in_the_keys_mode_erases(conn):
    cust, key = new_customer()
    other, _ = new_customer()
    scan_id = _completed(cust, key, "jane.doe@example.com")
    with pytest.raises(Forbidden):
        erasure.erase_scan(customer_id=other.id, scan_id=scan_id, livemode=True)
    with pytest.raises(NotFound):
        erasure.erase_scan(customer_id=cust.id, scan_id=scan_id, livemode=False)
    assert _personal_data_left(scan_id) == ["target", "result_json"]


def test_erasing_a_batch_erases_its_final_scans_and_counts_those_in_flight(conn):
    from app.intake import creation
    cust, key = new_customer(credits=20)
    outcome = creation.create_bulk(cust, key.id, [{"target": "a.person@example.com"}, {"target": "b.person@example.com"},
                                               {"target": "c.person@example.com"}], request_id="r", livemode=True)
    ids = [entry["scan_id"] for entry in outcome.body["scans"]]
    states.complete(ids[0], RESULT)
    states.fail(ids[1], "engine_failed", "no luck")
    answer = erasure.erase_batch(customer_id=cust.id, bulk_id=outcome.body["bulk_id"], livemode=True)
    assert answer == {"ok": True, "bulk_id": outcome.body["bulk_id"], "erased": 2, "in_flight": 1}
    entries = parsed(reads.read_bulk(cust.id, outcome.body["bulk_id"]))["scans"]
    assert [("target" in e, "erased_at" in e) for e in entries] == [(False, True), (False, True), (True, False)]
    states.complete(ids[2], RESULT)
    assert erasure.erase_batch(customer_id=cust.id, bulk_id=outcome.body["bulk_id"], livemode=True)["erased"] == 3


def test_a_pending_delivery_is_cancelled_and_an_erased_one_cannot_be_redelivered(conn):
    cust, key = new_customer(webhook_url=HOOK)
    pending_id = _completed(cust, key, "pending.one@example.com")
    sent_id = _completed(cust, key, "sent.one@example.com")
    sent = WebhookDelivery.get(WebhookDelivery.scan_id == sent_id)
    WebhookDelivery.update(status=FAILED, attempts=1).where(WebhookDelivery.id == sent.id).execute()
    DeliveryAttempt.create(delivery=sent.id, number=1, url=HOOK, status_code=500, outcome="failed",
                           response_excerpt="echo: sent.one@example.com")
    for scan_id in (pending_id, sent_id):
        erasure.erase_scan(customer_id=cust.id, scan_id=scan_id, livemode=True)
    pending = WebhookDelivery.get(WebhookDelivery.scan_id == pending_id)
    assert (pending.status, pending.body, pending.next_attempt_at) == (CANCELLED, None, None)
    assert pending.finished_at is not None
    assert WebhookDelivery.get_by_id(sent.id).status == FAILED  # what happened stays; only its body goes
    assert _personal_data_left(sent_id) == []
    for delivery_id in (pending.id, sent.id):
        with pytest.raises(DeliveryErased):
            delivery_log.redeliver(delivery_id, cust.id)
    assert WebhookDelivery.select().where(WebhookDelivery.status == PENDING).count() == 0
