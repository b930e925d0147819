"""The customer's single sign-on settings (D32), shown to its admins and owners; an operator sets
them (``customers sso``), so the page only reads, and never shows the client secret."""
from __future__ import annotations

from flask import g, render_template, url_for

from app.portal import security
from app.portal.blueprint import bp
from app.services.accounts import portal_roles as roles
from app.services.accounts import sso


@bp.get("/single-sign-on")
@security.requires(roles.SSO)
def single_sign_on():
    found = sso.settings_or_none(g.portal_customer.id)
    return render_template("portal/single_sign_on.html", sso=sso.settings_dict(found) if found else None,
                           redirect_uri=url_for("portal.sso_callback", _external=True))
