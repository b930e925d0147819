"""Watches (D28): the list (status, last change, next scan), one added, a CSV file of targets imported
with a report per row, and pause, resume and end. A target travels only in a posted body, never in
an address; what a watch scan changed is shown on the scan's page (``pages.scans``)."""
from __future__ import annotations

import csv
import io
from functools import partial

from flask import abort, flash, g, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from flask_wtf.file import FileField, FileRequired
from wtforms import SelectField, StringField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Length, Optional

from app.accounts import portal_roles as roles
from app.activity import entries
from app.plumbing.errors import NotFound, ServiceError
from app.portal import audit, security
from app.portal.blueprint import bp, choice, form_errors, page_arg
from app.portal.forms import ActionForm
from app.scans.models import MAX_BULK_TARGETS
from app.scans.purposes import PURPOSES
from app.targets.identity import KINDS
from app.watches import watchlist
from app.watches.models import STATUSES

MODES = {"live": True, "test": False}
MAX_CSV_BYTES = 64 * 1024  # 100 rows of the longest targets fit in a third of it


class _WatchFields(FlaskForm):
    """The fields a watch and a CSV import share: the key it is made with (its mode is the watch's),
    how often, why, and the customer's reference. Their rules are ``app.watches.watchlist``'."""

    key_id = SelectField("API key", choices=[], validate_choice=False,
                         validators=[DataRequired(message="choose a key with the scope watches")],
                         description="The watch's scans are made and charged with this key, in its mode (a test "
                                     "key's on the sandbox, free). It needs the scope watches.")
    interval = SelectField("Scan again", choices=[SelectChoice(i, i) for i in watchlist.INTERVALS], default="weekly")
    purpose = SelectField("Purpose", choices=[SelectChoice("", "none given")]
                          + [SelectChoice(p, p.replace("_", " ")) for p in PURPOSES], default="")
    case_ref = StringField("Case reference", validators=[Optional(), Length(max=128)])


class WatchForm(_WatchFields):
    """One target to watch: sent in the body (a target never goes into an address)."""

    target = StringField("Target", validators=[DataRequired(), Length(max=300)],
                         description="An e-mail address, a phone number (+ and country code) or a username.")
    kind = SelectField("Kind", choices=[SelectChoice("", "infer from the target")]
                       + [SelectChoice(k, k) for k in KINDS], default="")


class WatchImportForm(_WatchFields):
    """A CSV file of targets to watch, each row's outcome reported."""

    file = FileField("CSV file", validators=[FileRequired(message="choose a CSV file")],
                     description="A header row with a target column and, optionally, a kind column (email, phone "
                                 "or username; empty: inferred); other columns are ignored. At most 100 rows.")


def _watches_page(add: WatchForm | None = None, upload: WatchImportForm | None = None, report: list | None = None,
                  code: int = 200):
    customer_id = g.portal_customer.id
    filters = {"status": choice("status", STATUSES), "mode": choice("mode", MODES)}
    listing = watchlist.portal_watches(customer_id, livemode=MODES.get(filters["mode"] or ""), status=filters["status"],
                                     page=page_arg())
    keys = watchlist.watch_keys(customer_id)
    add, upload = add or WatchForm(formdata=None), upload or WatchImportForm(formdata=None)
    # A live key is offered first: a test-mode key's watches run in the sandbox, never on the live engine.
    live = next((k.id for k in keys if k.livemode), None)
    for form in (add, upload):
        form.key_id.choices = [(k.id, f"{k.name or k.id} ({k.display}{'' if k.livemode else ', test mode'})")
                               for k in keys]
        if form.key_id.data is None:
            form.key_id.data = live
    # Where a pause, resume or end sends the person back to: this list as it is filtered and paged.
    back = {name: value for name, value in {**filters, "page": listing.page if listing.page > 1 else None}.items()
            if value}
    return render_template("portal/watches.html", watches=listing, filters=filters, statuses=STATUSES, modes=MODES,
                           back=back, add=add, upload=upload, report=report, keys=keys, action=ActionForm(),
                           max_rows=MAX_BULK_TARGETS), code


@bp.get("/watches", endpoint="watches")
@security.requires(roles.READ)
def watches_page():
    return _watches_page()


def _refused(exc: Exception, what: str) -> str:
    """A service's refusal said on the page; anything else is the app's 500. An entry the charge
    wrote before the refusal (an engine that failed after the admission) is this request's."""
    audit.written(getattr(exc, entries.RECORDED, None))
    if not isinstance(exc, ServiceError):
        raise exc
    return f"{what} refused: {exc.message}"


@bp.post("/watches")
@security.requires(roles.SCANS)
def add_watch():
    form = WatchForm()
    form.key_id.choices = []
    if not form.validate_on_submit():
        flash(form_errors(form) or "The form expired: try again.", "error")
        return _watches_page(add=form, code=400)
    try:
        made, outcome = watchlist.portal_create(
            g.portal_customer, form.key_id.data, form.target.data, form.kind.data or None, form.interval.data,
            purpose=form.purpose.data or None, case_ref=form.case_ref.data or None, request_id=g.get("request_id"),
            entry_for=partial(audit.charged_entry, status=302))
    except Exception as exc:  # ``_refused`` re-raises what is not a refusal
        flash(_refused(exc, "Watch"), "error")
        return _watches_page(add=form, code=400)
    audit.written(outcome.recorded)
    flash(f"Watch {made['watch_id']} added: its first scan is queued, the next one due {made['next_scan_at']}.", "ok")
    return redirect(url_for("portal.watches"))


@bp.post("/watches/import")
@security.requires(roles.SCANS)
def import_watches():
    """A CSV file's targets, each watched or rejected with why; the report is this page (a target
    is never put in the session cookie or an address)."""
    form = WatchImportForm()
    form.key_id.choices = []
    if not form.validate_on_submit():
        flash(form_errors(form) or "The form expired: try again.", "error")
        return _watches_page(upload=form, code=400)
    rows, error = csv_targets(form.file.data)
    if error:
        flash(f"Import refused: {error}", "error")
        return _watches_page(upload=form, code=400)
    try:
        made, outcome = watchlist.portal_import(
            g.portal_customer, form.key_id.data, [target for _, target in rows], form.interval.data,
            purpose=form.purpose.data or None, case_ref=form.case_ref.data or None, request_id=g.get("request_id"),
            entry_for=partial(audit.charged_entry, status=200))
    except Exception as exc:  # ``_refused`` re-raises what is not a refusal
        flash(_refused(exc, "Import"), "error")
        return _watches_page(upload=form, code=400)
    audit.written(outcome.recorded)
    report = row_report([number for number, _ in rows], made)
    flash(f"{made['created']} of {made['total']} rows watched, {len(made['rejected'])} rejected: see each row "
          "below.", "ok" if made["created"] else "error")
    return _watches_page(report=report)


def csv_targets(upload) -> tuple[list[tuple[int, dict]], str | None]:
    """``([(row number, {target, kind?})...], None)`` from an uploaded CSV file, numbered as a
    spreadsheet numbers rows (the header is row 1; blank rows are skipped but counted), or
    ``([], why)`` when the file cannot be read as one."""
    raw = upload.stream.read(MAX_CSV_BYTES + 1)
    if len(raw) > MAX_CSV_BYTES:
        return [], f"the file is larger than {MAX_CSV_BYTES // 1024} KB"
    try:
        lines = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    except UnicodeDecodeError:
        return [], "the file is not UTF-8 text (save it from your spreadsheet as CSV UTF-8)"
    except csv.Error:
        return [], "the file is not CSV text"
    numbered = [(number, row) for number, row in enumerate(lines, start=1) if any(cell.strip() for cell in row)]
    if not numbered:
        return [], "the file is empty"
    header = [cell.strip().lower() for cell in numbered[0][1]]
    if "target" not in header:
        return [], "its first row must name the columns, one of them target (and optionally kind)"
    at, kind_at = header.index("target"), header.index("kind") if "kind" in header else None
    rows = []
    for number, row in numbered[1:]:
        target = {"target": row[at] if at < len(row) else ""}
        if kind_at is not None and kind_at < len(row) and row[kind_at].strip():
            target["kind"] = row[kind_at].strip()
        rows.append((number, target))
    return rows, None


def row_report(numbers: list[int], made: dict) -> list[dict]:
    """One line per row, in file order: its number, target and the watch made, or why not."""
    lines = [{"row": numbers[w["index"]], "target": w["target"], "kind": w["kind"], "watch_id": w["watch_id"],
              "scan_id": w["last_scan_id"], "livemode": w["livemode"]} for w in made["watches"]]
    lines += [{"row": numbers[r["index"]], "target": r["target"], "kind": r["kind"], "error": r["error"],
               "message": r["message"]} for r in made["rejected"]]
    return sorted(lines, key=lambda line: line["row"])


def _change_status(watch_id: str, change, done: str):
    if not ActionForm().validate_on_submit():
        flash("The form expired: try again.", "error")
        return redirect(url_for("portal.watches"))
    try:
        change(g.portal_customer.id, watch_id)
    except NotFound:
        abort(404)
    except ServiceError as exc:  # an ended watch is neither paused nor resumed
        flash(exc.message, "error")
    else:
        flash(f"Watch {watch_id} {done}.", "ok")
    return redirect(url_for("portal.watches", **{k: v for k, v in request.args.items()
                                                      if k in ("status", "mode", "page")}))


@bp.post("/watches/<watch_id>/pause")
@security.requires(roles.SCANS)
def pause_watch(watch_id):
    return _change_status(watch_id, partial(_set_status, status="paused"),
                          "paused: no scheduled scan until it is resumed")


@bp.post("/watches/<watch_id>/resume")
@security.requires(roles.SCANS)
def resume_watch(watch_id):
    return _change_status(watch_id, partial(_set_status, status="active"),
                          "resumed: its next scan is due on its schedule")


@bp.post("/watches/<watch_id>/end")
@security.requires(roles.SCANS)
def end_watch(watch_id):
    return _change_status(watch_id, watchlist.portal_end, "ended: its scans stay listed under Scans")


def _set_status(customer_id: str, watch_id: str, *, status: str):
    return watchlist.portal_set_status(customer_id, watch_id, status)
