"""The portal's pages, one module per page or small group of pages; each registers its routes on
``app.portal.blueprint.bp`` when imported, with the one permission it needs (``security.requires``)
or ``security.public``."""
from app.portal.pages import (
    activity,
    endpoints,
    keys,
    login,
    scans,
    single_sign_on,
    sources,
    team,
    two_factor,
    usage,
    watches,
)

__all__ = ["activity", "endpoints", "keys", "login", "scans", "single_sign_on", "sources", "team", "two_factor",
           "usage", "watches"]
