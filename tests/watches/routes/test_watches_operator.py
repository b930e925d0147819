"""``flask watches run-due``: the scheduler run now by the operator, or (QA, refused in production) as
if it were some days later, which the scenarios use to take a watch through its intervals."""
from __future__ import annotations

import json

import pytest

from app.extensions import db
from app.scans.models import Scan


def test_run_due_makes_the_scans_due_at_the_qa_clock(app, client, account):
    runner = app.test_cli_runner()
    created = client.post("/api/v1/watches", headers=account.headers,
                          json={"target": "jane.doe@example.com", "interval": "daily"}).json
    now = json.loads(runner.invoke(args=["watches", "run-due", "--json"]).output)
    assert now["watch_scans"] == 0  # its next scan is due tomorrow or the day after
    later = json.loads(runner.invoke(args=["watches", "run-due", "--days-ahead", "2", "--json"]).output)
    assert (later["watch_scans"], later["watch_scans_missed"]) == (1, 0)
    with db.connection_context():
        assert Scan.select().where(Scan.watch_id == created["watch_id"]).count() == 2
    shown = runner.invoke(args=["watches", "run-due"])
    assert shown.exit_code == 0 and "watch scans" in shown.output


def test_the_operator_s_watch_limit_is_the_one_creations_meet(app, client, account):
    """``customers limits --watches N`` (D28's operator command) sets the limit the API enforces."""
    runner = app.test_cli_runner()
    body = {"target": "jane.doe@example.com", "interval": "daily"}
    assert client.post("/api/v1/watches", headers=account.headers, json=body).status_code == 201
    out = json.loads(runner.invoke(args=["customers", "limits", account.id, "--watches", "1", "--json"]).output)
    assert out["limits"]["watches"] == 1
    refused = client.post("/api/v1/watches", headers=account.headers, json={**body, "target": "john@example.com"})
    assert refused.status_code == 429 and refused.json["error"] == "watch_limit_reached"
    runner.invoke(args=["customers", "limits", account.id, "--watches", "2", "--json"])
    assert client.post("/api/v1/watches", headers=account.headers,
                       json={**body, "target": "john@example.com"}).status_code == 201


@pytest.mark.config(APP_ENV="production")
def test_production_refuses_the_qa_clock(app):
    refused = app.test_cli_runner().invoke(args=["watches", "run-due", "--days-ahead", "3", "--json"])
    assert refused.exit_code != 0 and "refused in production" in refused.output
