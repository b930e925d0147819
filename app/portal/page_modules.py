"""The portal's pages, each domain's in its own package (``app/<domain>/pages``); importing a page
module registers its routes on ``app.portal.blueprint.bp``, each with the one permission it needs
(``security.requires``) or ``security.public``. This is the one list of them."""
from app.accounts.pages import login, single_sign_on, team, two_factor
from app.activity import pages as activity
from app.billing import pages as usage
from app.scans import pages as scans
from app.sources import pages as sources
from app.watches import pages as watches
from app.webhooks.pages import endpoints, keys

__all__ = ["activity", "endpoints", "keys", "login", "scans", "single_sign_on", "sources", "team", "two_factor",
           "usage", "watches"]
