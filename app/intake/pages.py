"""The portal's re-run of a scan: the button of a partial scan's page, a creation (``app.intake.creation``)
with the key that made the scan."""
from __future__ import annotations

from functools import partial

from flask import abort, flash, g, redirect, url_for

from app.accounts import portal_roles as roles
from app.activity import entries
from app.intake import creation
from app.plumbing.errors import NotFound, ServiceError
from app.portal import audit, security
from app.portal.blueprint import bp
from app.portal.forms import ActionForm


@bp.post("/scans/<scan_id>/rerun")
@security.requires(roles.SCANS)
def rerun_scan(scan_id):
    """The re-run button of a partial scan: the API's re-run, with the key that made the scan."""
    if not ActionForm().validate_on_submit():
        flash("The form expired: try again.", "error")
        return redirect(url_for("portal.scan_page", scan_id=scan_id))
    try:
        # Its entry is written with its charge (D25); an exception raised after carries it.
        outcome = creation.portal_rerun(g.portal_customer, scan_id, request_id=g.get("request_id"),
                                        entry_for=partial(audit.charged_entry, status=302))
    except NotFound:
        abort(404)
    except Exception as exc:
        audit.written(getattr(exc, entries.RECORDED, None))
        if not isinstance(exc, ServiceError):
            raise
        flash(f"Re-run refused: {exc.message}", "error")
        return redirect(url_for("portal.scan_page", scan_id=scan_id))
    audit.written(outcome.recorded)
    flash("Re-run queued: it asks again the sources that could not answer. This is its page.", "ok")
    return redirect(url_for("portal.scan_page", scan_id=outcome.body["scan_id"]))
