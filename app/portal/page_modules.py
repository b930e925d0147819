"""The portal's pages, one module per page or small group of pages; each registers its routes on
``app.portal.blueprint.bp`` when imported, with the one permission it needs (``security.requires``)
or ``security.public``."""
from app.accounts.pages import keys, login, single_sign_on, team, two_factor
from app.activity import pages as activity
from app.billing import pages as usage
from app.scans import pages as scans
from app.sources import pages as sources
from app.watches import pages as watches
from app.webhooks import pages as endpoints

__all__ = ["activity", "endpoints", "keys", "login", "scans", "single_sign_on", "sources", "team", "two_factor",
           "usage", "watches"]
