"""Operators' view: /metrics (internal, uncharged) and structured, redacted logs."""
import json
import logging
from datetime import timedelta

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.plumbing.logging_setup import ContextFilter, JsonFormatter, RedactFilter, log_context
from app.plumbing.models import utcnow
from app.scans.models import Scan
from tests.api.helpers import balance


def _samples(client) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    text = client.get("/metrics").get_data(as_text=True)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_requests_and_scans_and_are_free(client, account):
    before = _samples(client)
    # The clock stands still from the creation to the scrape: on a loaded machine the new scan's
    # first look (its eta less half a second) fell due before the scrape, and was counted overdue.
    with freeze_time(utcnow()):
        created = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers)
        assert created.status_code == 202
        client.post("/api/v1/scan", json={"target": "ab"}, headers=account.headers)
        response = client.get("/metrics", headers=account.headers)
        assert response.status_code == 200
        after = _samples(client)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)
    assert moved("scan_api_scans_created_total", kind="email", tier="business") == 1
    assert moved("scan_api_http_requests_total", method="POST", route="/api/v1/scan", status="202") == 1
    assert moved("scan_api_http_requests_total", method="POST", route="/api/v1/scan", status="400") == 1
    assert moved("scan_api_http_request_duration_seconds_count", method="POST", route="/api/v1/scan",
                 status="202") == 1
    assert after[("scan_api_queue_depth", (("queue", "engine"),))] == 0
    # The new scan's first look is a due time in the database, not a scheduled job; not yet overdue.
    assert after[("scan_api_scheduled_jobs", (("queue", "engine"),))] == 0
    assert after[("scan_api_looks_overdue_seconds", ())] == 0
    assert after[("scan_api_database_up", ())] == 1 and after[("scan_api_redis_up", ())] == 1
    assert any(name == "scan_engine_call_seconds_count" for name, _ in after)
    assert balance(account) == 98  # the scrapes cost nothing


def test_metrics_say_how_overdue_the_batch_looks_are(client, account):
    scan_id = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers).json["scan_id"]
    with db.connection_context():  # as if no worker had looked for an hour
        Scan.update(next_look_at=utcnow() - timedelta(hours=1)).where(Scan.id == scan_id).execute()
    overdue = _samples(client)[("scan_api_looks_overdue_seconds", ())]
    assert 3600 <= overdue < 3660


def test_metrics_are_internal_by_default(client):
    assert client.get("/metrics", environ_base={"REMOTE_ADDR": "203.0.113.9"}).status_code == 404


@pytest.mark.config(METRICS_TOKEN="scrape-token")
def test_metrics_token_is_required_when_set(client):
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 404
    ok = client.get("/metrics", headers={"Authorization": "Bearer scrape-token"},
                    environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert ok.status_code == 200


def _format(message, *args, **extra):
    record = logging.LogRecord("app.test", logging.INFO, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    ContextFilter().filter(record)
    RedactFilter().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_json_logs_carry_context_ids():
    with log_context(scan_id="scn_abc", delivery_id="dlv_x"):
        entry = _format("looked at %s", "the engine")
    assert entry["message"] == "looked at the engine"
    assert entry["scan_id"] == "scn_abc" and entry["delivery_id"] == "dlv_x" and entry["level"] == "INFO"
    assert "scan_id" not in _format("outside")


def test_secrets_are_redacted_from_logs():
    entry = _format("key %s secret %s", "service_live_AbCdEf0123456789abcdef", "whsec_s3cr3tvalue_xyz")
    assert "AbCdEf0123456789" not in entry["message"] and "s3cr3tvalue" not in entry["message"]
    assert entry["message"] == "key service_live_[redacted] secret whsec_[redacted]"


def test_request_logs_name_request_and_customer(client, account, caplog):
    with caplog.at_level(logging.INFO, logger="app.intake.creation"):
        client.post("/api/v1/scan", json={"target": "jane@example.com"},
                    headers={**account.headers, "X-Request-Id": "req-ops-1"})
    record = next(r for r in caplog.records if r.getMessage().startswith("scan created"))
    ContextFilter().filter(record)
    assert record.request_id == "req-ops-1" and record.customer_id == account.id
    assert record.scan_id.startswith("scn_")


def test_a_bulk_call_logs_one_line_naming_its_batch(client, make_customer, caplog):
    account = make_customer(tier="business", credits=100)
    with caplog.at_level(logging.INFO, logger="app.intake.creation"):
        answer = client.post("/api/v1/scan/bulk", headers=account.headers, json={"targets": [
            {"target": "a@example.com"}, {"target": "b@example.com"}, {"target": "+14155550100"}]})
    assert answer.status_code == 202
    lines = [r.getMessage() for r in caplog.records if r.name == "app.intake.creation"]
    assert lines == [f"bulk {answer.get_json()['bulk_id']} created: 3 scans (email 2, phone 1)"]
