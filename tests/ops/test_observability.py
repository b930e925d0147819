"""Logs and metrics of the real processes: gunicorn (production settings) and a worker.

- Every line gunicorn writes (its master's messages included) is JSON, with one line per
  request carrying method, route, status, duration_ms, request_id, customer_id and bytes.
- /metrics adds up the counters of both gunicorn workers and of the RQ worker
  (prometheus-client's multiprocess mode), and every metric that ops/alerts.yml and
  ops/grafana-dashboard.json name is there after some traffic; the webhook attempt
  counter and the delivery latency histogram move when a webhook is delivered.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from simulator.procutil import wait_until
from tests.ops.test_startup import STRONG_SECRET, closed_port
from tests.processes import service_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
METRIC_RE = re.compile(r"\b(scan_[a-z_]+)")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def named_metrics() -> set[str]:
    """Every metric named by the alert rules and the dashboard's queries."""
    rules = yaml.safe_load((ROOT / "ops/alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((ROOT / "ops/grafana-dashboard.json").read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) > 20
    return {name for expr in exprs for name in METRIC_RE.findall(expr)}


def scrape(base) -> dict:
    text = requests.get(f"{base}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples, name, **labels) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


@pytest.fixture
def stack(app, simulator, make_customer, tmp_path):
    """gunicorn (APP_ENV=production, 2 workers) and one RQ worker sharing a metrics directory."""
    port = closed_port()
    base = f"http://127.0.0.1:{port}"
    requests.post(f"{simulator.url}/_sim/receivers/ops", json={"secret": "whsec_b3BzIDAxMjM0NTY3ODlhYmNkZWY="}, timeout=5)
    account = make_customer(tier="business", credits=100, webhook_url=f"{simulator.url}/_sim/hooks/ops",
                            webhook_secret="whsec_b3BzIDAxMjM0NTY3ODlhYmNkZWY=")
    instance = tmp_path / "instance"
    web_env = service_env(app, simulator.url, instance, APP_ENV="production", SECRET_KEY=STRONG_SECRET,
                          PUBLIC_BASE_URL=base, GUNICORN_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY=2,
                          GUNICORN_THREADS=2)
    # The worker delivers to the simulator on loopback, which production's webhook guard refuses:
    # it runs as tests do, with JSON logs and the key that encrypted the webhook secret.
    worker_env = service_env(app, simulator.url, instance, LOG_FORMAT="json", ENGINE_POLL_SECONDS=1,
                             RECOVERY_INTERVAL_SECONDS=1)
    logs = {name: tmp_path / f"{name}.log" for name in ("web", "worker")}
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(logs[name], "w"))
             for name, cmd, env in (
                 ("web", [str(BIN / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"], web_env),
                 ("worker", [str(BIN / "python"), "-m", "workers"], worker_env))]
    try:
        wait_until(lambda: requests.get(f"{base}/readyz", timeout=2).status_code == 200, 30,
                   "readyz")
        yield base, account, simulator, logs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.processes
def test_logs_are_json_lines_and_metrics_cover_the_dashboard_and_alerts(stack, make_customer):
    base, account, simulator, logs = stack
    headers = {**account.headers, "X-Request-Id": "req-ops-observability"}
    done = requests.post(f"{base}/api/v1/scan", json={"target": "jane.doe@example.com"}, headers=headers, timeout=10)
    failing = requests.post(f"{base}/api/v1/scan", json={"target": "+14155550000"}, headers=account.headers,
                            timeout=10)  # the simulator fails targets ending in 0000
    assert done.status_code == 202 and failing.status_code == 202, (done.text, failing.text)
    assert done.json()["poll_url"].startswith(base)  # PUBLIC_BASE_URL, not the Host header
    assert requests.post(f"{base}/api/v1/scan", json={"target": "x"}, headers=account.headers,
                         timeout=10).status_code == 400
    assert requests.get(f"{base}/nothing-here", timeout=10).status_code == 404
    requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "down"}, timeout=5)
    try:
        refused = requests.post(f"{base}/api/v1/scan", json={"target": "joe@example.com"}, headers=account.headers,
                                timeout=10)
    finally:
        requests.post(f"{simulator.url}/_sim/engine/mode", json={"mode": "up"}, timeout=5)
    assert refused.status_code == 502
    limited = make_customer(tier="business", credits=10, hour=1)
    answers = [requests.post(f"{base}/api/v1/scan", json={"target": "ops_user", "kind": "username"},
                             headers=limited.headers, timeout=10).status_code for _ in range(2)]
    assert answers == [202, 429]

    def finished():
        states = [requests.get(f"{base}/api/v1/scan/{scan.json()['scan_id']}", headers=account.headers,
                               timeout=5).json()["status"] for scan in (done, failing)]
        return states == ["completed", "failed"]
    wait_until(finished, 60, "both scans to finish")
    wait_until(lambda: total(scrape(base), "scan_api_webhook_attempts_total") >= 2
               and total(scrape(base), "scan_api_recovery_sweeps_total") >= 1, 30, "two webhook attempts and a sweep")
    samples = scrape(base)

    # Every metric the dashboard and the alerts use exists.
    present = {name for name, _ in samples} | {name[:-len(s)] for name, _ in samples for s in SUFFIXES
                                               if name.endswith(s)}
    missing = named_metrics() - present
    assert not missing, f"named in ops/ but absent from /metrics: {sorted(missing)}"
    # ... and the figures are the traffic's, added up across processes.
    assert total(samples, "scan_api_http_requests_total", method="POST", route="/api/v1/scan", status="202") == 3
    assert total(samples, "scan_api_http_requests_total", route="unmatched", status="404") == 1
    assert total(samples, "scan_api_http_requests_total", status="502") == 1
    assert total(samples, "scan_api_scans_created_total", kind="email", tier="business") == 1
    assert total(samples, "scan_api_scans_finished_total", kind="email", status="completed") == 1
    assert total(samples, "scan_api_rate_limited_total", code="rate_limit_hour") == 1
    assert total(samples, "scan_api_scans_failed_total", kind="phone", reason="engine_failed") == 1
    assert total(samples, "scan_engine_call_errors_total", call="investigations", error="http_5xx") >= 1
    assert total(samples, "scan_api_webhook_attempts_total", outcome="succeeded", reason="http_2xx") == 2
    assert total(samples, "scan_api_webhook_delivery_seconds_count", event="scan.completed") == 1
    assert total(samples, "scan_api_webhook_delivery_seconds_count", event="scan.failed") == 1
    assert total(samples, "scan_api_queue_oldest_job_age_seconds", queue="engine") >= 0

    # Logs: every stderr line of gunicorn is JSON; one line per request with its fields.
    web = [json.loads(line) for line in logs["web"].read_text().splitlines()]  # raises on any non-JSON line
    assert any(e.get("logger") == "gunicorn.error" and "Listening at" in e["message"] for e in web)
    requests_logged = [e for e in web if e.get("logger") == "app.access"]
    mine = [e for e in requests_logged if e.get("request_id") == "req-ops-observability"]
    assert len(mine) == 1
    assert {k: mine[0][k] for k in ("method", "route", "status", "customer_id")} == {
        "method": "POST", "route": "/api/v1/scan", "status": 202, "customer_id": account.id}
    assert mine[0]["duration_ms"] > 0 and mine[0]["bytes"] == len(done.content)
    polls = [e for e in requests_logged if e["route"] == "/api/v1/scan/<scan_id:scan_id>"]
    assert polls and all(e["status"] == 200 and e["method"] == "GET" for e in polls)
    assert account.api_key not in logs["web"].read_text()
    worker = [json.loads(line) for line in logs["worker"].read_text().splitlines()]
    assert any(e.get("scan_id") == done.json()["scan_id"] for e in worker)
