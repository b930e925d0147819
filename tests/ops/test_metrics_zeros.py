"""A new deployment's dashboard shows zeros, not "No data": every series whose labels are known in
advance is in /metrics, at 0, before anything happened. The lists behind it match the services'."""
import re

from app.billing import limits, quotas
from app.events import kinds
from app.plumbing import metrics
from app.targets import identity as targets
from workers.webhook_jobs import REQUEST_ERRORS


def test_a_fresh_process_serves_the_known_series_at_zero(client):
    """In a new process (as a new deployment), before anything happened; and this app's /metrics
    serves the same series (their values there are whatever earlier tests counted)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    fresh = subprocess.run([sys.executable, "-c", "from prometheus_client import generate_latest; "
                            "import app.plumbing.metrics; print(generate_latest().decode())"],
                           capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    served = client.get("/metrics").get_data(as_text=True)  # the test client is loopback
    for series in ('scan_api_scans_created_total{kind="phone",tier="enterprise"}',
                   'scan_api_scans_failed_total{kind="email",reason="engine_timeout"}',
                   'scan_api_rate_limited_total{code="rate_limit_day"}',
                   'scan_api_webhook_attempts_total{outcome="failed",reason="timeout"}',
                   'scan_api_finding_feedback_total{source="none",verdict="false_positive"}',
                   'scan_api_engine_callbacks_refused_total{reason="bad_signature"}'):
        assert f"{series} 0.0" in fresh, series
        assert f"{series} " in served, series
    # Every event kind's, the other domains' too: the app hands the registry's names to the metrics.
    for event in kinds.delivery_events():
        assert f'scan_api_webhook_delivery_seconds_count{{event="{event}"}} ' in served, event


def test_the_label_lists_are_the_services_own():
    assert metrics.KINDS == targets.KINDS
    assert set(metrics.TIERS) == set(limits.TIER_LIMITS)
    assert {name for _, name in REQUEST_ERRORS} <= set(metrics.ATTEMPT_FAILURES)
    codes = set(re.findall(r'"(rate_limit_[a-z]+)"', open(quotas.__file__).read()))
    assert codes == set(metrics.RATE_LIMIT_CODES)
    from app.tracking.callbacks import REFUSAL_REASONS
    assert metrics.CALLBACK_REFUSALS == REFUSAL_REASONS
    from app.scans.models import FEEDBACK_VERDICTS
    assert metrics.FEEDBACK_VERDICTS == FEEDBACK_VERDICTS
