"""audit_sinks: every new activity entry pushed to a customer's SIEM, batched, at least once, from a
position only an acknowledged batch moves; retried on the webhooks' schedule; the token encrypted."""
from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta

import pytest
import requests
from freezegun import freeze_time

from app.activity import audit_sinks, entries
from app.activity.audit_models import AuditSink
from app.plumbing.errors import AccountError
from workers import audit_sinks as pusher

T = datetime(2031, 6, 1, 9, 0)
TOKEN = "hec-token-7f1c2a9e"


@pytest.fixture
def hec(simulator):
    """A simulator HEC receiver: ``(url, received, configure(responses))``."""
    name = f"hec-{uuid.uuid4().hex[:12]}"

    def configure(responses=(200,)):
        requests.post(f"{simulator.url}/_sim/receivers/{name}", json={"secret": TOKEN, "responses": list(responses)},
                      timeout=5).raise_for_status()
    configure()
    return (f"{simulator.url}/_sim/hec/{name}/services/collector/event",
            lambda: requests.get(f"{simulator.url}/_sim/receivers/{name}/deliveries", timeout=5).json()["deliveries"],
            configure)


@pytest.fixture
def customer(conn):
    from tests.domain_fixtures import new_customer
    cust, _ = new_customer()
    return cust


def entry(customer_id, action="scan.read", **fields):
    return entries.record(customer_id=customer_id, livemode=True, action=action, status=200, **fields)


def test_a_sink_receives_only_new_entries_as_hec_events_with_their_stable_ids(customer, hec):
    url, received, _ = hec
    entry(customer.id, "scans.list")  # before the sink: the export reads the past
    sink = audit_sinks.add(customer.id, url=url, token=TOKEN)
    assert "token" not in str(sink) and TOKEN not in str(sink)
    assert AuditSink.get_by_id(sink["sink_id"]).token_encrypted != TOKEN
    new = [entry(customer.id), entry(customer.id, "scan.create", key_id="key_1")]
    entry("cus_other")  # another customer's: not this sink's
    assert pusher.push(sink["sink_id"]) == "acknowledged"
    [batch] = received()
    assert batch["token_valid"] and batch["headers"]["Authorization"] == f"Splunk {TOKEN}"
    assert [e["event"]["activity_id"] for e in batch["events"]] == new
    first = batch["events"][0]
    assert set(first) == {"time", "host", "source", "sourcetype", "event"} and first["sourcetype"] == "_json"
    assert pusher.push(sink["sink_id"]) is None  # nothing new: not due again for a few seconds
    assert audit_sinks.list_sinks(customer.id)[0]["delivered"] == 2


def test_a_failed_batch_is_sent_again_from_the_same_position_on_the_webhook_schedule(customer, hec, app):
    url, received, configure = hec
    configure([503, 500, 200])
    with freeze_time(T) as frozen:
        sink_id = audit_sinks.add(customer.id, url=url, token=TOKEN, format="splunk_hec")["sink_id"]
        written = entry(customer.id)
        assert pusher.push(sink_id) == "failed"  # schedule 0, 30, 300 (the webhooks' setting)
        assert AuditSink.get_by_id(sink_id).next_attempt_at == T  # first retry at once
        assert pusher.push(sink_id) == "failed"
        assert AuditSink.get_by_id(sink_id).next_attempt_at == T + timedelta(seconds=30)
        assert pusher.push(sink_id) is None  # not due yet
        frozen.tick(timedelta(seconds=30))
        assert pusher.push(sink_id) == "acknowledged"
    ids = [[e["event"]["activity_id"] for e in d["events"]] for d in received()]
    assert ids == [[written]] * 3  # the same batch each time
    row = AuditSink.get_by_id(sink_id)
    assert (row.failures, row.delivered, row.last_error) == (0, 1, None)


def test_batches_are_counted_by_outcome_from_zero(customer, hec):
    from app.plumbing import metrics
    url, _, configure = hec
    before = {o: metrics.AUDIT_SINK_BATCHES.labels(outcome=o)._value.get() for o in metrics.AUDIT_SINK_OUTCOMES}
    entries_before = metrics.AUDIT_SINK_ENTRIES._value.get()
    configure([500, 200])
    sink_id = audit_sinks.add(customer.id, url=url, token=TOKEN)["sink_id"]
    entry(customer.id)
    entry(customer.id)
    assert [pusher.push(sink_id), pusher.push(sink_id)] == ["failed", "acknowledged"]
    after = {o: metrics.AUDIT_SINK_BATCHES.labels(outcome=o)._value.get() for o in metrics.AUDIT_SINK_OUTCOMES}
    assert {o: after[o] - before[o] for o in after} == {"acknowledged": 1, "failed": 1, "stale": 0}
    assert metrics.AUDIT_SINK_ENTRIES._value.get() - entries_before == 2


def test_retries_after_the_schedule_keep_its_last_delay(app):
    app.config["WEBHOOK_RETRY_SCHEDULE"] = (0, 30, 300)
    assert [audit_sinks.retry_delay(n) for n in (1, 2, 3, 4, 9)] == [0, 30, 300, 300, 300]


def test_a_wrong_token_is_a_failure_and_never_in_a_log_or_the_sink_row(customer, hec, caplog):
    url, received, _ = hec
    caplog.set_level(logging.DEBUG)
    sink_id = audit_sinks.add(customer.id, url=url, token="not-the-token")["sink_id"]
    entry(customer.id)
    assert pusher.push(sink_id) == "failed"
    assert received()[0]["token_valid"] is False
    row = AuditSink.get_by_id(sink_id)
    assert row.last_status == 401 and "not-the-token" not in repr(row.__data__)
    assert "not-the-token" not in caplog.text


def test_a_lost_lease_moves_nothing(customer, hec):
    url, _, _ = hec
    sink_id = audit_sinks.add(customer.id, url=url, token=TOKEN)["sink_id"]
    entry(customer.id)
    batch = audit_sinks.take_batch(sink_id)
    AuditSink.update(lease_token="lse_other").where(AuditSink.id == sink_id).execute()  # another worker's now
    assert audit_sinks.record(batch, status=200, error=None) == "stale"
    assert AuditSink.get_by_id(sink_id).delivered == 0


def test_ndjson_sinks_get_one_entry_a_line_with_a_bearer_token(customer, sim_receiver):
    url, received = sim_receiver("unused")
    sink_id = audit_sinks.add(customer.id, url=url, token=TOKEN, format="ndjson")["sink_id"]
    written = entry(customer.id)
    assert pusher.push(sink_id) == "acknowledged"
    [delivery] = received()
    assert delivery["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert delivery["headers"]["Content-Type"] == "application/x-ndjson"
    assert [json.loads(line)["activity_id"] for line in delivery["body"].splitlines()] == [written]
    assert delivery["body"].startswith(f'{{"activity_id":"{written}"')


@pytest.mark.config(APP_ENV="production")  # the SSRF guard
def test_a_sink_refuses_a_private_or_plain_http_url(customer):
    for url in ("http://example.com/hec", "https://127.0.0.1/hec", "https://169.254.169.254/latest",
                "https://10.0.0.7/hec"):
        with pytest.raises(AccountError):
            audit_sinks.add(customer.id, url=url, token=TOKEN)
    assert AuditSink.select().count() == 0


@pytest.mark.config(APP_ENV="production")
def test_a_sink_whose_host_turns_private_is_refused_at_connect(customer, monkeypatch):
    from app.plumbing import outbound_urls as webhook_urls
    monkeypatch.setattr(webhook_urls, "resolve", lambda host, port: ["93.184.216.34"])  # public when saved
    sink_id = audit_sinks.add(customer.id, url="https://siem.example/hec", token=TOKEN)["sink_id"]
    monkeypatch.setattr(webhook_urls, "resolve", lambda host, port: ["127.0.0.1"])  # rebinding to loopback
    entry(customer.id)
    assert pusher.push(sink_id) == "failed"
    assert AuditSink.get_by_id(sink_id).last_error == "ssrf_refused"


def test_a_sink_refuses_a_bad_format_token_or_customer(customer):
    with pytest.raises(AccountError):
        audit_sinks.add(customer.id, url="https://siem.example/hec", token=TOKEN, format="xml")
    with pytest.raises(AccountError):
        audit_sinks.add(customer.id, url="https://siem.example/hec", token="two words")
    with pytest.raises(AccountError):
        audit_sinks.add("cus_nobody", url="https://siem.example/hec", token=TOKEN)
    assert AuditSink.select().count() == 0
    sink_id = audit_sinks.add(customer.id, url="https://siem.example/hec", token=TOKEN)["sink_id"]
    assert audit_sinks.remove(sink_id) == {"sink_id": sink_id, "removed": True}
    with pytest.raises(AccountError):
        audit_sinks.remove(sink_id)
