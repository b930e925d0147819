"""Feedback on a finding of a scan's result (D23): ``POST /scan/{id}/findings/{finding_id}/feedback``
and the portal's buttons.

Each feedback is a row of its own (``FindingFeedback``, the history), and the latest is also
written into the scan's stored result, in the same transaction with the scan's row locked: a
read stays a copy of the stored text (``app.plumbing.rawjson``), and two feedbacks at once on one scan
never lose each other's change. Operators count them per source that found the finding
(``app.plumbing.metrics.count_feedback``): the labels are the engine's source ids and the verdict,
never anything of the target or the result.

A finding's id follows its item (D26), so feedback follows the finding to the later scans of
the target (same customer and mode): a scan that completes shows the latest feedback given on
each of its findings in an earlier scan (``carry_feedback``), and feedback given on a scan also
goes into the later scans already completed that have the finding (``give_feedback``), each
with the id of the scan it was given on.
"""
from __future__ import annotations

import json

from app.plumbing import metrics
from app.plumbing.db import transaction
from app.plumbing.errors import Forbidden, InvalidRequest, NotFound
from app.plumbing.models import iso, utcnow
from app.scans import confidence
from app.scans import statements as scan_store
from app.scans.models import COMPLETED, FEEDBACK_VERDICTS, Scan
from app.scans.results import JustWritten, feedback_of, parsed_result

MAX_NOTE = 1000


def check_feedback(verdict, note) -> tuple[str, str]:
    """The verdict and note of a feedback, or ``InvalidRequest`` (400) naming what is wrong."""
    problems = {}
    if verdict not in FEEDBACK_VERDICTS:
        problems["verdict"] = [f"must be one of {', '.join(FEEDBACK_VERDICTS)}"]
    if note is None:
        note = ""
    if not isinstance(note, str):
        problems["note"] = ["must be a string"]
    elif len(note) > MAX_NOTE or "\x00" in note:
        problems["note"] = [f"must have at most {MAX_NOTE} characters and no NUL byte"]
    if problems:
        raise InvalidRequest("the feedback is not valid: " + "; ".join(f"{k} {v[0]}" for k, v in problems.items()),
                             details=problems)
    return verdict, note.strip()


def give_feedback(customer_id: str, scan_id: str, finding_id: str, *, verdict, note=None,
                  livemode: bool | None = True, api_key_id: str | None = None) -> dict:
    """Record the customer's verdict on one finding of their completed scan; the finding as reads
    now show it. ``livemode`` None: either mode (the portal, which shows both); otherwise a scan
    of the other mode is not found (D15). Another customer's scan is ``Forbidden``; an unknown
    scan or finding, or a scan without a result, ``NotFound``."""
    verdict, note = check_feedback(verdict, note)
    now = utcnow()
    with transaction():
        scan = _owned(scan_store.lock_scan(scan_id), customer_id, livemode)
        result = json.loads(scan.result_json) if scan.status == COMPLETED and scan.result_json else None
        finding = next((f for f in (result or {}).get("findings") or [] if f.get("id") == finding_id), None)
        if finding is None:
            raise NotFound("no finding with this id in this scan's result")
        finding["feedback"] = feedback_of({"verdict": verdict, "note": note, "at": iso(now), "scan_id": scan.id})
        confidence.with_feedback(finding)  # D29: the customer's word wins
        scan_store.set_result_json(scan.id, json.dumps(result, separators=(",", ":")))
        _forward(scan, finding_id, finding["feedback"])
        scan_store.insert_feedback({"scan": scan.id, "finding_id": finding_id, "verdict": verdict, "note": note,
                                    "source_ids": json.dumps(finding["source_ids"]), "api_key_id": api_key_id,
                                    "created_at": now})
    metrics.count_feedback(finding["source_ids"], verdict)
    return {"ok": True, "scan_id": scan.id, "finding": finding}


def _forward(scan: Scan, finding_id: str, feedback: dict) -> None:
    """Show ``feedback`` on the finding in the later completed scans that have it (D26)."""
    for later in scan_store.lock_later_scans_with(scan, finding_id, status=COMPLETED):
        result = json.loads(later.result_json or "{}")
        if _set_feedback(result, {finding_id: feedback}):
            scan_store.set_result_json(later.id, json.dumps(result, separators=(",", ":")))


def carry_feedback(scans: list[Scan], just_written: JustWritten | None = None) -> None:
    """In the transaction that completes ``scans``: each of their findings shows the latest feedback
    given on it in an earlier scan of the same customer and mode (D26), written into the stored
    result (and into ``scan.result_json``, which the webhook's body reads). One statement for
    all of them; a second write only for a scan that has such feedback. ``just_written``: the
    results as the look wrote them (``parsed_result``)."""
    parsed = {scan.id: parsed_result(scan, just_written) for scan in scans if scan.result_json}
    ids = sorted({f["id"] for result in parsed.values() for f in result.get("findings") or []})
    given = scan_store.feedback_on(ids, sorted({scan.customer_id for scan in scans}))
    for scan in scans:
        latest = {row.finding_id: feedback_of({"verdict": row.verdict, "note": row.note, "at": iso(row.created_at),
                                               "scan_id": row.scan_id})
                  for row in given  # oldest first: the latest is kept
                  if row.customer_id == scan.customer_id and row.livemode == scan.livemode
                  and row.scan_created_at < scan.created_at and row.scan_id != scan.id}
        text = scan.result_json
        if not latest or not text:
            continue
        result = json.loads(text)  # a copy of its own to change: ``parsed``'s may be shared
        if _set_feedback(result, latest):
            scan.result_json = json.dumps(result, separators=(",", ":"))
            scan_store.set_result_json(scan.id, scan.result_json)


def _set_feedback(result: dict, feedback: dict[str, dict | None]) -> bool:
    """Put each finding's feedback of ``feedback`` (by finding id) into ``result``; whether any was."""
    changed = False
    for finding in result.get("findings") or []:
        if finding.get("id") in feedback:
            finding["feedback"] = feedback[finding["id"]]
            confidence.with_feedback(finding)  # D29: on later scans too
            changed = True
    return changed


def history(customer_id: str, scan_id: str) -> list[dict]:
    """Every feedback given on the customer's scan, oldest first (the portal's scan page)."""
    scan = scan_store.owned_scan(scan_id, customer_id)
    if scan is None:
        raise NotFound("no scan with this id")
    return [{"finding_id": row.finding_id, "verdict": row.verdict, "note": row.note, "at": row.created_at,
             "source_ids": json.loads(row.source_ids)} for row in scan_store.feedback_rows(scan.id)]


def _owned(scan: Scan | None, customer_id: str, livemode: bool | None) -> Scan:
    if scan is None or (livemode is not None and scan.livemode != livemode):
        raise NotFound("no scan with this id")
    if scan.customer_id != customer_id:
        raise Forbidden("this scan belongs to another customer")
    return scan
