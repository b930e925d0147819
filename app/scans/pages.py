"""Scans and batches: the list (its target search posted), a scan's page with its findings' feedback,
a batch's page. The scan page's re-run button posts to ``app.intake.pages``, its erase form to
``app.privacy.pages``.

What a scan's page shows from the domains that stand above scans (its deliveries, a watch's changes) is
handed in at start (``NEIGHBOURS``): they use scans, so scans imports neither."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flask import abort, flash, g, redirect, render_template, request, url_for

from app.accounts import admin
from app.accounts import portal_roles as roles
from app.plumbing.errors import Forbidden, InvalidRequest, NotFound
from app.plumbing.installed import Installed
from app.plumbing.paging import Page
from app.portal import security
from app.portal.blueprint import bp, choice, filter_source, page_arg, target_filter
from app.portal.forms import ActionForm, EraseForm
from app.scans import confidence, findings, reads
from app.targets import identity as targets


@dataclass(frozen=True)
class Neighbours:
    """What a scan's page shows from the domains above scans, handed in by ``app.blueprints``."""

    deliveries: Callable[[str, str], list[dict]]  # (scan id, customer id): webhooks' delivery_log.scan_deliveries
    watch_changes: Callable[[str, str], dict | None]  # (customer id, scan id): watches' since_previous


NEIGHBOURS: Installed[Neighbours] = Installed("the scan page's neighbours")


@bp.route("/scans", methods=["GET", "POST"])
@security.requires(roles.READ)
def scans():
    customer_id = g.portal_customer.id
    keys = admin.customer_keys(customer_id)
    source, errors = filter_source(), []
    filters = {"status": choice("status", reads.STATUSES, source), "kind": choice("kind", targets.KINDS, source),
               "key": choice("key", {k.id for k in keys}, source),
               "bulk": (source.get("bulk") or "").strip()[:60] or None,
               "q": target_filter("q", "Target contains", reads.MAX_SEARCH, errors) or None}
    listing = Page([], 0, 1, 25)  # a refused filter is not applied: nothing is listed
    if not errors:
        listing = reads.portal_scans(customer_id, status=filters["status"], kind=filters["kind"],
                                     key_id=filters["key"], bulk_id=filters["bulk"], search=filters["q"],
                                     page=page_arg(source))
    for error in errors:
        flash(f"Scan filter: {error}", "error")
    return render_template("portal/scans.html", scans=listing, filters=filters, keys=keys, refused=bool(errors),
                           statuses=reads.STATUSES, kinds=targets.KINDS), 400 if errors else 200


@bp.get("/scans/<scan_id>")
@security.requires(roles.READ)
def scan_page(scan_id):
    minimum, refused = _min_confidence_arg()
    try:
        scan = reads.scan_detail(g.portal_customer.id, scan_id, min_confidence=minimum)
    except NotFound:
        abort(404)
    explained = _explained(scan.get("result"))
    page = render_template("portal/scan.html", scan=scan, explained=explained,
                           watch=_watch_changes(scan_id, explained),
                           action=ActionForm(), erase_form=EraseForm(),
                           retention_days=g.portal_customer.result_retention_days,
                           deliveries=NEIGHBOURS().deliveries(scan["scan_id"], g.portal_customer.id),
                           min_confidence=request.args.get("min_confidence", "") if refused else minimum)
    return page, 400 if refused else 200


def _min_confidence_arg() -> tuple[float | None, bool]:
    """The page's confidence filter (``?min_confidence=``, D29): the minimum asked (None: the scan's
    own), and whether it was refused (flashed; the page shows the scan's own then)."""
    text = request.args.get("min_confidence")
    if text is None or text.strip() == "":
        return None, False
    try:
        return confidence.check_minimum(text), False
    except ValueError as exc:
        flash(f"Confidence filter: {exc}", "error")
        return None, True


def _watch_changes(scan_id: str, explained: dict) -> dict | None:
    """A watch scan's changes since the watch's previous scan (``Neighbours.watch_changes``),
    each added finding named as this page names it (its anchor is on the page), each removed one
    as the previous result named it."""
    found = NEIGHBOURS().watch_changes(g.portal_customer.id, scan_id)
    if found is None or found["state"] != "changed":
        return found
    previous = found.pop("previous_result")
    paths_before = {f["id"]: f["path"] for f in previous.get("findings") or []}
    labels_before = _finding_labels(previous)
    changes = found["changes"]
    found["added"] = [{"id": fid, "label": explained["labels"].get(explained["by_id"][fid]["path"], "a finding")
                       if fid in explained["by_id"] else "a finding"} for fid in changes["added"]]
    found["removed"] = [{"id": fid, "label": labels_before.get(paths_before.get(fid, ""), "a finding")}
                        for fid in changes["removed"]]
    return found


# What the scan page shows for each failed, found or silent source.
SOURCE_BADGES = {"found": "ok", "not_found": "", "skipped": "", "error": "failed", "rate_limited": "failed",
                 "timeout": "failed"}


def _explained(result: dict | None) -> dict:
    """The result's findings by path and by id, their labels, and sources by id, for the scan
    page's tables and links."""
    if not result:
        return {"by_path": {}, "by_id": {}, "labels": {}, "sources": {}, "badges": SOURCE_BADGES}
    found = result.get("findings") or []
    return {"by_path": {f["path"]: f for f in found}, "by_id": {f["id"]: f for f in found},
            "labels": _finding_labels(result), "sources": {s["id"]: s for s in result.get("sources") or []},
            "badges": SOURCE_BADGES}


def _finding_labels(result: dict) -> dict[str, str]:
    """What a person calls each finding ("Breach: LinkedIn (2012-05)"), by its path in the result."""
    labels = {}
    for group, word in (("verified", "Verified profile"), ("weak", "Weak profile")):
        for index, p in enumerate((result.get("profiles") or {}).get(group) or []):
            labels[f"profiles.{group}[{index}]"] = f"{word}: {p.get('platform')} {p.get('handle') or ''}".strip()
    for name, word in (("emails", "E-mail address"), ("phones", "Phone number")):
        for index, value in enumerate((result.get("contacts") or {}).get(name) or []):
            labels[f"contacts.{name}[{index}]"] = f"{word}: {value}"
    for index, b in enumerate(result.get("breaches") or []):
        labels[f"breaches[{index}]"] = f"Breach: {b.get('name')}" + (f" ({b['date']})" if b.get("date") else "")
    return labels


@bp.post("/scans/<scan_id>/findings/<finding_id>/feedback")
@security.requires(roles.SCANS)
def finding_feedback(scan_id, finding_id):
    """The feedback buttons of a finding: the API's feedback, for either mode, free of charge."""
    if ActionForm().validate_on_submit():
        verdict = request.form.get("verdict")
        try:
            findings.give_feedback(g.portal_customer.id, scan_id, finding_id, verdict=verdict,
                                   note=request.form.get("note") or None, livemode=None)
        except (NotFound, Forbidden):  # another customer's scan is a 404 here, as on the scan page
            abort(404)
        except InvalidRequest as exc:
            flash(exc.message, "error")
        else:
            flash("Thank you: the finding is marked " + ("not this person." if verdict == "false_positive"
                                                         else "confirmed."), "ok")
    return redirect(url_for("portal.scan_page", scan_id=scan_id, _anchor=finding_id))


@bp.get("/batches/<bulk_id>")
@security.requires(roles.READ)
def batch_page(bulk_id):
    try:
        batch = reads.batch_detail(g.portal_customer.id, bulk_id)
    except NotFound:
        abort(404)
    return render_template("portal/batch.html", batch=batch)
