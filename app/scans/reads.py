"""Scan reads: the bodies of ``GET /scan/{id}`` and ``GET /scan/bulk/{id}`` (D5), the
scans list ``GET /scans`` (D17), and the fields a scan's final state adds to any body
(reads, bulk entries, list entries, webhook events).

Every read runs these, so their statements are written once (``app.scans.statements``), and
a completed scan's stored result goes into the body as its JSON text (``RawJSON``).
The bodies have exactly the fields, types and order of ScanSchema / BulkStateSchema,
which dump them unchanged (tests/unit/test_response_bodies.py holds them to it).

The portal's scan pages (issue 19) read here too (``portal_scans``, ``scan_detail``,
``batch_detail``): their rows carry datetimes for the templates, and an object of
another customer is ``NotFound`` like an unknown one (the portal's 404), so ids cannot
be probed.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from app.accounts.statements import keys as key_store
from app.events import waits
from app.plumbing.errors import Forbidden, InvalidRequest, NotFound
from app.plumbing.models import iso, utcnow
from app.plumbing.paging import Page
from app.plumbing.rawjson import RawJSON
from app.scans import confidence
from app.scans import statements as scan_store
from app.scans.models import COMPLETED, FAILED, QUEUED, RUNNING, BulkBatch, Scan

LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT = 20, 100


def scan_by_id(scan_id: str) -> Scan | None:
    """The scan with this id, of any customer and mode (the tracking jobs' look), or None."""
    return scan_store.scan_by_id(scan_id)


def owned(model, object_id: str, customer_id: str, what: str, livemode: bool):
    """The customer's scan or batch (``model``) of this mode: ``NotFound`` when there is none
    of this mode (D15: as if it did not exist), ``Forbidden`` when it is another customer's."""
    row = scan_store.scan_by_id(object_id) if model is Scan else scan_store.batch_by_id(object_id)
    return _owned_by(row, what, customer_id=customer_id, livemode=livemode)


def _owned_by(row, what: str, *, customer_id: str, livemode: bool):
    if row is None or row.livemode != livemode:  # the mode before the owner
        raise NotFound(f"no {what} with this id")
    if row.customer_id != customer_id:
        raise Forbidden(f"this {what} belongs to another customer")
    return row


def remaining_eta(scan, now) -> int:
    if scan.eta_at is None:
        return 0
    return max(0, math.ceil((scan.eta_at - now).total_seconds()))


def final_fields(status: str, completed_at, result_json: str | None, failed_at, failure_code: str | None,
                 failure_message: str | None, *, raw_result: bool = False, erased_at=None,
                 minimum: float | None = None) -> dict | None:
    """``completed_at`` and ``result`` of a completed scan, or ``failed_at`` and ``failure`` of a
    failed one, in that order; None for a scan in flight. An erased scan (D20) has its time and
    ``erased_at`` in their place: its result and failure message are gone. ``minimum``: the
    findings under this confidence are left out of the result shown (D29; None: none)."""
    if status == COMPLETED:
        if erased_at is not None:
            return {"completed_at": iso(completed_at), "erased_at": iso(erased_at)}
        text = result_json or "null"  # a completed scan always has one until it is erased
        if minimum is not None and result_json:
            shown = confidence.filtered(json.loads(text), minimum, fresh=True)
            return {"completed_at": iso(completed_at),
                    "result": RawJSON(json.dumps(shown, separators=(",", ":"))) if raw_result else shown}
        return {"completed_at": iso(completed_at), "result": RawJSON(text) if raw_result else json.loads(text)}
    if status == FAILED:
        if erased_at is not None:
            return {"failed_at": iso(failed_at), "erased_at": iso(erased_at)}
        return {"failed_at": iso(failed_at), "failure": {"code": failure_code, "message": failure_message or ""}}
    return None


def shown_minimum(own: float | None, asked: float | None) -> float | None:
    """The ``min_confidence`` a result is shown with (D29): the read's own when it asks, else the
    scan's (webhook bodies, events and watches never ask)."""
    return asked if asked is not None else own


def match_rules(body: dict, min_confidence: float | None, required: str | None) -> None:
    """A scan's ``min_confidence`` and ``required`` as created, in its bodies when it has them."""
    if min_confidence is not None:
        body["min_confidence"] = min_confidence
    if required is not None:
        body["required"] = required


def final_state(scan, *, raw_result: bool = False, min_confidence: float | None = None) -> dict | None:
    """``final_fields`` of a scan row; ``min_confidence``: the read's, else the scan's own."""
    return final_fields(scan.status, scan.completed_at, scan.result_json, scan.failed_at, scan.failure_code,
                        scan.failure_message, raw_result=raw_result, erased_at=scan.erased_at,
                        minimum=shown_minimum(scan.min_confidence, min_confidence))


def scan_view(scan, now, *, raw_result: bool = False, min_confidence: float | None = None) -> dict:
    """The read body of D5 for one scan in any state (``raw_result``: the result as RawJSON;
    ``min_confidence``: the read's, D29)."""
    body = {"ok": True, "scan_id": scan.id, "livemode": scan.livemode, "status": scan.status}
    if scan.target is not None:  # None once erased (D20)
        body["target"] = scan.target
    body.update(kind=scan.kind, purpose=scan.purpose, case_ref=scan.case_ref, created_at=iso(scan.created_at))
    match_rules(body, scan.min_confidence, scan.required)
    if scan.bulk_id:
        body["bulk_id"] = scan.bulk_id
    if scan.watch_id:
        body["watch_id"] = scan.watch_id
    if scan.rerun_of:
        body["rerun_of"] = scan.rerun_of
    final = final_state(scan, raw_result=raw_result, min_confidence=min_confidence)
    if final is not None:
        body.update(final)
    else:
        body["eta_seconds"] = remaining_eta(scan, now)
        body["progress"] = {"recipes_total": scan.recipes_total, "recipes_done": scan.recipes_done}
    return body


def read_scan(customer_id: str, scan_id: str, livemode: bool = True, min_confidence: float | None = None) -> dict:
    """The body of ``GET /scan/{id}``; a completed scan's result is ``RawJSON``. A scan of the
    other mode than the calling key's is not found (D15)."""
    return scan_view(owned(Scan, scan_id, customer_id, "scan", livemode), utcnow(), raw_result=True,
                     min_confidence=min_confidence)


def read_bulk(customer_id: str, bulk_id: str, livemode: bool = True, min_confidence: float | None = None) -> dict:
    """The body of ``GET /scan/bulk/{id}``; completed scans' results are ``RawJSON``.

    ``rejected_count`` (amended D7) is the targets refused at creation: the batch stores
    the number submitted (``total``) and has a scan for every target it queued, so it is
    their difference, and ``total`` = queued + running + completed + failed + rejected_count.
    """
    batch = owned(BulkBatch, bulk_id, customer_id, "bulk batch", livemode)
    return bulk_body(batch, scan_store.batch_scan_rows(batch.id), min_confidence)


def bulk_body(batch, scans, min_confidence: float | None = None) -> dict:
    """The aggregate body of ``batch`` from its scans' rows (the columns of
    ``app.scans.statements.BATCH_SCANS``, in order); ``min_confidence``: the read's (D29)."""
    counts = {QUEUED: 0, RUNNING: 0, COMPLETED: 0, FAILED: 0}
    entries = []
    all_done = True
    as_time = Scan.completed_at.python_value  # raw rows, as the model would read them
    for (scan_id, status, target, kind, purpose, case_ref, completed_at, result_json, failed_at, failure_code,
         failure_message, erased_at, own_minimum, required) in scans:
        counts[status] += 1
        entry = {"scan_id": scan_id, "livemode": batch.livemode, "status": status}
        if target is not None:  # None once erased (D20)
            entry["target"] = target
        entry.update(kind=kind, purpose=purpose, case_ref=case_ref)
        match_rules(entry, own_minimum, required)
        final = final_fields(status, as_time(completed_at), result_json, as_time(failed_at), failure_code,
                             failure_message, raw_result=True, erased_at=as_time(erased_at),
                             minimum=shown_minimum(own_minimum, min_confidence))
        if final is None:
            all_done = False
        else:
            entry.update(final)
        entries.append(entry)
    return {"ok": True, "bulk_id": batch.id, "livemode": batch.livemode, "total": batch.total, **counts,
            "rejected_count": max(0, batch.total - len(entries)), "all_done": all_done, "scans": entries}


def _list_entry(row, livemode: bool) -> dict:
    (scan_id, status, target, kind, purpose, case_ref, bulk_id, watch_id, created_at, completed_at, result_json,
     failed_at, failure_code, failure_message, erased_at, own_minimum, required) = row
    as_time = Scan.created_at.python_value  # raw rows, as the model would read them
    entry = {"scan_id": scan_id, "livemode": livemode, "status": status}
    if target is not None:  # None once erased (D20)
        entry["target"] = target
    entry.update(kind=kind, purpose=purpose, case_ref=case_ref, created_at=iso(as_time(created_at)))
    match_rules(entry, own_minimum, required)
    if bulk_id:
        entry["bulk_id"] = bulk_id
    if watch_id:
        entry["watch_id"] = watch_id
    final = final_fields(status, as_time(completed_at), result_json, as_time(failed_at), failure_code,
                         failure_message, raw_result=True, erased_at=as_time(erased_at), minimum=own_minimum)
    if final is not None:
        entry.update(final)
    return entry


def list_scans(customer_id: str, *, status: str | None = None, kind: str | None = None, bulk_id: str | None = None,
               created_after=None, created_before=None, limit: int = LIST_DEFAULT_LIMIT,
               starting_after: str | None = None, livemode: bool = True) -> dict:
    """The body of ``GET /scans``: ``{ok, data, has_more}``, newest first (D17), the scans of the
    calling key's mode only (D15).

    Order is ``(created_at, id)`` descending: a bulk call's scans share one ``created_at``, so the
    id breaks the tie and the cursor (``starting_after``: the last scan id of the previous page)
    is exact. The query walks the ``(customer, created_at)`` index and reads one row more than
    the page to know ``has_more`` without counting. Times are naive UTC, both bounds exclusive.
    """
    before = None
    if starting_after is not None:
        created_at = scan_store.created_at_of(starting_after, customer_id=customer_id, livemode=livemode)
        if created_at is None:  # unknown, another customer's or mode's: the same answer, nothing disclosed
            raise InvalidRequest("starting_after is not the id of one of your scans",
                                 details={"starting_after": ["no scan of yours has this id"]})
        before = (created_at, starting_after)
    limit = max(1, min(LIST_MAX_LIMIT, int(limit)))
    rows = scan_store.list_rows(customer_id, livemode=livemode, status=status, kind=kind, bulk_id=bulk_id,
                                created_after=created_after, created_before=created_before, before=before,
                                limit=limit + 1)
    return {"ok": True, "data": [_list_entry(row, livemode) for row in rows[:limit]], "has_more": len(rows) > limit}


# --- the portal's scans list, scan and batch pages ---------------------------------------

STATUSES = (QUEUED, RUNNING, COMPLETED, FAILED)
MAX_PER_PAGE = 100
MAX_SEARCH = 300
MAX_RERUNS = 20  # the scan page links this many of a scan's re-runs, oldest first


def _summary(scan, now) -> dict:
    """What a list row shows: no result body (a page of 100 results is a lot of JSON)."""
    row = {"scan_id": scan.id, "status": scan.status, "kind": scan.kind, "target": scan.target,
           "created_at": scan.created_at, "completed_at": scan.completed_at, "failed_at": scan.failed_at,
           "failure_code": scan.failure_code, "bulk_id": scan.bulk_id, "key_id": scan.api_key_id,
           "recipes_total": scan.recipes_total, "recipes_done": scan.recipes_done, "livemode": scan.livemode,
           "purpose": scan.purpose, "case_ref": scan.case_ref, "erased_at": scan.erased_at, "rerun_of": scan.rerun_of}
    if scan.status in (QUEUED, RUNNING):
        row["eta_seconds"] = remaining_eta(scan, now)
    row.update(_risk_summary(scan))
    return row


def _risk_summary(scan) -> dict:
    """A completed scan's risk (score and band) and whether its result is partial, for a list row."""
    if scan.status != COMPLETED or not scan.result_json:
        return {"risk": None, "partial": False}
    result = confidence.filtered(json.loads(scan.result_json), scan.min_confidence, fresh=True)  # as its reads
    risk = result.get("risk") or {}
    return {"risk": {"score": risk.get("score"), "band": risk.get("band")}, "partial": bool(result.get("partial"))}


def _key_ref(key_id: str) -> dict:
    key = key_store.get(key_id)
    return {"key_id": key.id, "name": key.name, "display": key.display}


def portal_scans(customer_id: str, *, status: str | None = None, kind: str | None = None,
                 key_id: str | None = None, bulk_id: str | None = None, search: str | None = None,
                 page: int = 1, per_page: int = 25) -> Page:
    """The portal's scans list: newest first, a batch's scans in request order, numbered pages
    with a total, a key filter and a search in the target (the API's ``list_scans`` pages by
    cursor); filters that are not for this customer find nothing."""
    for name, value in (("batch", bulk_id), ("search", search)):
        if value and "\x00" in value:  # PostgreSQL refuses a NUL even in a comparison: a 400, not a 500
            raise InvalidRequest(f"the {name} filter must not contain a NUL byte")
    page, per_page = max(1, page), min(MAX_PER_PAGE, max(1, per_page))
    search = (search or "").strip()[:MAX_SEARCH]
    total, rows = scan_store.portal_page(customer_id, status=status, kind=kind, key_id=key_id, bulk_id=bulk_id,
                                         search=search or None, page=page, per_page=per_page)
    now = utcnow()
    return Page([_summary(s, now) for s in rows], total, page, per_page)


def scan_detail(customer_id: str, scan_id: str, *, min_confidence: float | None = None) -> dict:
    """One scan in any state with its key, and its ``final_state`` (``result`` parsed, or ``failure``;
    ``min_confidence``: the page's filter, else the scan's own, D29)."""
    scan = scan_store.owned_scan(scan_id, customer_id)
    if scan is None:
        raise NotFound("no scan with this id")
    detail = _summary(scan, utcnow())
    detail.update(final_state(scan, min_confidence=min_confidence) or {})
    detail.update(min_confidence=scan.min_confidence, required=scan.required)
    detail.update(started_at=scan.started_at, key=_key_ref(scan.api_key_id),
                  reruns=[{"scan_id": rid, "status": status, "created_at": created_at} for rid, status, created_at
                          in scan_store.reruns_of(scan.id, customer_id, since=scan.created_at, limit=MAX_RERUNS)])
    return detail


def batch_detail(customer_id: str, bulk_id: str) -> dict:
    """A batch's counters and its scans in request order (``rejected_count`` as in ``read_bulk``,
    ``rejected_indexes`` the places in the request of the targets refused)."""
    batch = scan_store.owned_batch(bulk_id, customer_id)
    if batch is None:
        raise NotFound("no bulk batch with this id")
    now = utcnow()
    rows = scan_store.batch_scans(batch.id)
    scans = [_summary(s, now) for s in rows]
    # A refused target is not kept (the creation's answer listed it with its reason): its place
    # in the request is what is left, the indexes no scan took.
    rejected_indexes = sorted(set(range(batch.total)) - {s.bulk_index for s in rows})
    counts = dict.fromkeys(STATUSES, 0)
    for scan in scans:
        counts[scan["status"]] += 1
    return {"bulk_id": batch.id, "livemode": batch.livemode, "created_at": batch.created_at, "total": batch.total,
            "counts": counts,
            "rejected_count": max(0, batch.total - len(scans)), "rejected_indexes": rejected_indexes,
            "all_done": counts[QUEUED] + counts[RUNNING] == 0, "scans": scans, "key": _key_ref(batch.api_key_id)}


# --- reads that wait (D27) ------------------------------------------------------------------

@dataclass(frozen=True)
class Awaited:
    """What a read with ``?wait=N`` waits for (D27): the topic its changes are announced on,
    the read again (uncharged: the call paid once) and when its body is final."""

    topic: Callable[[str], str]
    read: Callable[..., dict]  # (customer_id, object_id, livemode, min_confidence=None)
    done: Callable[[dict], bool]


SCAN_WAIT = Awaited(waits.scan_topic, read_scan, lambda body: body["status"] in (COMPLETED, FAILED))
BULK_WAIT = Awaited(waits.bulk_topic, read_bulk, lambda body: bool(body["all_done"]))


def owned_row(row, what: str, *, customer_id: str, livemode: bool):
    """``row`` (a scan or batch found by id, or None) if it is the customer's of this mode: else
    ``NotFound`` (none of this mode, D15) or ``Forbidden`` (another customer's)."""
    return _owned_by(row, what, customer_id=customer_id, livemode=livemode)
