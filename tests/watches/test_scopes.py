"""The watches' scope (``app.watches.scopes``): declared in the watches' package, needed by every
watch view and by a watch's own scans."""
from datetime import datetime

from app.accounts import access, admin
from app.api import hooks
from app.watches import scopes as watch_scopes
from app.watches import watchlist
from tests.domain_fixtures import new_customer

NOW = datetime(2026, 11, 21, 12, 0, 0)


def test_the_watches_scope_is_a_keys_and_every_watch_view_needs_it(app):
    assert watch_scopes.WATCHES in access.SCOPES and "watches" in access.SCOPE_WORDS[watch_scopes.WATCHES]
    needed = {hooks.declared(app, rule, method, "scope") for rule in app.url_map.iter_rules()
              if rule.rule.startswith("/api/v1/watches") for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert needed == {watch_scopes.WATCHES}


def test_a_key_narrowed_without_it_makes_no_watch_scan(conn):
    cust, _ = new_customer()
    every, _ = admin.issue_key(cust.id, "every")
    narrow, _ = admin.issue_key(cust.id, "narrow", scopes=[s for s in access.SCOPES if s != watch_scopes.WATCHES])
    assert watchlist.key_may_watch(every, NOW) and not watchlist.key_may_watch(narrow, NOW)
