"""Every example of docs/client.md runs against the served API: the Python blocks as they are, the shell
blocks' ``scan-api`` lines through the command line's ``main`` (``pip``/``export`` lines: test_install.py
and the environment given here). Waits run the workers' jobs on frozen time instead of sleeping."""
import base64
import hashlib
import hmac
import io
import json
import re
import shlex
import time
from pathlib import Path

import pytest
from freezegun import freeze_time

import scan_api_client.client as client_module
from scan_api_client.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.S)


def blocks(language):
    return [code for lang, code in BLOCK.findall(DOC.read_text()) if lang == language]


@pytest.fixture
def docs_env(served_app, account, jobs, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCAN_API_URL", served_app.url)
    monkeypatch.setenv("SCAN_API_KEY", account.api_key)
    with freeze_time("2026-11-21 12:00:00") as frozen:
        def sleep(seconds):
            frozen.tick(seconds)
            jobs.run()
        monkeypatch.setattr(client_module, "_default_sleep", sleep)
        yield {"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key}


def test_the_doc_has_examples_of_every_topic():
    text = DOC.read_text()
    for topic in ("## Install", "## Your first scan", "## Waiting", "## Bulk from a CSV", "## Listing",
                  "## Webhooks", "## Test mode", "## Errors"):
        assert topic in text
    assert len(blocks("python")) >= 6 and not re.search(r"\bD\d+\b|§", text)


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


def test_every_command_line_example_runs(docs_env, tmp_path):
    Path("targets.csv").write_text("target,kind\njane.doe@example.com,email\n+447700900123,\nab,\n")
    ran = 0
    for code in blocks("bash"):
        for line in code.splitlines():
            line = line.split("  #")[0].strip()
            if not line or line.startswith(("#", "export ", "pip ")):
                continue
            argv = shlex.split(line)
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
