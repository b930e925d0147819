"""``scan-api``: scan targets from a shell or a script.

    export SCAN_API_KEY=service_live_...   SCAN_API_URL=https://api.example.com
    scan-api scan jane.doe@example.com --wait
    scan-api bulk targets.csv --wait --format csv > results.csv
    scan-api get scn_...        scan-api get-bulk blk_...
    scan-api list --status completed --all        scan-api deliveries --status failed
    scan-api redeliver dlv_...                    scan-api activity --target jane.doe@example.com
    scan-api endpoints list                       scan-api endpoints create https://hooks.example.com/a
    scan-api watches create jane.doe@example.com --interval weekly
    scan-api watches import people.csv --interval weekly > report.json

stdout carries only the JSON or CSV answer; progress and errors go to stderr (a live bar
when stderr is a terminal, a plain line per change otherwise). ``--wait`` lets the server hold
each read until the scan (the batch) is final, up to 60 s a read; those reads and ``events
--follow`` go to ``--wait-url`` (``SCAN_API_WAIT_URL``) when given. Exit codes: 0 done,
1 the API answered an error (or could not be reached), 2 usage error, 3 ``--wait`` timed out,
141 the reader of stdout went away (``scan-api list | head``: nothing more is written, quietly).

``main(argv, stdin=, stdout=, stderr=, env=, sleep=, clock=, session=)`` runs in-process and
returns the exit code, so tests and other programs can call it without a subprocess.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TextIO

from scan_api_client.client import DEFAULT_BASE_URL, MAX_BULK_TARGETS, UNCHANGED, ScanClient
from scan_api_client.errors import ApiError, FindingNotFound, TransportError, WaitTimeout
from scan_api_client.models import WATCH_INTERVALS, WATCH_STATUSES
from scan_api_client.progress import ProgressBar

EXIT_OK, EXIT_API_ERROR, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command stopped by a closed pipe
KEY_ENV, URL_ENV, WAIT_URL_ENV = "SCAN_API_KEY", "SCAN_API_URL", "SCAN_API_WAIT_URL"
CSV_FIELDS = ["scan_id", "target", "kind", "status", "risk_score", "risk_band", "findings", "breaches", "partial",
              "coverage", "finished_at", "erased_at", "error", "message"]
DELIVERY_CSV_FIELDS = ["delivery_id", "endpoint_id", "event", "scan_id", "status", "attempts", "last_http_status",
                       "last_error", "next_attempt_at"]
ENDPOINT_CSV_FIELDS = ["endpoint_id", "url", "events", "payload", "enabled", "description", "disabled_at",
                       "secret_rotation_ends_at", "secret"]
ACCOUNT_CSV_FIELDS = ["customer_id", "tier", "balance", "usage_inflight", "usage_hour", "usage_day", "limit_inflight",
                      "limit_hour", "limit_day", "key_id", "scopes", "expires_at", "allowed_ips"]

# One line per error code: what happened and what to do about it. {retry} is "in N s" or "later".
MESSAGES = {
    "unauthorized": "no valid Authorization header was sent: set SCAN_API_KEY or pass --key",
    "invalid_token": "the API key is unknown or revoked: check SCAN_API_KEY / --key",
    "key_expired": "the API key has expired: ask for a new one (or for a later expiry)",
    "ip_not_allowed": "the API key may not be used from this address (its IP allowlist): nothing was charged",
    "insufficient_balance": "your balance is below 1 credit: ask your account manager to add credits",
    "nothing_to_rerun": "nothing to re-run: the scan is not completed, or every source answered (nothing charged)",
    "forbidden": "that scan or batch belongs to another customer",
    "bulk_not_allowed": "bulk scans need the Business or Enterprise tier: scan targets one by one, "
                        "or ask your account manager to upgrade",
    "target_suppressed": "the person this target belongs to has opted out of lookups: nothing was charged",
    "not_found": "no scan, batch, delivery, endpoint or watch has that id",
    "watch_limit_reached": "your account has as many watches as its tier allows: end one first (nothing was "
                           "charged)",
    "watch_ended": "that watch has ended: create a new one to follow the target again (nothing was charged)",
    "idempotency_conflict": "that Idempotency-Key was already used for another request (or is still in use)",
    "rate_limit_inflight": "too many scans in flight for your tier: retry {retry}",
    "rate_limit_hour": "hourly scan quota used up: retry {retry}",
    "rate_limit_day": "daily scan quota used up: retry {retry}",
    "engine_submit_failed": "the investigation engine cannot be reached: nothing was charged, retry {retry}",
    "service_unavailable": "the service is temporarily unavailable: retry {retry}",
    "internal_error": "the service failed unexpectedly: quote the request id to support",
    "too_many_targets": f"a bulk call takes at most {MAX_BULK_TARGETS} targets",
    "no_targets": "the bulk call has no targets",
    "payload_too_large": "the request is too large",
    "delivery_pending": "that delivery's attempts are still under way: redeliver it once it has succeeded or "
                        "failed (nothing was charged)",
    "webhook_url_missing": "the key that sent that delivery has no webhook URL now: set one on the key's page",
}
# Codes whose server message is more precise than anything generic (it names the field or target).
SERVER_WORDED = {"invalid_request", "target_too_short", "invalid_kind", "invalid_target",
                 "insufficient_scope"}  # its message names the scope the call needs


class UsageError(Exception):
    """Bad arguments or input: exit code 2."""


class _ParserExit(Exception):
    def __init__(self, status: int):
        self.status = status


def build_parser(out: TextIO, err: TextIO) -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        """argparse writing to the given streams and raising instead of calling sys.exit."""

        def _print_message(self, message, file=None):
            if message:
                (err if file is sys.stderr else out).write(message)

        def exit(self, status=0, message=None):
            if message:
                err.write(message)
            raise _ParserExit(status)

        def error(self, message):
            self.print_usage(sys.stderr)
            self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    common = Parser(add_help=False)
    common.add_argument("--key", default=argparse.SUPPRESS,
                        help=f"API key (default: ${KEY_ENV})")
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help=f"API base URL (default: ${URL_ENV}, else {DEFAULT_BASE_URL})")
    common.add_argument("--wait-url", default=argparse.SUPPRESS,
                        help=f"where reads that wait and the events stream go (default: ${WAIT_URL_ENV}, else "
                             "--url; make run: the API's port + 1)")
    output = Parser(add_help=False)
    output.add_argument("--format", choices=("json", "csv"), default="json", help="output on stdout (default json)")
    waiting = Parser(add_help=False)
    waiting.add_argument("--wait", action="store_true",
                         help="wait until finished, progress on stderr: the server holds each read until then, "
                              "up to 60 s a read (1 credit each)")
    waiting.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                         help="with --wait: give up after this long (exit 3; the scans go on)")
    waiting.add_argument("--poll-interval", type=float, default=12.0, metavar="SECONDS",
                         help="with --wait: the pause after a read the server answered early without the final "
                              "state, i.e. did not hold (default 12)")

    purposing = Parser(add_help=False)
    purposing.add_argument("--purpose", help="why you look this up: fraud_prevention, kyc_aml, due_diligence, "
                                             "background_check, security_research, law_enforcement or other")
    purposing.add_argument("--case-ref", metavar="REF", help="your own reference for the case (1 to 128 characters)")
    purposing.add_argument("--min-confidence", type=float, metavar="X",
                           help="leave out of results the findings whose confidence is under X (0 to 1)")
    purposing.add_argument("--required", metavar="RULE",
                           help="pay only when a scan finds this, e.g. 'profiles.verified OR breaches' (words: "
                                "profiles, profiles.verified, emails, phones, breaches, phone_profile; AND, OR, "
                                "parentheses); one that does not has no items and its credit back")
    reading = Parser(add_help=False)
    reading.add_argument("--min-confidence", type=float, metavar="X",
                         help="for this read: leave out the findings under X (0 to 1), in place of the scan's own")

    parser = Parser(prog="scan-api", parents=[common],
                    description="Client of the Public Scan API. Every API call costs 1 credit.",
                    epilog="Exit codes: 0 ok, 1 API error, 2 usage error, 3 --wait timed out.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    scan = sub.add_parser("scan", parents=[common, output, waiting, purposing], help="scan one target")
    scan.add_argument("target", help="e-mail address, +E.164 phone number or username")
    scan.add_argument("--kind", choices=("email", "phone", "username"), help="default: inferred from the target")
    bulk = sub.add_parser("bulk", parents=[common, output, waiting, purposing],
                          help=f"scan up to {MAX_BULK_TARGETS} targets (Business and Enterprise tiers)")
    bulk.add_argument("file", metavar="FILE",
                      help="CSV with a 'target,kind' header, or one target per line; '-' reads stdin")
    get = sub.add_parser("get", parents=[common, output, reading], help="read one scan")
    get.add_argument("scan_id")
    get_bulk = sub.add_parser("get-bulk", parents=[common, output, reading], help="read a bulk batch")
    get_bulk.add_argument("bulk_id")
    paging = Parser(add_help=False)
    paging.add_argument("--limit", type=int, default=20, metavar="N",
                        help="how many to print, newest first (default 20; each page of up to 100 costs 1 credit)")
    paging.add_argument("--all", action="store_true", help="every one, page after page")
    listing = sub.add_parser("list", parents=[common, output, paging], help="list your scans, newest first")
    listing.add_argument("--status", choices=("queued", "running", "completed", "failed"))
    listing.add_argument("--kind", choices=("email", "phone", "username"))
    listing.add_argument("--bulk-id", metavar="BULK_ID", help="only the scans of this batch")
    listing.add_argument("--created-after", metavar="TIME", help="ISO 8601 UTC, e.g. 2026-11-21T12:00:00Z")
    listing.add_argument("--created-before", metavar="TIME", help="ISO 8601 UTC")
    deliveries = sub.add_parser("deliveries", parents=[common, output, paging],
                                help="list webhook deliveries and their attempts, newest first")
    deliveries.add_argument("--status", choices=("pending", "succeeded", "failed", "skipped", "cancelled"))
    deliveries.add_argument("--event", help="an event name, e.g. scan.completed (the service says which it knows)")
    deliveries.add_argument("--scan-id", metavar="SCAN_ID")
    deliveries.add_argument("--endpoint-id", metavar="ENDPOINT_ID", help="only the deliveries to this endpoint")
    events = sub.add_parser("events", parents=[common, output, paging],
                            help="list your scans' events, newest first; --follow: follow them as they happen")
    events.add_argument("--follow", action="store_true",
                        help="stay connected and print each event as it happens (one JSON line each), resuming "
                             "after the last one when the connection drops; Ctrl-C stops")
    events.add_argument("--after", metavar="EVENT_ID", help="with --follow: start after this event")
    events.add_argument("--events", metavar="KINDS", help="only these kinds, comma-separated (e.g. scan.completed)")
    events.add_argument("--scan-id", metavar="SCAN_ID")
    events.add_argument("--bulk-id", metavar="BULK_ID")
    events.add_argument("--watch-id", metavar="WATCH_ID", help="only the events of this watch and its scans")
    events.add_argument("--payload", choices=("full", "thin"))
    activity = sub.add_parser("activity", parents=[common, output, paging],
                              help="list your account's activity log (API calls and portal actions), newest first")
    activity.add_argument("--action", help="e.g. scan.create, scan.read, scans.list, portal.login")
    activity.add_argument("--key-id", metavar="KEY_ID", help="only the calls of this API key")
    activity.add_argument("--resource-id", metavar="ID", help="only the entries about this scan, batch or delivery")
    activity.add_argument("--target", help="only the creations that looked up this target (who looked it up)")
    activity.add_argument("--created-after", metavar="TIME", help="ISO 8601 UTC, e.g. 2026-11-21T12:00:00Z")
    activity.add_argument("--created-before", metavar="TIME", help="ISO 8601 UTC")
    redeliver = sub.add_parser("redeliver", parents=[common, output],
                               help="send a finished webhook delivery again (same id and body)")
    redeliver.add_argument("delivery_id")
    rerun = sub.add_parser("rerun", parents=[common, output, waiting],
                           help="ask again the sources a completed scan could not reach (a new scan, 1 credit)")
    rerun.add_argument("scan_id")
    feedback = sub.add_parser("feedback", parents=[common, output],
                              help="say whether a finding of a scan is about the person (1 credit)")
    feedback.add_argument("scan_id")
    feedback.add_argument("finding_id", help="a finding's id (fnd_...), from the scan's result")
    feedback.add_argument("verdict", choices=("confirmed", "false_positive"))
    feedback.add_argument("--note", help="why, in your words (at most 1000 characters)")
    erase = sub.add_parser("erase", parents=[common], help="erase a finished scan's target and result now")
    erase.add_argument("scan_id")
    erase_bulk = sub.add_parser("erase-bulk", parents=[common],
                                help="erase every finished scan of a bulk batch now")
    erase_bulk.add_argument("bulk_id")
    sub.add_parser("account", parents=[common, output],
                   help="your balance, limits and usage, and what the key may do (scopes, expiry, IP allowlist)")
    sub.add_parser("sources", parents=[common, output],
                   help="the sources the investigations consult and how well each answers now (1 credit)")
    _endpoints_parser(sub, common, output)
    _watches_parser(sub, common, output, waiting, purposing, paging)
    for choice in sub.choices.values():
        choice.epilog = parser.epilog
    return parser


def _endpoints_parser(sub, common: argparse.ArgumentParser, output: argparse.ArgumentParser) -> None:
    """``scan-api endpoints ACTION``: the key's webhook endpoints, one action per API call (1 credit each)."""
    endpoints = sub.add_parser("endpoints", parents=[common],
                               help="manage the key's webhook endpoints (needs the key's webhooks scope)")
    actions = endpoints.add_subparsers(dest="endpoints_action", metavar="ACTION")
    actions.required = True
    shared = [common, output]
    actions.add_parser("list", parents=shared, help="the key's endpoints, its webhook URL first")
    fields = argparse.ArgumentParser(add_help=False)
    fields.add_argument("--event", dest="events", action="append", metavar="EVENT",
                        help="an event it receives, e.g. scan.running (repeat for several; default: "
                             "scan.completed and scan.failed)")
    fields.add_argument("--payload", choices=("full", "thin"), help="thin: no target, result or failure message")
    fields.add_argument("--description", help="what the endpoint is for, in your words")
    create = actions.add_parser("create", parents=[*shared, fields],
                                help="add an endpoint (at most 10); its signing secret is shown this once")
    create.add_argument("endpoint_url", metavar="URL", help="where its events go (https)")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.add_argument("--secret", help="its signing secret (whsec_...; default: generated)")
    actions.add_parser("get", parents=shared, help="read one endpoint").add_argument("endpoint_id")
    update = actions.add_parser("update", parents=[*shared, fields], help="change the fields given")
    update.add_argument("endpoint_id")
    update.add_argument("--endpoint-url", metavar="URL", help="where its events go from now on (--url is the API's)")
    switch = update.add_mutually_exclusive_group()
    switch.add_argument("--enable", dest="enabled", action="store_const", const=True,
                        help="turn it on (also after it was disabled for failing)")
    switch.add_argument("--disable", dest="enabled", action="store_const", const=False, help="turn it off")
    actions.add_parser("delete", parents=shared, help="delete it: no later event goes there").add_argument(
        "endpoint_id")
    roll = actions.add_parser("roll-secret", parents=shared,
                              help="a new signing secret, shown once; both sign until the overlap ends")
    roll.add_argument("endpoint_id")
    roll.add_argument("--overlap-hours", type=int, default=24, metavar="N",
                      help="hours both secrets sign (default 24; 0: switch at once)")
    actions.add_parser("switch-secret", parents=shared,
                       help="end a secret rotation now: the new secret is the only one").add_argument("endpoint_id")
    recover = actions.add_parser("recover", parents=shared,
                                 help="send again what failed or was skipped in a window, once each, oldest first")
    recover.add_argument("endpoint_id")
    recover.add_argument("--since", required=True, metavar="TIME", help="ISO 8601 UTC, e.g. 2026-11-21T12:00:00Z")
    recover.add_argument("--until", metavar="TIME", help="ISO 8601 UTC (default: now)")
    for action in actions.choices.values():
        action.epilog = "Exit codes: 0 ok, 1 API error, 2 usage error, 3 --wait timed out."


def _watches_parser(sub, common, output, waiting, purposing, paging) -> None:
    """``scan-api watches ACTION``: targets scanned again on a schedule (the key needs the watches scope)."""
    watches = sub.add_parser("watches", parents=[common],
                             help="follow targets: scanned again every day, week or month, changes announced")
    actions = watches.add_subparsers(dest="watches_action", metavar="ACTION")
    actions.required = True
    shared = [common, output]
    interval = argparse.ArgumentParser(add_help=False)
    interval.add_argument("--interval", required=True, choices=WATCH_INTERVALS,
                          help="how often each target is scanned again (monthly: every 30 days)")
    create = actions.add_parser("create", parents=[*shared, interval, purposing],
                                help="watch one target; its first scan starts now (1 credit)")
    create.add_argument("target", help="e-mail address, +E.164 phone number or username")
    create.add_argument("--kind", choices=("email", "phone", "username"), help="default: inferred from the target")
    importing = actions.add_parser(
        "import", parents=[*shared, interval, purposing],
        help=f"watch every target of a CSV file, {MAX_BULK_TARGETS} per bulk call (Business and Enterprise "
             "tiers); prints a report per row")
    importing.add_argument("file", metavar="FILE",
                           help="CSV with a 'target' column (and optionally 'kind'), or one target per line; "
                                "'-' reads stdin")
    listing = actions.add_parser("list", parents=[*shared, paging], help="your watches, newest first")
    listing.add_argument("--status", choices=WATCH_STATUSES)
    listing.add_argument("--kind", choices=("email", "phone", "username"))
    actions.add_parser("get", parents=shared, help="read one watch and what its last change found").add_argument(
        "watch_id")
    update = actions.add_parser("update", parents=shared, help="change the interval, status or case reference")
    update.add_argument("watch_id")
    update.add_argument("--interval", choices=WATCH_INTERVALS)
    update.add_argument("--status", choices=("active", "paused"))
    reference = update.add_mutually_exclusive_group()
    reference.add_argument("--case-ref", metavar="REF", help="your own reference for the case")
    reference.add_argument("--no-case-ref", action="store_true", help="remove the case reference")
    for action, words in (("pause", "no scheduled scan until it is resumed"),
                          ("resume", "make a paused watch active again"),
                          ("end", "end it: no more scans (its scans stay)")):
        actions.add_parser(action, parents=shared, help=words).add_argument("watch_id")
    run = actions.add_parser("run", parents=[*shared, waiting],
                             help="scan the watched target now (charged as a scan creation)")
    run.add_argument("watch_id")
    for action in actions.choices.values():
        action.epilog = "Exit codes: 0 ok, 1 API error, 2 usage error, 3 --wait timed out."


# --- input ------------------------------------------------------------------------------

def read_numbered_targets(text: str) -> list[tuple[int, dict]]:
    """Targets from CSV text, each with its row number in the file as a spreadsheet (and the portal's
    watches import) numbers it: a header row is row 1, and skipped rows are counted.

    A ``target[,kind]`` header row, or one ``target[,kind]`` per line. Blank lines and lines starting
    with ``#`` are skipped; an empty kind is left to the API to infer.
    """
    rows = [(number, row) for number, row in enumerate(csv.reader(io.StringIO(text.lstrip("\ufeff"))), start=1)
            if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")]
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0][1]]
    if "target" in header:
        target_at, kind_at = header.index("target"), (header.index("kind") if "kind" in header else None)
        rows = rows[1:]
    else:
        target_at, kind_at = 0, 1
    targets = []
    for number, row in rows:
        item = {"target": row[target_at].strip() if target_at < len(row) else ""}
        kind = row[kind_at].strip() if kind_at is not None and kind_at < len(row) else ""
        if kind:
            item["kind"] = kind
        targets.append((number, item))
    return targets


def read_targets(text: str) -> list[dict]:
    """Targets from CSV text (``read_numbered_targets`` without the numbers)."""
    return [item for _, item in read_numbered_targets(text)]


def load_targets(path: str, stdin: TextIO, most: int | None = MAX_BULK_TARGETS) -> list[tuple[int, dict]]:
    """The targets of a file (``-``: stdin) with their row numbers; more than ``most`` (None: no cap)
    is a usage error."""
    if path == "-":
        text = stdin.read()
    else:
        try:
            with open(path, encoding="utf-8-sig", newline="") as handle:
                text = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    targets = read_numbered_targets(text)
    source = "stdin" if path == "-" else path
    if not targets:
        raise UsageError(f"no targets in {source}")
    if most is not None and len(targets) > most:
        raise UsageError(f"{source} has {len(targets)} targets; a bulk call takes at most {MAX_BULK_TARGETS}")
    return targets


# --- output -----------------------------------------------------------------------------

def _flag(value: Any) -> str:
    """A JSON boolean as CSV text (``true``/``false``), empty when absent."""
    return "" if value is None else str(bool(value)).lower()


def scan_row(scan: dict, status: str = "queued") -> dict:
    """One CSV row of a scan. An erased scan has no target, result or failure: those cells are
    empty and ``erased_at`` says when they were erased."""
    result = scan.get("result") or {}
    failure = scan.get("failure") or {}
    return {
        "scan_id": scan.get("scan_id", ""), "target": scan.get("target") or "", "kind": scan.get("kind", ""),
        "status": scan.get("status", status),
        "risk_score": (result.get("risk") or {}).get("score", ""),
        "risk_band": (result.get("risk") or {}).get("band", ""),
        "findings": (result.get("counts") or {}).get("findings", ""),
        "breaches": len(result["breaches"]) if isinstance(result.get("breaches"), list) else "",
        "partial": _flag(result.get("partial")) if result else "",
        "coverage": (result.get("coverage") or {}).get("ratio", ""),
        "finished_at": scan.get("completed_at") or scan.get("failed_at") or "",
        "erased_at": scan.get("erased_at") or "",
        "error": failure.get("code", ""), "message": failure.get("message", ""),
    }


def rejected_row(entry: dict) -> dict:
    row = dict.fromkeys(CSV_FIELDS, "")
    row.update(target=entry.get("target") or "", kind=entry.get("kind") or "", status="rejected",
               error=entry.get("error", ""), message=entry.get("message", ""))
    return row


def bulk_rows(created: dict, scans: list[dict]) -> list[dict]:
    """One row per submitted target, in the order of the input: its scan, or its rejection."""
    rejected = {r.get("index"): r for r in created.get("rejected") or []}
    pending = iter(scans)
    rows = []
    for index in range(created.get("total") or len(scans) + len(rejected)):
        if index in rejected:
            rows.append(rejected_row(rejected[index]))
        else:
            scan = next(pending, None)
            if scan is not None:
                rows.append(scan_row(scan))
    rows.extend(scan_row(scan) for scan in pending)
    return rows


def delivery_row(delivery: dict) -> dict:
    attempts = delivery.get("attempts") or []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    return {"delivery_id": delivery.get("delivery_id", ""), "endpoint_id": delivery.get("endpoint_id") or "",
            "event": delivery.get("event", ""),
            "scan_id": delivery.get("scan_id", ""), "status": delivery.get("status", ""), "attempts": len(attempts),
            "last_http_status": last.get("http_status") or "", "last_error": last.get("error") or "",
            "next_attempt_at": delivery.get("next_attempt_at") or ""}


def _take(items) -> list:
    return list(items)


def _page_size(args) -> int:
    return 100 if args.all else min(100, args.limit)


# What a spreadsheet opening the file would run as a formula when a text cell starts with it.
# The same rule as the portal's CSV exports; a copy, since this package is installed without the service.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (a target, a case reference written by
    whoever chose it) quoted with a leading ``'``; numbers and other values as they are."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_output(out: TextIO, fmt: str, document: Any, rows: list[dict], fields: list[str] = CSV_FIELDS) -> None:
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows({name: csv_cell(value) for name, value in row.items()} for row in rows)
    else:
        json.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
    out.flush()


# --- errors -----------------------------------------------------------------------------

def describe(error: ApiError) -> str:
    retry = f"in {error.retry_after} s" if error.retry_after is not None else "later"
    if error.code in SERVER_WORDED or error.code not in MESSAGES or isinstance(error, FindingNotFound):
        text = error.message
    else:
        text = MESSAGES[error.code].format(retry=retry)
    if error.code == "insufficient_balance" and "bulk" in (error.message or "").lower():
        text = f"{error.message}: ask your account manager to add credits"
    ref = f"{error.code}, HTTP {error.status}"
    if error.request_id:
        ref += f", request {error.request_id}"
    return f"error: {text} [{ref}]"


# --- main -------------------------------------------------------------------------------

def _wait_and_write(wait: Callable, progress: ProgressBar, write: Callable[[Any], Any]) -> None:
    """``wait(on_progress=...)`` with the progress bar, then ``write`` the final state; on a timeout,
    ``write`` the last state seen (when there is one) and re-raise, so the exit code says so."""
    try:
        final = wait(on_progress=progress.update)
    except WaitTimeout as exc:
        progress.close()
        if exc.last is not None:
            write(exc.last.raw)
        raise
    progress.close()
    write(final.raw)


@dataclass
class _Run:
    """What a subcommand works with: its arguments, the client, the streams, and the progress
    bar it may start (``main`` closes it when an error ends the command)."""

    args: argparse.Namespace
    client: ScanClient
    out: TextIO
    err: TextIO
    now: Callable[[], float]
    targets: list | None = None
    progress: ProgressBar | None = None


def _scan(run: _Run) -> None:
    args, client = run.args, run.client
    created = client.create(args.target, args.kind, purpose=args.purpose, case_ref=args.case_ref,
                            min_confidence=args.min_confidence, required=args.required)
    if not args.wait:
        write_output(run.out, args.format, created.raw, [scan_row({**created.raw, "target": args.target})])
        return
    run.progress = ProgressBar(run.err, created.scan_id, run.now)
    _wait_and_write(partial(client.wait, created.scan_id, timeout=args.timeout), run.progress,
                    lambda state: write_output(run.out, args.format, state, [scan_row(state)]))


def _bulk(run: _Run) -> None:
    args, client = run.args, run.client
    created = client.bulk([target for _, target in run.targets or []], purpose=args.purpose,
                          case_ref=args.case_ref, min_confidence=args.min_confidence, required=args.required).raw
    if not args.wait:
        write_output(run.out, args.format, created, bulk_rows(created, created.get("scans") or []))
        return
    run.progress = ProgressBar(run.err, created["bulk_id"], run.now)
    rejected = created.get("rejected") or []
    _wait_and_write(partial(client.wait_bulk, created["bulk_id"], timeout=args.timeout), run.progress,
                    lambda state: write_output(run.out, args.format, {**state, "rejected": rejected},
                                               bulk_rows(created, state.get("scans") or [])))


def _get(run: _Run) -> None:
    scan = run.client.get(run.args.scan_id, min_confidence=run.args.min_confidence).raw
    write_output(run.out, run.args.format, scan, [scan_row(scan)])


def _get_bulk(run: _Run) -> None:
    batch = run.client.get_bulk(run.args.bulk_id, min_confidence=run.args.min_confidence).raw
    write_output(run.out, run.args.format, batch, [scan_row(s) for s in batch.get("scans") or []])


def _list(run: _Run) -> None:
    args = run.args
    found = _take(run.client.iter_scans(
        status=args.status, kind=args.kind, bulk_id=args.bulk_id, created_after=args.created_after,
        created_before=args.created_before, page_size=_page_size(args),
        max_items=None if args.all else args.limit))
    document = [scan.raw for scan in found]
    write_output(run.out, args.format, document, [scan_row(scan) for scan in document])


def _deliveries(run: _Run) -> None:
    args = run.args
    found = _take(run.client.iter_deliveries(status=args.status, event=args.event, scan_id=args.scan_id,
                                             endpoint_id=args.endpoint_id, page_size=_page_size(args),
                                             max_items=None if args.all else args.limit))
    document = [delivery.raw for delivery in found]
    write_output(run.out, args.format, document, [delivery_row(d) for d in document], fields=DELIVERY_CSV_FIELDS)


EVENT_CSV_FIELDS = ["event_id", "event", "created_at", "livemode", "scan_id"]


def _events(run: _Run) -> None:
    args = run.args
    filters = {"events": args.events, "scan_id": args.scan_id, "bulk_id": args.bulk_id, "watch_id": args.watch_id,
               "payload": args.payload}
    if args.follow:
        for event in run.client.events(after=args.after, **filters):
            run.out.write(json.dumps({"event_id": event.event_id, "event": event.event, "body": event.body}) + "\n")
            run.out.flush()
        return
    found = _take(run.client.iter_events(page_size=_page_size(args), max_items=None if args.all else args.limit,
                                         **filters))
    document = [event.raw for event in found]
    rows = [{**{name: entry.get(name) for name in EVENT_CSV_FIELDS},
             "scan_id": (entry.get("body") or {}).get("scan_id")} for entry in document]
    write_output(run.out, args.format, document, rows, fields=EVENT_CSV_FIELDS)


ACTIVITY_CSV_FIELDS = ["activity_id", "created_at", "action", "key_id", "user_email", "resource_id", "status",
                       "credits", "client_address", "request_id", "purpose", "case_ref"]


def _activity(run: _Run) -> None:
    args = run.args
    found = _take(run.client.iter_activity(action=args.action, key_id=args.key_id, resource_id=args.resource_id,
                                           target=args.target, created_after=args.created_after,
                                           created_before=args.created_before, page_size=_page_size(args),
                                           max_items=None if args.all else args.limit))
    document = [entry.raw for entry in found]
    write_output(run.out, args.format, document,
                 [{name: entry.get(name) if entry.get(name) is not None else "" for name in ACTIVITY_CSV_FIELDS}
                  for entry in document], fields=ACTIVITY_CSV_FIELDS)


def _redeliver(run: _Run) -> None:
    delivery = run.client.redeliver(run.args.delivery_id)
    document = delivery.raw or {"delivery_id": delivery.delivery_id}
    write_output(run.out, run.args.format, document, [delivery_row(document)], fields=DELIVERY_CSV_FIELDS)


def _rerun(run: _Run) -> None:
    args, client = run.args, run.client
    created = client.rerun(args.scan_id)
    if not args.wait:
        write_output(run.out, args.format, created.raw, [scan_row(created.raw)])
        return
    run.progress = ProgressBar(run.err, created.scan_id, run.now)
    _wait_and_write(partial(client.wait, created.scan_id, timeout=args.timeout), run.progress,
                    lambda state: write_output(run.out, args.format, state, [scan_row(state)]))


def _feedback(run: _Run) -> None:
    args = run.args
    finding = run.client.feedback(args.scan_id, args.finding_id, args.verdict, note=args.note)
    given = finding.feedback
    row = {"finding_id": finding.id, "path": finding.path, "source_ids": " ".join(finding.source_ids),
           "verdict": given.verdict if given else "", "note": given.note if given else "",
           "at": given.at if given else ""}
    write_output(run.out, args.format, {"scan_id": args.scan_id, "finding": finding.raw}, [row],
                 fields=FEEDBACK_CSV_FIELDS)


FEEDBACK_CSV_FIELDS = ["finding_id", "path", "source_ids", "verdict", "note", "at"]

def _erase(run: _Run) -> None:
    write_output(run.out, "json", run.client.erase(run.args.scan_id), [])


def _erase_bulk(run: _Run) -> None:
    write_output(run.out, "json", run.client.erase_bulk(run.args.bulk_id), [])


def _account(run: _Run) -> None:
    account = run.client.account().raw
    limits, usage, key = account.get("limits") or {}, account.get("usage") or {}, account.get("key") or {}
    row = {"customer_id": account.get("customer_id"), "tier": account.get("tier"), "balance": account.get("balance"),
           **{f"{what}_{window}": figures.get(window) for what, figures in (("usage", usage), ("limit", limits))
              for window in ("inflight", "hour", "day")},
           "key_id": key.get("key_id"), "scopes": " ".join(key.get("scopes") or []),
           "expires_at": key.get("expires_at"), "allowed_ips": " ".join(key.get("allowed_ips") or [])}
    write_output(run.out, run.args.format, account, [row], fields=ACCOUNT_CSV_FIELDS)


SOURCE_CSV_FIELDS = ["id", "name", "status", "since", "answered_ratio", "p95_latency_ms", "last_probe_at",
                     "last_probe_ok", "quarantined"]


def _sources(run: _Run) -> None:
    sources = [source.raw for source in run.client.list_sources()]
    write_output(run.out, run.args.format, {"data": sources},
                 [{name: source.get(name) for name in SOURCE_CSV_FIELDS} for source in sources],
                 fields=SOURCE_CSV_FIELDS)


def endpoint_row(endpoint: dict) -> dict:
    row = {name: endpoint.get(name) for name in ENDPOINT_CSV_FIELDS}
    row["events"] = " ".join(endpoint.get("events") or [])
    row["enabled"] = _flag(endpoint.get("enabled"))
    return {name: "" if value is None else value for name, value in row.items()}


def _endpoint_call(run: _Run) -> dict | list[dict]:
    """The API call of ``scan-api endpoints ACTION``: its answer as JSON."""
    args, client = run.args, run.client
    action = args.endpoints_action
    if action == "list":
        return [endpoint.raw for endpoint in client.list_endpoints()]
    if action == "create":
        return client.create_endpoint(args.endpoint_url, events=args.events, payload=args.payload,
                                      enabled=False if args.disabled else None, description=args.description,
                                      secret=args.secret).raw
    if action == "get":
        return client.get_endpoint(args.endpoint_id).raw
    if action == "update":
        return client.update_endpoint(args.endpoint_id, url=args.endpoint_url, events=args.events, payload=args.payload,
                                      enabled=args.enabled, description=args.description).raw
    if action == "delete":
        client.delete_endpoint(args.endpoint_id)
        return {"ok": True, "endpoint_id": args.endpoint_id, "deleted": True}
    if action == "roll-secret":
        return client.roll_endpoint_secret(args.endpoint_id, overlap_hours=args.overlap_hours)
    if action == "switch-secret":
        return client.switch_endpoint_secret(args.endpoint_id).raw
    queued = client.recover_endpoint(args.endpoint_id, since=args.since, until=args.until)
    return {"ok": True, "endpoint_id": args.endpoint_id, "queued": queued}


def _endpoints(run: _Run) -> None:
    answer = _endpoint_call(run)
    listed = answer if isinstance(answer, list) else [answer]
    if run.args.endpoints_action in ("delete", "roll-secret", "recover"):  # not an endpoint: its own columns
        fields = [name for name in listed[0] if name != "ok"]
        rows = [{name: listed[0][name] for name in fields}]
    else:
        fields, rows = ENDPOINT_CSV_FIELDS, [endpoint_row(e) for e in listed]
    write_output(run.out, run.args.format, answer, rows, fields=fields)


WATCH_CSV_FIELDS = ["watch_id", "target", "kind", "interval", "status", "purpose", "case_ref", "created_at",
                    "next_scan_at", "last_scan_id", "last_change_at", "last_error", "added", "removed"]
IMPORT_CSV_FIELDS = ["row", "target", "kind", "outcome", "watch_id", "error", "message"]


def watch_row(watch: dict) -> dict:
    """One CSV row of a watch; ``added``/``removed`` are the last change's finding ids, space-separated."""
    changes = watch.get("last_changes") or {}
    row = {name: watch.get(name) for name in WATCH_CSV_FIELDS}
    row.update(added=" ".join(changes.get("added") or []), removed=" ".join(changes.get("removed") or []))
    return {name: "" if value is None else value for name, value in row.items()}


def import_rows(targets: list[dict], answers: list[dict], error: ApiError | None = None,
                numbers: list[int] | None = None) -> list[dict]:
    """The import's report, one row per target in file order, ``row`` its row in the file (``numbers``,
    as the portal's import numbers them: the header is row 1; without them, 1 is the first target):
    its watch, or why it was rejected; with ``error``, the targets no answer covers as ``not_sent``."""
    numbers = numbers or list(range(1, len(targets) + 1))
    rows = [{"row": numbers[n], "target": t.get("target", ""), "kind": t.get("kind", ""), "outcome": "not_sent",
             "watch_id": "", "error": error.code if error else "", "message": error.message if error else ""}
            for n, t in enumerate(targets)]
    for chunk, answer in enumerate(answers):
        start = chunk * MAX_BULK_TARGETS
        for watch in answer.get("watches") or []:
            rows[start + watch["index"]].update(outcome="created", watch_id=watch["watch_id"], kind=watch.get("kind")
                                                or "", error="", message="")
        for rejected in answer.get("rejected") or []:
            rows[start + rejected["index"]].update(outcome="rejected", error=rejected.get("error", ""),
                                                   message=rejected.get("message", ""))
    return rows


def _watches_import(run: _Run) -> None:
    """Every target of the file, in bulk calls of at most ``MAX_BULK_TARGETS``; the report covers
    the chunks sent even when a later one is refused (then the error ends the command, exit 1)."""
    args, numbered = run.args, run.targets or []
    targets = [target for _, target in numbered]
    answers: list[dict] = []
    failure: ApiError | None = None
    for start in range(0, len(targets), MAX_BULK_TARGETS):
        try:
            answers.append(run.client.watches.create_bulk(targets[start:start + MAX_BULK_TARGETS],
                                                          interval=args.interval, purpose=args.purpose,
                                                          case_ref=args.case_ref, min_confidence=args.min_confidence,
                                                          required=args.required).raw)
        except ApiError as exc:
            failure = exc
            break
    rows = import_rows(targets, answers, failure, [number for number, _ in numbered])
    counts = {outcome: sum(row["outcome"] == outcome for row in rows) for outcome in ("created", "rejected",
                                                                                      "not_sent")}
    write_output(run.out, args.format, {"total": len(rows), **counts, "rows": rows}, rows, fields=IMPORT_CSV_FIELDS)
    run.err.write(f"{counts['created']} watched, {counts['rejected']} rejected"
                  + (f", {counts['not_sent']} not sent" if failure else "") + f" of {len(rows)} targets\n")
    if failure is not None:
        raise failure


def _watches(run: _Run) -> None:
    args, watches = run.args, run.client.watches
    action = args.watches_action
    if action == "import":
        _watches_import(run)
        return
    if action == "run":
        created = watches.run(args.watch_id)
        if not args.wait:
            write_output(run.out, args.format, created.raw, [scan_row(created.raw)])
            return
        run.progress = ProgressBar(run.err, created.scan_id, run.now)
        _wait_and_write(partial(run.client.wait, created.scan_id, timeout=args.timeout), run.progress,
                        lambda state: write_output(run.out, args.format, state, [scan_row(state)]))
        return
    if action == "list":
        document = [w.raw for w in watches.iter(status=args.status, kind=args.kind, page_size=_page_size(args),
                                                max_items=None if args.all else args.limit)]
    elif action == "create":
        document = watches.create(args.target, args.kind, interval=args.interval, purpose=args.purpose,
                                  case_ref=args.case_ref, min_confidence=args.min_confidence,
                                  required=args.required).raw
    elif action == "update":
        case_ref = None if args.no_case_ref else args.case_ref if args.case_ref is not None else UNCHANGED
        document = watches.update(args.watch_id, interval=args.interval, status=args.status, case_ref=case_ref).raw
    else:  # get, pause, resume, end: one call with the id
        document = getattr(watches, action)(args.watch_id).raw
    listed = document if isinstance(document, list) else [document]
    write_output(run.out, args.format, document, [watch_row(w) for w in listed], fields=WATCH_CSV_FIELDS)


# One function per subcommand: a new one is a parser entry in build_parser and a line here.
COMMANDS: dict[str, Callable[[_Run], None]] = {
    "scan": _scan, "bulk": _bulk, "get": _get, "get-bulk": _get_bulk, "list": _list,
    "deliveries": _deliveries, "redeliver": _redeliver, "erase": _erase, "erase-bulk": _erase_bulk,
    "activity": _activity, "account": _account, "sources": _sources, "rerun": _rerun, "feedback": _feedback,
    "endpoints": _endpoints,
    "events": _events, "watches": _watches,
}


def _check_usage(args: argparse.Namespace, key: str | None) -> None:
    if not key:
        raise UsageError(f"no API key: set {KEY_ENV} or pass --key")
    if getattr(args, "poll_interval", 1) <= 0:
        raise UsageError("--poll-interval must be positive")
    if getattr(args, "timeout", None) is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if getattr(args, "limit", 1) < 1:
        raise UsageError("--limit must be at least 1")


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None, env: dict | None = None, sleep: Callable[[float], Any] | None = None,
         clock: Callable[[], float] | None = None, session=None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 API error, 2 usage error, 3 wait timeout, 141 stdout
    closed by its reader)."""
    stdin = stdin if stdin is not None else sys.stdin
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    env = os.environ if env is None else env

    parser = build_parser(out, err)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except _ParserExit as exc:
        return exc.status
    except BrokenPipeError:  # `scan-api --help | head -1`
        return EXIT_BROKEN_PIPE

    key = getattr(args, "key", None) or env.get(KEY_ENV)
    url = getattr(args, "url", None) or env.get(URL_ENV) or DEFAULT_BASE_URL
    wait_url = getattr(args, "wait_url", None) or env.get(WAIT_URL_ENV) or None
    run: _Run | None = None
    try:
        _check_usage(args, key)
        targets = (load_targets(args.file, stdin) if args.command == "bulk"
                   else load_targets(args.file, stdin, most=None)
                   if getattr(args, "watches_action", None) == "import" else None)
        client = ScanClient(url, key, session=session, sleep=sleep, clock=clock,
                            poll_interval=getattr(args, "poll_interval", 12.0), wait_url=wait_url)
        with client:
            run = _Run(args, client, out, err, clock or time.monotonic, targets)
            COMMANDS[args.command](run)
        return EXIT_OK
    except UsageError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    except (ApiError, TransportError) as exc:
        _close_progress(run)
        err.write((describe(exc) if isinstance(exc, ApiError) else f"error: {exc}") + "\n")
        return EXIT_API_ERROR
    except WaitTimeout as exc:
        err.write(f"error: {exc}; it goes on: read it later with "
                  f"`{'get-bulk' if args.command == 'bulk' else 'get'} {exc.resource_id}`\n")
        return EXIT_TIMEOUT
    except KeyboardInterrupt:
        _close_progress(run)
        err.write("interrupted\n")
        return 130
    except BrokenPipeError:  # stdout's reader went away (`| head`): it wants nothing more
        _close_progress(run)
        return EXIT_BROKEN_PIPE
    finally:
        try:
            err.flush()
        except BrokenPipeError:
            pass


def _close_progress(run: _Run | None) -> None:
    if run is not None and run.progress is not None:
        run.progress.close()


def run() -> None:
    """The ``scan-api`` entry point."""
    code = main()
    if code == EXIT_BROKEN_PIPE:
        # Python flushes stdout once more on exit: onto the closed pipe that would print "Exception
        # ignored ... BrokenPipeError". What is left in it goes nowhere instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)
