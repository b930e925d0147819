"""Sources (D30): the engine's sources, their health and quarantine, for the customer; the public
status page linked."""
from __future__ import annotations

from flask import render_template

from app.accounts import portal_roles as roles
from app.portal import security
from app.portal.blueprint import bp
from app.sources import health


@bp.get("/sources")
@security.requires(roles.READ)
def sources():
    return render_template("portal/sources.html", sources=health.list_sources())
