"""Every example of docs/client.md runs against the served API: the Python blocks as they are, the shell
blocks' ``scan-api`` lines through the command line's ``main`` (``pip``/``export`` lines: test_install.py
and the environment given here). Waits run the workers' jobs on frozen time instead of sleeping."""
import base64
import hashlib
import hmac
import io
import json
import os
import re
import shlex
import time
import uuid
from pathlib import Path

import pytest
import requests
import scan_api_client.client as client_module
from freezegun import freeze_time
from scan_api_client.cli import main

from app.extensions import db
from tests import factories
from tests.client.held import HeldOnFrozenTime

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
HOOK_SECRET = "whsec_ZG9jcyBleGFtcGxlcyByZWNlaXZlciBzZWNyZXQgMDE="
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.DOTALL)


def blocks(language):
    return [code for lang, code in BLOCK.findall(DOC.read_text()) if lang == language]


@pytest.fixture
def docs_env(served_app, make_customer, simulator, jobs, monkeypatch, tmp_path):
    """A live and a test key of one customer, both with a webhook URL whose receiver answers 500, so the
    deliveries examples find failed deliveries to redeliver (the tests below run without retries)."""
    hook = f"docs-{uuid.uuid4().hex[:12]}"
    requests.post(f"{simulator.url}/_sim/receivers/{hook}", json={"secret": HOOK_SECRET, "responses": [500]},
                  timeout=5).raise_for_status()
    url = f"{simulator.url}/_sim/hooks/{hook}"
    account = make_customer(webhook_url=url, webhook_secret=HOOK_SECRET)
    with db.connection_context():
        test = factories.sandbox_key(account, webhook_url=url, webhook_secret=HOOK_SECRET)
    env = {"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key, "SCAN_API_TEST_KEY": test.api_key}
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        def sleep(seconds):
            frozen.tick(seconds)
            jobs.run()
        monkeypatch.setattr(client_module, "_default_sleep", sleep)
        HeldOnFrozenTime(frozen, jobs).patch(monkeypatch)  # the server's hold of the reads that wait
        yield env


def test_the_doc_has_examples_of_every_topic():
    text = DOC.read_text()
    for topic in ("## Install", "## Your first scan", "## Waiting", "## Bulk from a CSV", "## Listing", "## Watches",
                  "## Webhooks", "### Deliveries", "## Test mode", "## Errors", "## Checking a result"):
        assert topic in text
    assert len(blocks("python")) >= 6 and not re.search(r"\bD\d+\b|§", text)


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_every_python_example_runs(docs_env, capsys):
    for index, code in enumerate(blocks("python")):
        namespace = {"__name__": f"docs_example_{index}"}
        exec(compile(code, f"docs/client.md python block {index}", "exec"), namespace)
        if "receiver" in namespace:  # the webhook receiver: genuine, forged and stale deliveries
            app, secret = namespace["receiver"], namespace["SECRETS"][0]
            body = json.dumps({"event": "scan.completed", "scan_id": "scn_1", "status": "completed"}).encode()
            at = str(int(time.time()))
            mac = hmac.new(base64.b64decode(secret[6:]), f"dlv_1.{at}.".encode() + body, hashlib.sha256).digest()
            headers = {"webhook-id": "dlv_1", "webhook-timestamp": at,
                       "webhook-signature": "v1," + base64.b64encode(mac).decode(), "Content-Type": "application/json"}
            assert app.test_client().post("/hooks/scan", data=body, headers=headers).status_code == 204
            assert app.test_client().post("/hooks/scan", data=body + b" ", headers=headers).status_code == 400
    out = capsys.readouterr().out
    assert "completed" in out and "target_too_short" in out and "invalid_token" in out and "credits left" in out
    assert "redelivered dlv_" in out  # the deliveries example found the failed deliveries and sent them again
    assert "live key: False" in out and "failed engine_failed False" in out and " failed False" in out
    assert "first scan completed of watch wch_" in out and "watch ended" in out


@pytest.mark.config(WEBHOOK_RETRY_SCHEDULE=())
def test_every_command_line_example_runs(docs_env, tmp_path):
    Path("targets.csv").write_text("target,kind\njane.doe@example.com,email\n+447700900123,\nab,\n")
    ran = 0
    for code in blocks("bash"):
        for line in code.splitlines():
            line = line.split("  #")[0].strip()
            if not line or line.startswith(("#", "export ", "pip ")):
                continue
            argv = shlex.split(os.path.expandvars(line))
            assert argv[0] == "scan-api", line
            target = None
            if ">" in argv:
                at = argv.index(">")
                argv, target = argv[:at], argv[at + 1]
            out, err = io.StringIO(), io.StringIO()
            code_ = main(argv[1:], stdout=out, stderr=err, env=docs_env)
            assert code_ == 0, (line, err.getvalue())
            if target:
                Path(target).write_text(out.getvalue())
            ran += 1
    assert ran >= 6
    assert len(Path("results.csv").read_text().splitlines()) == 4  # header + one row per input line


def listing_example() -> str:
    [code] = [code for code in blocks("python") if "iter_scans(status=\"completed\"" in code]
    return code


def test_the_listing_example_shows_erased_scans(docs_env, capsys):
    from scan_api_client import ScanClient
    api = ScanClient(docs_env["SCAN_API_URL"], docs_env["SCAN_API_KEY"])
    kept, gone = (api.wait(api.create(target)) for target in ("kept.jane@example.com", "gone.jane@example.com"))
    api.erase(gone.scan_id)
    capsys.readouterr()
    exec(compile(listing_example(), "docs/client.md listing example", "exec"), {"__name__": "docs_listing"})
    lines = capsys.readouterr().out.splitlines()
    assert any(gone.scan_id in line and "erased at" in line for line in lines), lines
    assert any(kept.scan_id in line and "kept.jane@example.com" in line and kept.result.risk.band in line
               for line in lines), lines


@pytest.mark.parametrize("doc", ["README.md", "docs/webhooks.md", "docs/client.md"])
def test_every_python_example_names_only_what_it_defines_or_imports(doc, tmp_path):
    """Examples not run against the API (the receivers of docs/webhooks.md) are at least whole programs:
    the thin-body receiver once called a function it never defined."""
    import subprocess
    import sys
    text = (DOC.parents[1] / doc).read_text()
    for index, code in enumerate(re.findall(r"```python\n(.*?)```", text, re.DOTALL)):
        (tmp_path / f"block_{index}.py").write_text(code)
    checked = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F822,F823",
                              str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("doc", ["README.md", "docs/webhooks.md"])  # client.md's say SCAN_API_KEY, the client's
def test_the_shell_examples_call_the_key_by_one_name(doc):
    """curl examples say $KEY (README's first example sets it), never another name for the same key."""
    text = (DOC.parents[1] / doc).read_text()
    assert re.findall(r"Bearer \$\{?(\w+)", text) and set(re.findall(r"Bearer \$\{?(\w+)", text)) == {"KEY"}
