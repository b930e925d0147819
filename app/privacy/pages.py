"""The portal's erasure of a scan: the erase form of a scan's page (``app.privacy.erasure``)."""
from __future__ import annotations

from flask import abort, flash, g, redirect, url_for

from app.accounts import portal_roles as roles
from app.plumbing.errors import NotFound, ScanInFlight
from app.portal import security
from app.portal.blueprint import bp
from app.portal.forms import EraseForm
from app.privacy import erasure
from app.scans import reads


@bp.post("/scans/<scan_id>/erase")
@security.requires(roles.SCANS)
def erase_scan(scan_id):
    try:
        scan = reads.scan_detail(g.portal_customer.id, scan_id)
    except NotFound:
        abort(404)
    form = EraseForm()
    if not form.validate_on_submit():
        flash("Tick the box to confirm the erasure.", "error")
    else:
        try:
            erasure.erase_scan(customer_id=g.portal_customer.id, scan_id=scan_id, livemode=scan["livemode"])
            flash("The scan's personal data was erased.", "ok")
        except ScanInFlight as exc:
            flash(exc.message, "error")
    return redirect(url_for("portal.scan_page", scan_id=scan_id))
