"""The activity log (D20): the page, its filters (a target only from a posted form) and its CSV export."""
from __future__ import annotations

import re
from datetime import datetime

from flask import current_app, flash, g, redirect, render_template, url_for

from app.accounts import admin
from app.accounts import portal_roles as roles
from app.activity import entries as activity
from app.plumbing import time_bounds
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import utcnow
from app.portal import audit, security
from app.portal.blueprint import bp, csv_cell, csv_download, filter_source, target_filter

ACTIVITY_MODES = {"live": True, "test": False}
ACTIVITY_CSV_COLUMNS = ("time_utc", "mode", "action", "key_id", "user_email", "resource_id", "status", "credits",
                        "client_address", "request_id", "purpose", "case_ref")
ID_ARG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ACTION_ARG = re.compile(r"^[a-z_]+\.[a-z_]+$")


def _moment_arg(name: str, errors: list[str]) -> datetime | None:
    """A time filter as the page's inputs send it (``YYYY-MM-DDTHH:MM``, UTC), under the API's
    rule (``time_bounds``): one it refuses is a form error, never a query."""
    raw = (filter_source().get(name) or "").strip()
    if not raw:
        return None
    try:
        return time_bounds.parse(raw)
    except time_bounds.InvalidTime as exc:
        errors.append(f"{name.replace('_', ' ')}: {exc}")
        return None


def _activity_filters() -> tuple[dict, dict, list[str]]:
    """The activity page's filters as typed (for the form and links) and as the service takes
    them, with the errors of those that are not valid (such a filter is not applied)."""
    errors: list[str] = []
    source = filter_source()
    shown = {name: (source.get(name) or "").strip()[:1000]
             for name in ("action", "key", "resource", "created_after", "created_before", "mode")}
    shown["target"] = target_filter("target", "target", 1000, errors)
    query: dict = {"livemode": ACTIVITY_MODES.get(shown["mode"])}
    for name, column, rule in (("action", "action", ACTION_ARG), ("key", "key_id", ID_ARG),
                               ("resource", "resource_id", ID_ARG)):
        if shown[name] and not rule.match(shown[name]):
            errors.append(f"{name}: not a valid {'action name' if name == 'action' else 'id'}")
        elif shown[name]:
            query[column] = shown[name]
    for name in ("created_after", "created_before"):
        query[name] = _moment_arg(name, errors)
    if shown["target"]:
        query["target"] = shown["target"]
    return shown, query, errors


@bp.route("/activity", methods=["GET", "POST"])
@security.requires(roles.READ)
def activity_log():
    shown, query, errors = _activity_filters()
    cursor = filter_source().get("after")
    code = 400 if errors else 200
    page = {"entries": [], "next": None}
    if not errors:
        try:
            page = activity.portal_entries(g.portal_customer.id, starting_after=cursor if cursor and
                                           ID_ARG.match(cursor) else None, **query)
        except InvalidRequest as exc:
            errors, code = [str(exc)], 400
    for error in errors:
        flash(f"Activity filter: {error}", "error")
    keys = admin.customer_keys(g.portal_customer.id)
    return render_template("portal/activity.html", page=page, filters=shown, keys=keys,
                           key_names={k.id: k.name or k.display for k in keys},
                           actions=audit.all_actions(current_app),
                           modes=ACTIVITY_MODES, export_args={k: v for k, v in shown.items() if v},
                           cursor=cursor), code


@bp.route("/activity.csv", methods=["GET", "POST"])
@security.requires(roles.READ)
def activity_csv():
    shown, query, errors = _activity_filters()
    if not errors:
        try:
            entries = activity.export_entries(g.portal_customer.id, **query)
        except InvalidRequest as exc:
            errors = [str(exc)]
    if errors:
        for error in errors:
            flash(f"Activity export: {error}", "error")
        # Back to the page with the other filters: a target never goes into an address.
        return redirect(url_for("portal.activity_log", **{k: v for k, v in shown.items() if v and k != "target"}))

    rows = ([entry["created_at"], "live" if entry["livemode"] else "test"]
            + [csv_cell(entry[name]) for name in ACTIVITY_CSV_COLUMNS[2:]] for entry in entries)
    return csv_download(f"activity-{utcnow():%Y%m%dT%H%M%SZ}.csv", ACTIVITY_CSV_COLUMNS, rows)
