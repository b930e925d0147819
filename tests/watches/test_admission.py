"""A watch's part of a creation's admission (D28): new watches within the customer's watch limit,
written with their baseline scans or not at all; an existing watch locked and still open."""
from __future__ import annotations

import pytest

from app.billing import charges
from app.extensions import db
from app.plumbing.errors import WatchEnded
from app.scans.models import Scan
from app.watches import admission, watchlist
from app.watches import statements as watch_store
from app.watches.models import Watch


def test_create_watches_is_within_the_watch_limit_whole_or_not_at_all(make_customer):
    from app.accounts import admin
    from app.plumbing.errors import WatchLimitReached
    account = make_customer(tier="enterprise")
    with db.connection_context():
        admin.set_limits(account.id, watches=2)
        with pytest.raises(WatchLimitReached, match="2 more fit now"):
            watchlist.create_watches(account.customer, account.key.id,
                                   [{"target": f"u{n}@example.com"} for n in range(3)], "weekly", request_id=None)
        assert Watch.select().count() == 0 and charges.balance_of(account.id) == 100


def test_a_scheduled_scan_of_a_paused_watch_is_refused_free_and_a_run_of_it_admitted(make_customer):
    account = make_customer(tier="enterprise")
    with db.connection_context():
        body, _ = watchlist.create_watch(account.customer, account.key.id, "jane@example.com", None, "daily",
                                         request_id=None)
        watch_id = body["watch_id"]
        watch_store.update(watch_id, {"status": "paused"})
        before = charges.balance_of(account.id)
        scan = {"request_id": None, "livemode": True, "purpose": None, "case_ref": None, "watch_id": watch_id}
        with pytest.raises(WatchEnded):
            admission.create_watch_scan(account.customer, account.key.id, "email", "jane@example.com",
                                        scheduled=True, **scan)
        assert charges.balance_of(account.id) == before
        outcome = admission.create_watch_scan(account.customer, account.key.id, "email", "jane@example.com", **scan)
        assert outcome.body["watch_id"] == watch_id and charges.balance_of(account.id) < before
        assert Scan.get_by_id(outcome.body["scan_id"]).watch_id == watch_id
        watch_store.update(watch_id, {"status": "ended"})
        with pytest.raises(WatchEnded):
            admission.create_watch_scan(account.customer, account.key.id, "email", "jane@example.com", **scan)
        assert Scan.select().where(Scan.watch_id == watch_id).count() == 2
