"""``scan-api`` run in-process through ``main(argv, stdin=, stdout=, stderr=, ...)``
against the real API on a real HTTP port; waits run RQ jobs on frozen time inside ``sleep``."""
import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from freezegun import freeze_time
from scan_api_client.cli import main, read_targets

from app.extensions import db
from app.tracking import states
from tests.api.helpers import balance, scans_of
from tests.client.held import HeldOnFrozenTime

START = "2026-11-21 12:00:00"
CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"
PLAIN_PROGRESS = re.compile(r"^\[\d\d:\d\d\] (scn|blk)_\S+: queued \d+  running \d+  completed \d+  failed \d+")


class Tty(io.StringIO):
    def isatty(self):
        return True


class Cli:
    def __init__(self, served_app, account=None):
        self.env = {"SCAN_API_URL": served_app.url}
        if account is not None:
            self.env["SCAN_API_KEY"] = account.api_key

    def __call__(self, *argv, stdin="", frozen=None, jobs=None, stderr=None, env=None):
        out, err = io.StringIO(), stderr if stderr is not None else io.StringIO()
        self.sleeps = []

        def sleep(seconds):
            self.sleeps.append(seconds)
            if frozen is not None:
                frozen.tick(seconds)
            if jobs is not None:
                jobs.run()

        # While time is frozen, the server's hold of a read that waits moves the world on (tests/client/held.py).
        held = HeldOnFrozenTime(frozen, jobs) if frozen is not None and jobs is not None else None
        self.asked = held.asked if held is not None else []
        code = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err,
                    env=self.env if env is None else env, sleep=sleep,
                    session=held.session() if held is not None else None)
        return code, out.getvalue(), err.getvalue()


@pytest.fixture
def cli(served_app, account):
    return Cli(served_app, account)


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


# --- scan ---------------------------------------------------------------------------------

def test_scan_wait_json_prints_the_completed_scan_and_progress_on_stderr(cli, jobs, account):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "jane@example.com", "--wait", "--format", "json", frozen=frozen, jobs=jobs)
    assert code == 0, err
    scan = json.loads(out)  # stdout is the JSON document and nothing else
    assert scan["status"] == "completed" and scan["target"] == "jane@example.com" and "result" in scan
    lines = err.splitlines()
    assert lines and all(PLAIN_PROGRESS.match(line) for line in lines), err
    assert "completed 1" in lines[-1] and "(1/1 done)" in lines[-1]  # a line per read, the last one final
    # The server held each read (up to 60 s): no poll every 12 s, each paid for.
    assert cli.sleeps == [] and cli.asked and set(cli.asked) == {60}
    assert len(scans_of(account)) == 1
    assert balance(account) == 100 - 1 - len(cli.asked)  # the creation and one credit per read


def test_scan_without_wait_in_csv(cli):
    code, out, err = cli("scan", "+44 7700 900123", "--format", "csv")
    assert code == 0 and err == ""
    [row] = rows(out)
    assert row["scan_id"].startswith("scn_") and row["kind"] == "phone" and row["status"] == "queued"


def test_scan_wait_to_failed_is_still_exit_0_with_the_failure_in_csv(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "fail.me@example.com", "--wait", "--format", "csv", "--poll-interval", "10",
                             frozen=frozen, jobs=jobs)
    assert code == 0, err
    [row] = rows(out)
    assert (row["status"], row["error"]) == ("failed", "engine_failed") and row["finished_at"]
    assert cli.sleeps == [] and set(cli.asked) == {60}


def test_progress_is_a_redrawn_bar_on_a_terminal(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "jane@example.com", "--wait", stderr=Tty(), frozen=frozen, jobs=jobs)
    assert code == 0
    # tqdm's bar, redrawn in place (\r) and left on its own line at the end
    assert err.count("\r") >= len(cli.asked) and err.endswith("\n") and err.count("\n") == 1
    final = err.rstrip("\n").rsplit("\r", 1)[-1]
    assert final.startswith("scn_") and "1/1" in final and "completed 1" in final and "#" * 24 in final
    assert json.loads(out)["status"] == "completed"


def test_wait_timeout_exits_3_with_the_last_state(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "hang.me@example.com", "--wait", "--timeout", "30", "--poll-interval", "10",
                             frozen=frozen, jobs=jobs)
    assert code == 3
    assert json.loads(out)["status"] in {"queued", "running"}
    assert "not finished after 30 s" in err.splitlines()[-1] and "get scn_" in err
    assert cli.asked == [30] and cli.sleeps == []  # one read held 30 s, never past the timeout


# --- bulk ---------------------------------------------------------------------------------

def test_bulk_from_a_csv_file_with_header(cli, tmp_path, account):
    path = tmp_path / "targets.csv"
    path.write_text("target,kind\njane@example.com,email\n+14155552671,phone\n\nab,\njanedoe,username\n")
    code, out, err = cli("bulk", str(path))
    assert code == 0, err
    body = json.loads(out)
    assert (body["total"], body["queued"]) == (4, 3)
    assert [(r["index"], r["target"], r["error"]) for r in body["rejected"]] == [(2, "ab", "target_too_short")]
    assert [(s["target"], s["kind"]) for s in body["scans"]] == [
        ("jane@example.com", "email"), ("+14155552671", "phone"), ("janedoe", "username")]
    assert balance(account) == 97


def test_bulk_from_stdin_waits_and_writes_csv_in_input_order(cli, jobs):
    stdin = "a.person@example.com\nfail.x@example.com\nzz\n@janedoe,username\n"
    with freeze_time(START) as frozen:
        code, out, err = cli("bulk", "-", "--wait", "--format", "csv", stdin=stdin, frozen=frozen, jobs=jobs)
    assert code == 0, err
    table = rows(out)
    assert [(r["target"], r["status"]) for r in table] == [
        ("a.person@example.com", "completed"), ("fail.x@example.com", "failed"), ("zz", "rejected"),
        ("janedoe", "completed")]
    assert table[0]["risk_band"] and table[0]["scan_id"].startswith("scn_")
    assert table[1]["error"] == "engine_failed" and table[2]["error"] == "target_too_short"
    # Batch scans carry their completed_at / failed_at, so finished_at is filled like a single scan's.
    assert [bool(r["finished_at"]) for r in table] == [True, True, False, True]
    assert table[0]["finished_at"].startswith(START[:10].replace(" ", "T")) and table[0]["finished_at"].endswith("Z")
    lines = err.splitlines()
    assert lines and all(PLAIN_PROGRESS.match(line) for line in lines), err
    assert "completed 2  failed 1  (3/3 done)" in lines[-1]


def test_bulk_wait_json_adds_the_rejected_targets_to_the_final_batch(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, _ = cli("bulk", "-", "--wait", stdin="target\njane@example.com\nab\n", frozen=frozen, jobs=jobs)
    assert code == 0
    body = json.loads(out)
    assert body["all_done"] is True and body["completed"] == 1 and body["rejected"][0]["index"] == 1


def test_bulk_input_errors_are_usage_errors(cli, tmp_path, account):
    assert cli("bulk", str(tmp_path / "missing.csv"))[0] == 2
    code, out, err = cli("bulk", "-", stdin="\n# nothing here\n")
    assert (code, out) == (2, "") and "no targets" in err
    code, _, err = cli("bulk", "-", stdin="".join(f"u{i}@example.com\n" for i in range(101)))
    assert code == 2 and "at most 100" in err
    assert balance(account) == 100  # nothing was sent


def test_read_targets_formats():
    assert read_targets("\ufefftarget,kind\r\njane@example.com,email\r\n+14155552671,\r\n") == [
        {"target": "jane@example.com", "kind": "email"}, {"target": "+14155552671"}]
    assert read_targets("kind,target\nusername,janedoe\n") == [{"target": "janedoe", "kind": "username"}]
    assert read_targets("jane@example.com\n\n# comment\njanedoe,username\n") == [
        {"target": "jane@example.com"}, {"target": "janedoe", "kind": "username"}]


# --- get ----------------------------------------------------------------------------------

def test_get_and_get_bulk(cli):
    scan_id = json.loads(cli("scan", "jane@example.com")[1])["scan_id"]
    code, out, _ = cli("get", scan_id)
    assert code == 0 and json.loads(out)["scan_id"] == scan_id
    bulk = json.loads(cli("bulk", "-", stdin="john@example.com\n")[1])
    code, out, _ = cli("get-bulk", bulk["bulk_id"], "--format", "csv")
    assert code == 0 and [r["target"] for r in rows(out)] == ["john@example.com"]


# --- errors and exit codes -------------------------------------------------------------------

def test_402_exits_1_with_a_clear_line(served_app, make_customer):
    broke = make_customer(credits=0)
    code, out, err = Cli(served_app, broke)("scan", "jane@example.com", "--wait")
    assert (code, out) == (1, "")
    assert err.startswith("error: your balance is below 1 credit: ask your account manager to add credits")
    assert "[insufficient_balance, HTTP 402, request req_" in err and err.count("\n") == 1


def test_bad_key_exits_1_and_flags_override_the_environment(served_app, account):
    cli = Cli(served_app, account)
    code, out, err = cli("--key", "service_live_wrongwrongwrongwrongwrongwrong00", "get", "scn_x")
    assert (code, out) == (1, "") and "unknown or revoked" in err and "invalid_token" in err
    code, _, err = cli("get", "scn_x", "--key", "not a key")  # flags after the sub-command too
    assert code == 1 and "unauthorized" in err
    code, _, err = cli("--url", "http://127.0.0.1:9", "get", "scn_x")
    assert code == 1 and "cannot reach http://127.0.0.1:9" in err and cli.sleeps == [1, 2, 4]


def test_other_api_errors_have_their_own_lines(served_app, make_customer):
    pro = Cli(served_app, make_customer(tier="pro"))
    code, _, err = pro("bulk", "-", stdin="jane@example.com\n")
    assert code == 1 and "Business or Enterprise tier" in err and "bulk_not_allowed" in err
    code, _, err = pro("get", "scn_doesnotexist")
    assert code == 1 and "no scan, batch, delivery, endpoint or watch has that id" in err
    code, _, err = pro("scan", "ab")
    assert code == 1 and "at least 3 characters" in err and "target_too_short" in err
    limited = Cli(served_app, make_customer(tier="pro", hour=1, inflight=5))
    assert limited("scan", "jane@example.com")[0] == 0
    code, _, err = limited("scan", "john@example.com")
    assert code == 1 and re.search(r"hourly scan quota used up: retry in \d+ s", err)


def test_usage_errors_exit_2(served_app, account):
    cli = Cli(served_app, account)
    code, out, err = cli("scan", "jane@example.com", env={"SCAN_API_URL": served_app.url})
    assert (code, out) == (2, "") and "SCAN_API_KEY" in err
    code, out, err = cli("frobnicate")
    assert (code, out) == (2, "") and "usage:" in err
    assert cli("scan")[0] == 2
    assert cli("scan", "jane@example.com", "--format", "xml")[0] == 2
    assert cli("scan", "jane@example.com", "--wait", "--poll-interval", "0")[0] == 2
    code, out, _ = cli("--help")
    assert code == 0 and "scan" in out and "get-bulk" in out
    assert scans_of(account) == []


# --- re-run and feedback ----------------------------------------------------------------------

def test_rerun_a_partial_scan_and_give_feedback_from_the_command_line(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "partial.jane@example.com", "--wait", frozen=frozen, jobs=jobs)
        first = json.loads(out)
        assert code == 0 and first["result"]["partial"] is True
        code, out, err = cli("rerun", first["scan_id"], "--wait", frozen=frozen, jobs=jobs)
        assert code == 0, err
        second = json.loads(out)
        assert second["rerun_of"] == first["scan_id"] and second["result"]["partial"] is False
        code, out, err = cli("rerun", second["scan_id"])
        assert code == 1 and "nothing to re-run" in err and "nothing_to_rerun, HTTP 409" in err
        finding = first["result"]["findings"][0]
        code, out, err = cli("feedback", first["scan_id"], finding["id"], "false_positive", "--note", "not her",
                             "--format", "csv")
    assert code == 0, err
    [row] = rows(out)
    assert (row["finding_id"], row["path"], row["verdict"], row["note"]) == \
        (finding["id"], finding["path"], "false_positive", "not her")


def test_the_scans_csv_says_partial_coverage_and_erasure(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "partial.jane@example.com", "--wait", "--format", "csv", frozen=frozen, jobs=jobs)
        assert code == 0, err
        [partial] = rows(out)
        code, out, err = cli("rerun", partial["scan_id"], "--wait", "--format", "csv", frozen=frozen, jobs=jobs)
        assert code == 0, err
        [whole] = rows(out)
        assert cli("erase", partial["scan_id"])[0] == 0
        code, out, err = cli("list", "--status", "completed", "--format", "csv")
    assert code == 0, err
    assert (partial["partial"], whole["partial"], whole["coverage"]) == ("true", "false", "1.0")
    assert 0 < float(partial["coverage"]) < 1 and partial["erased_at"] == ""
    listed = {row["scan_id"]: row for row in rows(out)}
    assert listed[whole["scan_id"]] == {**whole, "finished_at": listed[whole["scan_id"]]["finished_at"]}
    erased = listed[partial["scan_id"]]
    assert erased["erased_at"].endswith("Z") and erased["status"] == "completed"
    assert (erased["target"], erased["risk_band"], erased["partial"], erased["coverage"]) == ("", "", "", "")


def test_feedback_on_an_unknown_finding_names_it(cli, jobs):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "jane@example.com", "--wait", frozen=frozen, jobs=jobs)
        scan_id = json.loads(out)["scan_id"]
        code, out, err = cli("feedback", scan_id, "fnd_not_in_this_result", "confirmed")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "fnd_not_in_this_result" in err and scan_id in err
    assert "not_found, HTTP 404" in err and "Traceback" not in err


# --- CSV cells a spreadsheet would run --------------------------------------------------------

def test_csv_cell_quotes_text_a_spreadsheet_would_run_and_nothing_else():
    from scan_api_client.cli import csv_cell
    assert [csv_cell(v) for v in ("=1+2", "+447700900123", "-2", "@SUM(A1)", "\tx", "\rx")] == \
        ["'=1+2", "'+447700900123", "'-2", "'@SUM(A1)", "'\tx", "'\rx"]
    assert [csv_cell(v) for v in ("jane@example.com", "", None, -2, 1.5, True)] == \
        ["jane@example.com", "", None, -2, 1.5, True]


def test_list_csv_quotes_a_target_that_starts_a_formula(cli):
    code, out, err = cli("scan", "=1+2@example.com", "--case-ref", "=HYPERLINK(\"x\")", "--format", "json")
    assert code == 0, err
    code, out, err = cli("list", "--format", "csv")
    assert code == 0, err
    [row] = rows(out)
    assert row["target"] == "'=1+2@example.com"


@pytest.mark.processes
def test_output_into_a_closed_pipe_ends_quietly(served_app, account):
    """`scan-api list | head` ended with a BrokenPipeError traceback when head had read enough (and
    "Exception ignored" at exit): now nothing is written after the reader went, status 141 as a
    command stopped by SIGPIPE, stderr empty."""
    scan_id = main_json(served_app, account, "scan", "jane@example.com")["scan_id"]
    env = dict(os.environ, PYTHONPATH=str(CLIENT_DIR), SCAN_API_URL=served_app.url, SCAN_API_KEY=account.api_key)
    for argv in (["get", scan_id], ["--help"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the answer comes
        try:
            done = subprocess.run([sys.executable, "-m", "scan_api_client", *argv], stdout=write_end,
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, timeout=60, text=True)
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (141, ""), argv


def main_json(served_app, account, *argv):
    out, err = io.StringIO(), io.StringIO()
    assert main(list(argv), stdout=out, stderr=err, env={"SCAN_API_URL": served_app.url,
                                                           "SCAN_API_KEY": account.api_key}) == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_the_wait_url_option_and_setting_send_the_reads_that_wait_there(served_app, account):
    """--wait-url (SCAN_API_WAIT_URL): where the reads that wait go, e.g. make run's API_PORT + 1."""
    sent = []

    class Recording(requests.Session):
        def request(self, method, url, *args, **kwargs):
            sent.append((url.split("/api/v1")[0], (kwargs.get("params") or {}).get("wait")))
            return super().request(method, url, *args, **kwargs)

    scan_id = main_json(served_app, account, "scan", "fail.me@example.com")["scan_id"]
    with db.connection_context():
        states.fail(scan_id, "engine_failed", "no")
    elsewhere = "http://127.0.0.1:9"  # nothing there: only the reads that wait may go there
    for argv, env in ((["get", scan_id, "--wait-url", elsewhere], {}), (["get", scan_id], {"SCAN_API_WAIT_URL": elsewhere})):
        out, err = io.StringIO(), io.StringIO()
        assert main(argv, stdout=out, stderr=err, session=Recording(),
                    env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key, **env}) == 0, err.getvalue()
    assert sent == [(served_app.url, None), (served_app.url, None)]
    code = main(["scan", "x@example.com", "--wait", "--wait-url", elsewhere, "--timeout", "5"], stdout=io.StringIO(),
                stderr=(err := io.StringIO()), session=Recording(), sleep=lambda s: None,
                env={"SCAN_API_URL": served_app.url, "SCAN_API_KEY": account.api_key})
    assert code == 1 and "cannot reach http://127.0.0.1:9" in err.getvalue()
    assert sent[-1] == (elsewhere, 5)  # the read that waits went to the wait URL


def test_sources_lists_them_as_json_and_csv(cli):
    from tests.client.test_client import _seed_sources
    _seed_sources()
    code, out, err = cli("sources", "--format", "json")
    assert code == 0, err
    assert [s["id"] for s in json.loads(out)["data"]] == ["github"]
    code, out, err = cli("sources", "--format", "csv")
    assert code == 0, err
    assert out.splitlines()[0].startswith("id,name,status") and out.splitlines()[1].startswith("github,GitHub,healthy")


def test_scan_and_get_take_min_confidence_and_required(cli, jobs, account):
    with freeze_time(START) as frozen:
        code, out, err = cli("scan", "jane@example.com", "--min-confidence", "0.5", "--required",
                             "profiles.verified OR breaches", "--wait", frozen=frozen, jobs=jobs)
        assert code == 0, err
        scan = json.loads(out)
        code, again, err = cli("get", scan["scan_id"], "--min-confidence", "0")
    assert code == 0, err
    assert (scan["min_confidence"], scan["required"]) == (0.5, "profiles.verified OR breaches")
    assert scan["result"]["filtered"]["min_confidence"] == 0.5
    assert json.loads(again)["result"]["filtered"] == {"min_confidence": 0.0, "findings_left_out": 0}
    code, out, err = cli("scan", "jane@example.com", "--required", "breaches OR (emails")
    assert code == 1 and "invalid_required" in err and "position" in err
