"""The customer's sign-in and provisioning settings (D32), shown to its admins and owners: the
OpenID Connect provider, whether a SCIM token is set, and the audit sinks pushing the activity log.
An operator sets them all (``customers sso``, ``scim-token``, ``audit-sink``), so the page only
reads, and never shows the client secret, the SCIM token or a sink's token. It is the activity
domain's page, as it reads the accounts' settings and the activity log's sinks (the accounts stand
below the activity log)."""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import g, render_template, url_for

from app.accounts import portal_roles as roles
from app.accounts import scim, sso
from app.activity import audit_sinks
from app.portal import security
from app.portal.blueprint import bp


def _sink_row(sink: dict) -> dict:
    """What an admin sees of a sink: the receiver's host (a URL's path or query may carry a
    credential), its format and how its last delivery went; never its token."""
    return {"host": urlsplit(sink["url"]).hostname or "", "format": sink["format"],
            "delivered": sink["delivered"], "failures": sink["failures"], "last_status": sink["last_status"],
            "next_attempt_at": sink["next_attempt_at"], "created_at": sink["created_at"]}


@bp.get("/single-sign-on")
@security.requires(roles.SSO)
def single_sign_on():
    customer = g.portal_customer
    found = sso.settings_or_none(customer.id)
    return render_template("portal/single_sign_on.html", sso=sso.settings_dict(found) if found else None,
                           redirect_uri=url_for("portal.sso_callback", _external=True),
                           scim=scim.token_status(customer),
                           sinks=[_sink_row(s) for s in audit_sinks.list_sinks(customer.id)])
