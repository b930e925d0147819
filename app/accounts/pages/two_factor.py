"""The user's own two-factor login (D21): enrol with a QR code, confirm, disable."""
from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for

from app.accounts import portal_roles as roles
from app.accounts import portal_users, two_factor
from app.plumbing.errors import AccountError
from app.portal import security
from app.portal.blueprint import bp, form_errors
from app.portal.forms import CodeForm


def _qr_svg(uri: str) -> str:
    """The QR code as inline SVG, drawn here: the secret never goes to another service."""
    import segno
    return segno.make(uri, error="m").svg_inline(scale=5, dark="#000", light="#fff", omitsize=False)


def _two_factor_page(form: CodeForm | None = None, code: int = 200, recovery: list[str] | None = None):
    user = g.user
    if recovery is not None:  # shown once, in this response only (no-store)
        return render_template("portal/two_factor.html", recovery=recovery, enabled=True), code
    if two_factor.enabled(user):
        return render_template("portal/two_factor.html", enabled=True, form=form or CodeForm(formdata=None),
                               left=two_factor.recovery_codes_left(user),
                               required=bool(g.portal_customer.require_2fa)), code
    secret = two_factor.pending_secret(user)
    uri = two_factor.provisioning_uri(secret, user.email)
    return render_template("portal/two_factor.html", enabled=False, secret=secret, qr=_qr_svg(uri),
                           form=form or CodeForm(formdata=None), required=bool(g.portal_customer.require_2fa)), code


@bp.get("/account/two-factor", endpoint="two_factor")  # named in security.ENROLMENT_ENDPOINTS
@security.requires(roles.ACCOUNT)
def two_factor_page():
    return _two_factor_page()


@bp.post("/account/two-factor/confirm")
@security.requires(roles.ACCOUNT)
def two_factor_confirm():
    form = CodeForm()
    if not form.validate_on_submit():
        flash(form_errors(form) or "The form expired: try again.", "error")
        return _two_factor_page(form, 400)
    try:
        codes = two_factor.confirm_enrolment(g.user, form.code.data, request.remote_addr)
    except portal_users.LoginThrottled as exc:
        flash(f"Too many wrong codes. Wait {-(-exc.retry_after // 60)} minutes and try again.", "error")
        return _two_factor_page(form, 429)
    except AccountError as exc:
        flash(f"{exc}. Check your phone's clock and type the code your app shows now.", "error")
        return _two_factor_page(form, 400)
    flash("Two-factor login is on.", "ok")
    return _two_factor_page(recovery=codes)


@bp.post("/account/two-factor/disable")
@security.requires(roles.ACCOUNT)
def two_factor_disable():
    form = CodeForm()
    if form.validate_on_submit():
        try:
            two_factor.disable(g.user, form.code.data, request.remote_addr)
        except portal_users.LoginThrottled as exc:
            flash(f"Too many wrong codes. Wait {-(-exc.retry_after // 60)} minutes and try again.", "error")
            return _two_factor_page(form, 429)
        except AccountError as exc:
            flash(str(exc), "error")
            return _two_factor_page(form, 400)
        flash("Two-factor login is off.", "ok")
    return redirect(url_for("portal.two_factor"))
