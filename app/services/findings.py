"""Feedback on a finding of a scan's result (D23): ``POST /scan/{id}/findings/{finding_id}/feedback``
and the portal's buttons.

Each feedback is a row of its own (``FindingFeedback``, the history), and the latest is also
written into the scan's stored result, in the same transaction with the scan's row locked: a
read stays a copy of the stored text (``app.rawjson``), and two feedbacks at once on one scan
never lose each other's change. Operators count them per source that found the finding
(``app.metrics.count_feedback``): the labels are the engine's source ids and the verdict,
never anything of the target or the result.
"""
from __future__ import annotations

import json

from app import metrics
from app.db import transaction
from app.models import Scan, iso, utcnow
from app.models.scans import COMPLETED, FEEDBACK_VERDICTS
from app.services.errors import Forbidden, InvalidRequest, NotFound
from app.services.results import feedback_of
from app.store import scans as scan_store

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
        finding["feedback"] = feedback_of({"verdict": verdict, "note": note, "at": iso(now)})
        scan_store.set_result_json(scan.id, json.dumps(result, separators=(",", ":")))
        scan_store.insert_feedback({"scan": scan.id, "finding_id": finding_id, "verdict": verdict, "note": note,
                                    "source_ids": json.dumps(finding["source_ids"]), "api_key_id": api_key_id,
                                    "created_at": now})
    metrics.count_feedback(finding["source_ids"], verdict)
    return {"ok": True, "scan_id": scan.id, "finding": finding}


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
