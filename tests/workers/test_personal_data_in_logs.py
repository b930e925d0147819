"""No target, result field or webhook body in a log line, a metric label or an error message
(D20): a run through creations (single and bulk), a failure, reads, lists, webhook deliveries
(one refused by the receiver), the activity log searched by target, the account, an erasure and refusals, logged at DEBUG, then every line and /metrics
searched for what it was about."""
import json
import logging

from freezegun import freeze_time

from app.extensions import db
from app.webhooks.models import WebhookDelivery
from tests.workers.test_webhooks import START, hooked, receiver  # noqa: F401 - fixtures

TARGETS = ("canary.one@example.com", "fail.canary@example.com", "+447700900555", "canaryhandle")


def test_a_run_logs_and_counts_nothing_about_the_people_it_looked_up(client, hooked, jobs, caplog):  # noqa: F811
    account, hook = hooked(responses=(500, 200))
    caplog.set_level(logging.DEBUG)
    with freeze_time(START) as frozen:
        single = client.post("/api/v1/scan", json={"target": TARGETS[0]}, headers=account.headers).json
        failing = client.post("/api/v1/scan", json={"target": TARGETS[1]}, headers=account.headers).json
        batch = client.post("/api/v1/scan/bulk", headers=account.headers,
                            json={"targets": [{"target": TARGETS[2]}, {"target": TARGETS[3]}, {"target": "zz"}]}).json
        assert jobs.run(frozen, until=lambda: WebhookDelivery.select()
                        .where(WebhookDelivery.status == "succeeded").count() == 4)
        with db.connection_context():  # before the erasure below, which removes one
            bodies = [d.body for d in WebhookDelivery.select()]
        client.get(f"/api/v1/scan/{single['scan_id']}", headers=account.headers)
        client.get(f"/api/v1/scan/{failing['scan_id']}", headers=account.headers)
        client.get(f"/api/v1/scan/bulk/{batch['bulk_id']}", headers=account.headers)
        client.get("/api/v1/scans", headers=account.headers)
        client.get("/api/v1/deliveries", headers=account.headers)
        found = client.get("/api/v1/activity", query_string={"target": TARGETS[0]}, headers=account.headers)
        assert [e["action"] for e in found.json["data"]] == ["scan.create"]
        client.get("/api/v1/account", headers=account.headers)
        assert client.delete(f"/api/v1/scan/{failing['scan_id']}", headers=account.headers).status_code == 200
        refused = client.post("/api/v1/scan", json={"target": "canary!@@example.com"}, headers=account.headers)
        assert refused.status_code == 400 and "canary" not in refused.json["message"]
    results = [json.loads(body)["result"] for body in bodies if '"result"' in body]
    assert len(bodies) == 4 and results  # the run really made what is searched for
    metrics = client.get("/metrics").get_data(as_text=True)
    logged = "\n".join(record.getMessage() + " " + json.dumps(record.__dict__, default=str)
                       for record in caplog.records)
    assert len(caplog.records) > 20
    for target in (*TARGETS, "canary!@@example.com"):
        assert target not in logged, target
        assert target not in metrics, target
    for result in results:
        summary = result.get("ai_summary")
        assert summary and summary not in logged
    for body in bodies:
        assert body not in logged
